#pragma once
// DeviceModel: a Model's layers on one GPU. It mirrors a host Model (the same layers and the
// same initial weights, so a seed gives the same network on either device) and keeps, in one
// flat buffer each, the fp32 master weights, their fp32 gradients and, for mixed precision,
// the 16-bit compute copy of the weights; activations are stored in the compute dtype. Each
// parameter starts at a 256-byte boundary of the flat buffers (the gaps stay zero), so one
// all-reduce, one finiteness check and one fused optimizer launch cover the whole model.
// The host Model stays the record for checkpoints: Load/Store copy between the two.
// Thread-safety: one thread (the replica's), which has activated the context.

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/kernels/cpu/softmax_xent.h"
#include "trainer/kernels/cuda/device_tensor.h"
#include "trainer/model/model.h"

namespace lockstep::trainer {

class DeviceLayer;

class DeviceModel {
 public:
  // InvalidArgument naming the layer when one has no GPU implementation (Dropout).
  static absl::StatusOr<std::unique_ptr<DeviceModel>> Create(cuda::GpuContext* ctx,
                                                             SequentialModel& host,
                                                             cuda::DType compute);
  ~DeviceModel();

  // Forward, loss and backward on one host batch; the gradients (multiplied by `loss_scale`)
  // land in grads(). The loss and count come back to the host.
  absl::StatusOr<cpu::XentResult> TrainStep(const Tensor& x, const std::vector<int32_t>& labels,
                                            float loss_scale);
  absl::StatusOr<cpu::XentResult> Evaluate(const Tensor& x, const std::vector<int32_t>& labels);

  // Host tensors (in Model::Params() order) to or from a flat device buffer laid out as the
  // parameters: LoadFlat also refreshes the compute copy when `flat` is params().
  absl::Status LoadFlat(const std::vector<Tensor*>& host, float* flat);
  absl::Status StoreFlat(float* flat, const std::vector<Tensor*>& host);
  // Rewrites the 16-bit compute copy from the master weights (after LoadFlat of params).
  absl::Status RefreshComputeCopy();

  float* params() const { return params_.as<float>(); }
  float* grads() const { return grads_.as<float>(); }
  void* compute_copy() const;  // null for fp32
  int64_t flat_size() const { return flat_size_; }
  const std::vector<int64_t>& offsets() const { return offsets_; }
  cuda::DType compute() const { return compute_; }
  cuda::GpuContext* ctx() const { return ctx_; }

 private:
  DeviceModel() = default;
  absl::StatusOr<const cuda::DeviceTensor*> Forward(const Tensor& x,
                                                    const std::vector<int32_t>& labels);

  cuda::GpuContext* ctx_ = nullptr;
  cuda::DType compute_ = cuda::DType::kF32;
  std::vector<std::unique_ptr<DeviceLayer>> layers_;
  std::vector<int64_t> offsets_;  // per parameter, in elements
  int64_t flat_size_ = 0;
  cuda::DeviceTensor params_, grads_, compute_copy_;
  cuda::DeviceTensor input_, dlogits_;
  cuda::DeviceBuffer labels_;
  size_t labels_capacity_ = 0;
};

}  // namespace lockstep::trainer
