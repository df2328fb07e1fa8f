#include "trainer/model/device_params.h"

#include <algorithm>

#include "trainer/kernels/cuda/check.h"
#include "trainer/kernels/cuda/elementwise.h"

namespace lockstep::trainer {

using cuda::DeviceTensor;
using cuda::DType;

absl::Status DeviceParams::Init(cuda::GpuContext* ctx, const std::vector<Tensor*>& trainable,
                                const std::vector<Tensor*>& state, DType compute) {
  ctx_ = ctx;
  compute_ = compute;
  host_ = trainable;
  host_.insert(host_.end(), state.begin(), state.end());
  trainable_ = trainable.size();
  offsets_.clear();
  int64_t size = 0;
  for (size_t i = 0; i < host_.size(); ++i) {
    if (i == trainable_) trainable_size_ = size;
    offsets_.push_back(size);
    size += (host_[i]->size() + kAlign - 1) / kAlign * kAlign;
  }
  if (trainable_ == host_.size()) trainable_size_ = size;
  total_size_ = size;
  const Shape flat{std::max<int64_t>(size, 1)};
  if (absl::Status s = params_.Resize(ctx, flat, DType::kF32); !s.ok()) return s;
  if (absl::Status s = grads_.Resize(ctx, flat, DType::kF32); !s.ok()) return s;
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudaMemsetAsync(params_.data(), 0, params_.bytes(), ctx->stream()));
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudaMemsetAsync(grads_.data(), 0, grads_.bytes(), ctx->stream()));
  if (compute != DType::kF32) {
    if (absl::Status s = compute_copy_.Resize(ctx, flat, compute); !s.ok()) return s;
  }
  return Load();
}

DeviceTensor DeviceParams::compute_view(size_t i, Shape shape) const {
  if (compute_ == DType::kF32) return DeviceTensor::View(master(i), std::move(shape), DType::kF32);
  return DeviceTensor::View(static_cast<char*>(compute_copy_.data()) +
                                static_cast<size_t>(offsets_.at(i)) * cuda::DTypeSize(compute_),
                            std::move(shape), compute_);
}

void* DeviceParams::compute_copy() const {
  return compute_ == DType::kF32 ? nullptr : compute_copy_.data();
}

std::vector<int64_t> DeviceParams::trainable_sizes() const {
  std::vector<int64_t> out;
  for (size_t i = 0; i < trainable_; ++i) out.push_back(host_[i]->size());
  return out;
}

absl::Status DeviceParams::LoadFlat(const std::vector<Tensor*>& host, float* flat) {
  for (size_t i = 0; i < host.size() && i < offsets_.size(); ++i) {
    LOCKSTEP_GPU_RETURN_IF_ERROR(cudaMemcpyAsync(
        flat + offsets_[i], host[i]->data(), static_cast<size_t>(host[i]->size()) * sizeof(float),
        cudaMemcpyHostToDevice, ctx_->stream()));
  }
  if (flat == params()) return RefreshComputeCopy();
  return absl::OkStatus();
}

absl::Status DeviceParams::StoreFlat(float* flat, const std::vector<Tensor*>& host) {
  for (size_t i = 0; i < host.size() && i < offsets_.size(); ++i) {
    LOCKSTEP_GPU_RETURN_IF_ERROR(cudaMemcpyAsync(
        host[i]->data(), flat + offsets_[i], static_cast<size_t>(host[i]->size()) * sizeof(float),
        cudaMemcpyDeviceToHost, ctx_->stream()));
  }
  return ctx_->Synchronize();
}

absl::Status DeviceParams::Load() { return LoadFlat(host_, params()); }
absl::Status DeviceParams::Store() { return StoreFlat(params(), host_); }

absl::Status DeviceParams::RefreshComputeCopy() {
  if (compute_ == DType::kF32) return absl::OkStatus();
  return cuda::Cast(ctx_, params(), DType::kF32, compute_copy_.data(), compute_, total_size_);
}

}  // namespace lockstep::trainer
