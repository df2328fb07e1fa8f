#pragma once
// What a layer family's GPU source builds on: the device op a node of the graph becomes on the
// GPU (DeviceOp), what one step tells it, the layer's weights on the device, and the pieces
// several families' ops share. DeviceGraph (trainer/model/device_graph.h) runs the ops; each
// family registers a maker per layer kind (Registry::GpuOp, trainer/layers/registry.h).
// CUDA builds only. Thread-safety: one thread (the replica's), which has activated the context.

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/graph/layer.h"
#include "trainer/kernels/cuda/activation.h"
#include "trainer/kernels/cuda/check.h"
#include "trainer/kernels/cuda/device_tensor.h"
#include "trainer/kernels/cuda/elementwise.h"

namespace lockstep::trainer::layers {

using cuda::DeviceTensor;
using cuda::DType;
using cuda::GpuContext;

// What one step tells a node's op.
struct StepInfo {
  bool training = false;
  uint64_t seed = 0;  // this node's draws in this step
  // Per input: its mask (fp32 [batch, time] of 0/1), or null. Valid until the next step.
  std::vector<const DeviceTensor*> masks;
  const DeviceTensor* mask(size_t i) const { return i < masks.size() ? masks[i] : nullptr; }
};

// One node of the graph on the GPU. Forward returns the output: a view of memory the op owns
// (or of its input), valid until the op runs again. Backward fills dx[i] (owned tensors, null
// where input i needs no gradient) from the node's inputs, its output and dL/d(output), and
// adds into its layer's weight gradients.
class DeviceOp {
 public:
  virtual ~DeviceOp() = default;
  virtual absl::StatusOr<DeviceTensor> Forward(const std::vector<const DeviceTensor*>& x,
                                               const StepInfo& step) = 0;
  virtual absl::Status Backward(const std::vector<const DeviceTensor*>& x, const DeviceTensor& y,
                                const DeviceTensor& dy, const std::vector<DeviceTensor*>& dx) = 0;
  // After the weights were loaded from the host (a restored checkpoint).
  virtual absl::Status Reloaded() { return absl::OkStatus(); }
  // The mask of the output that the op made in Forward (MaskRule::kOwn), or null.
  virtual const DeviceTensor* OwnMask() const { return nullptr; }
  // The outputs after the first (a recurrent layer's final states), after Forward.
  virtual absl::StatusOr<std::vector<DeviceTensor>> MoreOutputs() {
    return std::vector<DeviceTensor>{};
  }
  // Backward from every output's gradient: dy[k] is null where output k feeds no loss (never
  // the first, for an op with one output).
  virtual absl::Status BackwardAll(const std::vector<const DeviceTensor*>& x,
                                   const std::vector<const DeviceTensor*>& y,
                                   const std::vector<const DeviceTensor*>& dy,
                                   const std::vector<DeviceTensor*>& dx) {
    return Backward(x, *y[0], *dy[0], dx);
  }
};

inline DeviceTensor ViewOf(const DeviceTensor& t) { return t.Reshaped(t.shape()); }

// dst (owned) = a copy of src.
inline absl::Status Copy(GpuContext* ctx, const DeviceTensor& src, DeviceTensor* dst) {
  LOCKSTEP_RETURN_IF_ERROR(dst->Resize(ctx, src.shape(), src.dtype()));
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudaMemcpyAsync(dst->data(), src.data(), src.bytes(),
                                               cudaMemcpyDeviceToDevice, ctx->stream()));
  return absl::OkStatus();
}

// A layer's weight on the device.
struct DeviceWeight {
  DeviceTensor value;       // the compute-dtype view, shaped as the host weight
  float* master = nullptr;  // fp32
  float* grad = nullptr;    // fp32; null when not trained
};

// The layer's weights by Keras name.
class LayerWeights {
 public:
  LayerWeights(const graph::Layer& l, std::map<std::string, DeviceWeight> w, bool shared)
      : layer_(&l), w_(std::move(w)), shared_(shared) {}
  const DeviceWeight* find(const std::string& name) const {
    auto it = w_.find(name);
    return it == w_.end() ? nullptr : &it->second;
  }
  const DeviceWeight& at(const std::string& name) const { return w_.at(name); }
  // A weight's fp32 master and gradient by name; null when the layer has no such weight (scale
  // or center off, no bias) or it is not trained.
  float* master(const std::string& name) const {
    const DeviceWeight* w = find(name);
    return w != nullptr ? w->master : nullptr;
  }
  float* grad(const std::string& name) const {
    const DeviceWeight* w = find(name);
    return w != nullptr ? w->grad : nullptr;
  }
  // A layer called at several nodes sums its calls' gradients: the kernels that overwrite a
  // gradient write into scratch, which Commit adds.
  bool shared() const { return shared_; }

 private:
  const graph::Layer* layer_;
  std::map<std::string, DeviceWeight> w_;
  bool shared_;
};

// Where an overwriting kernel writes a weight's gradient: the flat gradient itself, or scratch
// that Commit adds to it for a shared layer. Null when the weight is not trained.
class GradOut {
 public:
  GradOut(GpuContext* ctx, const DeviceWeight* w, bool shared)
      : ctx_(ctx), w_(w), shared_(shared) {}
  absl::StatusOr<float*> Target() {
    if (w_ == nullptr || w_->grad == nullptr) return static_cast<float*>(nullptr);
    if (!shared_) return w_->grad;
    LOCKSTEP_RETURN_IF_ERROR(scratch_.Resize(ctx_, w_->value.shape(), DType::kF32));
    return scratch_.as<float>();
  }
  absl::Status Commit() {
    if (w_ == nullptr || w_->grad == nullptr || !shared_) return absl::OkStatus();
    DeviceTensor g = DeviceTensor::View(w_->grad, w_->value.shape(), DType::kF32);
    return cuda::AddInto(ctx_, &g, scratch_);
  }

 private:
  GpuContext* ctx_;
  const DeviceWeight* w_;
  bool shared_;
  DeviceTensor scratch_;
};

// The activation a linear layer ends in: y = act(z), with z kept for backward.
class ActivationTail {
 public:
  ActivationTail(GpuContext* ctx, Activation a) : ctx_(ctx), a_(a) {}
  bool linear() const { return a_.kind == Act::kLinear; }
  // z: the linear part's output (owned by the op); returns y.
  absl::StatusOr<DeviceTensor> Apply(const DeviceTensor& z) {
    if (linear()) return ViewOf(z);
    LOCKSTEP_RETURN_IF_ERROR(cuda::ActivationForward(ctx_, a_, z, &y_));
    return ViewOf(y_);
  }
  // dL/dz from dL/dy.
  absl::StatusOr<const DeviceTensor*> Back(const DeviceTensor& z, const DeviceTensor& y,
                                           const DeviceTensor& dy) {
    if (linear()) return &dy;
    LOCKSTEP_RETURN_IF_ERROR(cuda::ActivationBackward(ctx_, a_, z, y, dy, &dz_));
    return &dz_;
  }

 private:
  GpuContext* ctx_;
  Activation a_;
  DeviceTensor y_, dz_;
};

// The activation a layer with options O ends in.
template <typename O>
Activation ActOf(const graph::Layer& l) {
  return graph::OptionsOf<O>(l)->activation;
}

// What a family's maker gets to build the op of one call of `layer`.
struct GpuOpArgs {
  GpuContext* ctx = nullptr;
  const graph::Layer& layer;
  const LayerWeights& weights;  // the layer's (a wrapper's inner layer shares its wrapper's)
  Shape out;                    // the call's per-example output shape
  DType compute = DType::kF32;
  // A device int the op counts input ids outside a table into (an Embedding's); the step fails
  // with DataLoss naming how many.
  std::function<absl::StatusOr<int*>()> bad_input_counter;
  // The op of an inner layer (a wrapper's), over the same weights, per-example output `out`.
  std::function<absl::StatusOr<std::unique_ptr<DeviceOp>>(const graph::Layer&, const Shape&)> inner;
};

}  // namespace lockstep::trainer::layers
