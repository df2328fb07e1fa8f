#pragma once
// DeviceModel: a built-in model's layers on one GPU (device_net.h). It mirrors the host
// SequentialModel (the same layers and the same initial weights, so a seed gives the same
// network on either device); activations are stored in the compute dtype.
// Thread-safety: one thread (the replica's), which has activated the context.

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/kernels/cpu/softmax_xent.h"
#include "trainer/kernels/cuda/device_tensor.h"
#include "trainer/model/device_net.h"
#include "trainer/model/model.h"

namespace lockstep::trainer {

class DeviceLayer;

class DeviceModel final : public DeviceNet {
 public:
  // InvalidArgument naming the layer when one has no GPU implementation.
  static absl::StatusOr<std::unique_ptr<DeviceModel>> Create(cuda::GpuContext* ctx,
                                                             SequentialModel& host,
                                                             cuda::DType compute);
  ~DeviceModel() override;

  absl::StatusOr<cpu::XentResult> TrainStep(const Tensor& x, const std::vector<int32_t>& labels,
                                            float loss_scale) override;
  absl::StatusOr<cpu::XentResult> Evaluate(const Tensor& x,
                                           const std::vector<int32_t>& labels) override;

 private:
  DeviceModel() = default;
  absl::StatusOr<const cuda::DeviceTensor*> Forward(const Tensor& x,
                                                    const std::vector<int32_t>& labels);

  cuda::GpuContext* ctx_ = nullptr;
  std::vector<std::unique_ptr<DeviceLayer>> layers_;
  cuda::DeviceTensor input_, dlogits_;
  cuda::DeviceBuffer labels_;
  size_t labels_capacity_ = 0;
};

}  // namespace lockstep::trainer
