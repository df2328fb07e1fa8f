#pragma once
// The weights of a model on one GPU (DeviceGraph's, device_graph.h) in flat device buffers.
//
// DeviceParams holds, in one flat buffer each, the fp32 master weights, their fp32 gradients
// and, for mixed precision, the 16-bit compute copy of the weights; each weight starts at a
// multiple of kAlign elements (the gaps stay zero). The trainable weights come first: the
// first trainable_size() elements are what one all-reduce, one finiteness check and one fused
// optimizer launch cover. Weights that are kept but not trained (moving statistics, a frozen
// layer's kernel) follow, so the layers read every weight, and its compute copy, alike.
// The host model stays the record for checkpoints: Load/Store copy between the two.
// Thread-safety: one thread (the replica's), which has activated the context.

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/kernels/cuda/device_tensor.h"
#include "trainer/tensor/tensor.h"

namespace lockstep::trainer {

class DeviceParams {
 public:
  static constexpr int64_t kAlign = 64;  // elements: 256 bytes of fp32, 128 of fp16

  // Lays out `trainable` then `state` (host tensors, which stay the record) and uploads them.
  absl::Status Init(cuda::GpuContext* ctx, const std::vector<Tensor*>& trainable,
                    const std::vector<Tensor*>& state, cuda::DType compute);

  // Host tensors (a prefix of trainable then state, in Init's order, or parallel lists such as
  // an optimizer's slots) to or from a flat device buffer laid out as the weights. LoadFlat of
  // params() also refreshes the compute copy.
  absl::Status LoadFlat(const std::vector<Tensor*>& host, float* flat);
  absl::Status StoreFlat(float* flat, const std::vector<Tensor*>& host);
  // Every host weight (trainable and state) to the device, and back.
  absl::Status Load();
  absl::Status Store();
  // Rewrites the 16-bit compute copy from the master weights.
  absl::Status RefreshComputeCopy();

  // Weight i (in Init's order): its master, gradient (null for state) and compute-dtype view.
  float* master(size_t i) const { return params() + offsets_.at(i); }
  float* grad(size_t i) const { return i < trainable_ ? grads() + offsets_.at(i) : nullptr; }
  cuda::DeviceTensor compute_view(size_t i, Shape shape) const;

  float* params() const { return params_.as<float>(); }
  float* grads() const { return grads_.as<float>(); }
  void* compute_copy() const;  // null for fp32
  int64_t trainable_size() const { return trainable_size_; }
  const std::vector<int64_t>& offsets() const { return offsets_; }
  // The trainable weights' sizes, in elements (ClipScales's segments).
  std::vector<int64_t> trainable_sizes() const;
  cuda::DType compute() const { return compute_; }
  cuda::GpuContext* ctx() const { return ctx_; }

 private:
  cuda::GpuContext* ctx_ = nullptr;
  cuda::DType compute_ = cuda::DType::kF32;
  std::vector<Tensor*> host_;
  size_t trainable_ = 0;
  std::vector<int64_t> offsets_;  // per weight, in elements
  int64_t trainable_size_ = 0, total_size_ = 0;
  cuda::DeviceTensor params_, grads_, compute_copy_;
};

}  // namespace lockstep::trainer
