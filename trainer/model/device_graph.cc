#include "trainer/model/device_graph.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <string>

#include "trainer/graph/layers/attention.h"
#include "trainer/graph/layers/conv.h"
#include "trainer/graph/layers/core.h"
#include "trainer/graph/layers/normalization.h"
#include "trainer/graph/layers/pooling.h"
#include "trainer/graph/layers/recurrent.h"
#include "trainer/kernels/cuda/activation.h"
#include "trainer/kernels/cuda/attention.h"
#include "trainer/kernels/cuda/check.h"
#include "trainer/kernels/cuda/conv_nd.h"
#include "trainer/kernels/cuda/dropout.h"
#include "trainer/kernels/cuda/elementwise.h"
#include "trainer/kernels/cuda/keras_dense.h"
#include "trainer/kernels/cuda/loss.h"
#include "trainer/kernels/cuda/masking.h"
#include "trainer/kernels/cuda/merge.h"
#include "trainer/kernels/cuda/normalization.h"
#include "trainer/kernels/cuda/pooling.h"
#include "trainer/kernels/cuda/recurrent.h"
#include "trainer/kernels/cuda/spatial.h"
#include "trainer/model/gpu_support.h"

namespace lockstep::trainer {

using cuda::DeviceTensor;
using cuda::DType;
using cuda::GpuContext;
using GraphLayer = graph::Layer;
using graph::OptionsOf;

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

namespace {

DeviceTensor ViewOf(const DeviceTensor& t) { return t.Reshaped(t.shape()); }

// dst (owned) = a copy of src.
absl::Status Copy(GpuContext* ctx, const DeviceTensor& src, DeviceTensor* dst) {
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
  LayerWeights(const GraphLayer& l, std::map<std::string, DeviceWeight> w, bool shared)
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
  const GraphLayer* layer_;
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

// Dense: the kernel over the last axis, bias, activation.
class DenseOp final : public DeviceOp {
 public:
  DenseOp(GpuContext* ctx, const LayerWeights& w, Activation act)
      : ctx_(ctx),
        w_(w),
        tail_(ctx, act),
        dk_(ctx, w.find("kernel"), w.shared()),
        db_(ctx, w.find("bias"), w.shared()) {}
  absl::StatusOr<DeviceTensor> Forward(const std::vector<const DeviceTensor*>& x,
                                       const StepInfo&) override {
    const DeviceWeight* b = w_.find("bias");
    LOCKSTEP_RETURN_IF_ERROR(cuda::KerasDenseForward(ctx_, *x[0], w_.at("kernel").value,
                                                     b != nullptr ? b->master : nullptr, &z_));
    return tail_.Apply(z_);
  }
  absl::Status Backward(const std::vector<const DeviceTensor*>& x, const DeviceTensor& y,
                        const DeviceTensor& dy, const std::vector<DeviceTensor*>& dx) override {
    absl::StatusOr<const DeviceTensor*> dz = tail_.Back(z_, y, dy);
    if (!dz.ok()) return dz.status();
    absl::StatusOr<float*> dk = dk_.Target();
    absl::StatusOr<float*> db = db_.Target();
    if (!dk.ok()) return dk.status();
    if (!db.ok()) return db.status();
    LOCKSTEP_RETURN_IF_ERROR(
        cuda::KerasDenseBackward(ctx_, *x[0], w_.at("kernel").value, **dz, dx[0], *dk, *db));
    LOCKSTEP_RETURN_IF_ERROR(dk_.Commit());
    return db_.Commit();
  }

 private:
  GpuContext* ctx_;
  const LayerWeights& w_;
  ActivationTail tail_;
  GradOut dk_, db_;
  DeviceTensor z_;
};

class ActivationOp final : public DeviceOp {
 public:
  ActivationOp(GpuContext* ctx, Activation a) : ctx_(ctx), a_(a) {}
  absl::StatusOr<DeviceTensor> Forward(const std::vector<const DeviceTensor*>& x,
                                       const StepInfo&) override {
    LOCKSTEP_RETURN_IF_ERROR(cuda::ActivationForward(ctx_, a_, *x[0], &y_));
    return ViewOf(y_);
  }
  absl::Status Backward(const std::vector<const DeviceTensor*>& x, const DeviceTensor& y,
                        const DeviceTensor& dy, const std::vector<DeviceTensor*>& dx) override {
    return cuda::ActivationBackward(ctx_, a_, *x[0], y, dy, dx[0]);
  }

 private:
  GpuContext* ctx_;
  Activation a_;
  DeviceTensor y_;
};

// Flatten, Reshape: a view with the node's output shape.
class ReshapeOp final : public DeviceOp {
 public:
  ReshapeOp(GpuContext* ctx, Shape per_example) : ctx_(ctx), out_(std::move(per_example)) {}
  absl::StatusOr<DeviceTensor> Forward(const std::vector<const DeviceTensor*>& x,
                                       const StepInfo&) override {
    Shape s{x[0]->dim(0)};
    s.insert(s.end(), out_.begin(), out_.end());
    return x[0]->Reshaped(std::move(s));
  }
  absl::Status Backward(const std::vector<const DeviceTensor*>& x, const DeviceTensor&,
                        const DeviceTensor& dy, const std::vector<DeviceTensor*>& dx) override {
    LOCKSTEP_RETURN_IF_ERROR(Copy(ctx_, dy, dx[0]));
    dx[0]->Reshape(x[0]->shape());
    return absl::OkStatus();
  }

 private:
  GpuContext* ctx_;
  Shape out_;
};

// RepeatVector: [b, d] -> [b, n, d] as zeros [b, n, d] + x [b, 1, d] broadcast, whose
// gradient sums over the repeats.
class RepeatOp final : public DeviceOp {
 public:
  RepeatOp(GpuContext* ctx, int64_t n) : ctx_(ctx), n_(n) {}
  absl::StatusOr<DeviceTensor> Forward(const std::vector<const DeviceTensor*>& x,
                                       const StepInfo&) override {
    const int64_t b = x[0]->dim(0), d = x[0]->dim(1);
    LOCKSTEP_RETURN_IF_ERROR(zeros_.Resize(ctx_, {b, n_, d}, x[0]->dtype()));
    LOCKSTEP_GPU_RETURN_IF_ERROR(cudaMemsetAsync(zeros_.data(), 0, zeros_.bytes(), ctx_->stream()));
    x3_ = x[0]->Reshaped({b, 1, d});
    LOCKSTEP_RETURN_IF_ERROR(cuda::MergeForward(ctx_, MergeOp::kAdd, {&zeros_, &x3_}, &y_));
    return ViewOf(y_);
  }
  absl::Status Backward(const std::vector<const DeviceTensor*>& x, const DeviceTensor& y,
                        const DeviceTensor& dy, const std::vector<DeviceTensor*>& dx) override {
    x3_ = x[0]->Reshaped({x[0]->dim(0), 1, x[0]->dim(1)});
    LOCKSTEP_RETURN_IF_ERROR(
        cuda::MergeBackward(ctx_, MergeOp::kAdd, {&zeros_, &x3_}, y, dy, {nullptr, dx[0]}));
    dx[0]->Reshape(x[0]->shape());
    return absl::OkStatus();
  }

 private:
  GpuContext* ctx_;
  int64_t n_;
  DeviceTensor zeros_, x3_, y_;
};

// Dropout and GaussianNoise: identity outside training.
class NoiseOp final : public DeviceOp {
 public:
  NoiseOp(GpuContext* ctx, bool dropout, float amount, Shape noise_shape)
      : ctx_(ctx), dropout_(dropout), amount_(amount), noise_(std::move(noise_shape)) {}
  absl::StatusOr<DeviceTensor> Forward(const std::vector<const DeviceTensor*>& x,
                                       const StepInfo& step) override {
    active_ = step.training && amount_ > 0;
    if (!active_) return ViewOf(*x[0]);
    seed_ = step.seed;
    if (!dropout_) {
      LOCKSTEP_RETURN_IF_ERROR(cuda::GaussianNoise(ctx_, *x[0], amount_, seed_, &y_));
    } else {
      LOCKSTEP_RETURN_IF_ERROR(
          cuda::DropoutForward(ctx_, *x[0], amount_, NoiseShape(*x[0]), seed_, &y_));
    }
    return ViewOf(y_);
  }
  absl::Status Backward(const std::vector<const DeviceTensor*>& x, const DeviceTensor&,
                        const DeviceTensor& dy, const std::vector<DeviceTensor*>& dx) override {
    if (!active_ || !dropout_) return Copy(ctx_, dy, dx[0]);
    return cuda::DropoutBackward(ctx_, dy, amount_, NoiseShape(*x[0]), seed_, dx[0]);
  }

 private:
  // Keras's noise_shape (per example; 1 broadcasts) with the batch axis.
  Shape NoiseShape(const DeviceTensor& x) const {
    if (noise_.empty()) return {};
    Shape s{x.dim(0)};
    for (size_t a = 0; a < noise_.size(); ++a) s.push_back(noise_[a] == 1 ? 1 : x.dim(a + 1));
    return s;
  }
  GpuContext* ctx_;
  bool dropout_;
  float amount_;  // the rate, or the standard deviation
  Shape noise_;
  bool active_ = false;
  uint64_t seed_ = 0;
  DeviceTensor y_;
};

// y = x * scale + offset with one value, or one per channel of the last axis (Rescaling;
// Normalization with its statistics folded in), as two broadcasting merges.
class AffineOp final : public DeviceOp {
 public:
  // `derive` gives (scale, offset) from the host layer (again after a reload).
  using Derive = std::function<std::pair<std::vector<float>, std::vector<float>>()>;
  AffineOp(GpuContext* ctx, DType dtype, Derive derive)
      : ctx_(ctx), dtype_(dtype), derive_(std::move(derive)) {}
  absl::StatusOr<DeviceTensor> Forward(const std::vector<const DeviceTensor*>& x,
                                       const StepInfo&) override {
    const size_t rank = x[0]->shape().size();
    if (rank != rank_) {
      rank_ = rank;
      LOCKSTEP_RETURN_IF_ERROR(Reloaded());
    }
    LOCKSTEP_RETURN_IF_ERROR(cuda::MergeForward(ctx_, MergeOp::kMultiply, {x[0], &scale_}, &t_));
    LOCKSTEP_RETURN_IF_ERROR(cuda::MergeForward(ctx_, MergeOp::kAdd, {&t_, &offset_}, &y_));
    return ViewOf(y_);
  }
  absl::Status Backward(const std::vector<const DeviceTensor*>& x, const DeviceTensor&,
                        const DeviceTensor& dy, const std::vector<DeviceTensor*>& dx) override {
    return cuda::MergeBackward(ctx_, MergeOp::kMultiply, {x[0], &scale_}, t_, dy, {dx[0], nullptr});
  }
  absl::Status Reloaded() override {
    if (rank_ == 0) return absl::OkStatus();
    auto [scale, offset] = derive_();
    for (auto [values, t] : {std::pair{&scale, &scale_}, std::pair{&offset, &offset_}}) {
      Shape s(rank_, 1);
      s.back() = static_cast<int64_t>(values->size());
      Tensor host(s);
      std::copy(values->begin(), values->end(), host.data());
      LOCKSTEP_RETURN_IF_ERROR(cuda::Upload(ctx_, host, dtype_, t));
    }
    return absl::OkStatus();
  }

 private:
  GpuContext* ctx_;
  DType dtype_;
  Derive derive_;
  size_t rank_ = 0;
  DeviceTensor scale_, offset_, t_, y_;
};

class MergeDeviceOp final : public DeviceOp {
 public:
  MergeDeviceOp(GpuContext* ctx, MergeOp op) : ctx_(ctx), op_(op) {}
  absl::StatusOr<DeviceTensor> Forward(const std::vector<const DeviceTensor*>& x,
                                       const StepInfo&) override {
    LOCKSTEP_RETURN_IF_ERROR(cuda::MergeForward(ctx_, op_, x, &y_));
    return ViewOf(y_);
  }
  absl::Status Backward(const std::vector<const DeviceTensor*>& x, const DeviceTensor& y,
                        const DeviceTensor& dy, const std::vector<DeviceTensor*>& dx) override {
    return cuda::MergeBackward(ctx_, op_, x, y, dy, dx);
  }

 private:
  GpuContext* ctx_;
  MergeOp op_;
  DeviceTensor y_;
};

class ConcatOp final : public DeviceOp {
 public:
  ConcatOp(GpuContext* ctx, int64_t axis) : ctx_(ctx), axis_(axis) {}
  absl::StatusOr<DeviceTensor> Forward(const std::vector<const DeviceTensor*>& x,
                                       const StepInfo&) override {
    LOCKSTEP_RETURN_IF_ERROR(cuda::ConcatForward(ctx_, x, Axis(*x[0]), &y_));
    return ViewOf(y_);
  }
  absl::Status Backward(const std::vector<const DeviceTensor*>& x, const DeviceTensor&,
                        const DeviceTensor& dy, const std::vector<DeviceTensor*>& dx) override {
    return cuda::ConcatBackward(ctx_, dy, x, Axis(*x[0]), dx);
  }

 private:
  // The axis counted with the batch (negative from the end, as Keras's).
  int Axis(const DeviceTensor& x) const {
    const auto rank = static_cast<int64_t>(x.shape().size());
    return static_cast<int>(axis_ < 0 ? axis_ + rank : axis_);
  }
  GpuContext* ctx_;
  int64_t axis_;
  DeviceTensor y_;
};

// Plans per input shape (the last batch of an epoch may be smaller), a bounded set.
template <typename Plan>
class PlanCache {
 public:
  template <typename Make>
  absl::StatusOr<Plan*> Get(const Shape& x, Make make) {
    auto it = plans_.find(x);
    if (it == plans_.end()) {
      if (plans_.size() >= 8) plans_.clear();
      absl::StatusOr<std::unique_ptr<Plan>> p = make();
      if (!p.ok()) return p.status();
      it = plans_.emplace(x, std::move(*p)).first;
    }
    return it->second.get();
  }

 private:
  std::map<Shape, std::unique_ptr<Plan>> plans_;
};

// Conv1D/2D/3D and DepthwiseConv1D/2D through cuDNN (P = cuda::CudnnConv), the transposed
// convolutions through the same plans (P = cuda::CudnnConvTranspose); SeparableConv1D/2D as its
// depthwise convolution then the pointwise kernel as a Dense over the channels.
template <typename P>
class ConvOp final : public DeviceOp {
 public:
  ConvOp(GpuContext* ctx, const GraphLayer& layer, const LayerWeights& w, Activation act,
         const char* kernel, bool separable)
      : ctx_(ctx),
        layer_(layer),
        w_(w),
        kernel_(kernel),
        separable_(separable),
        bias_(w.find("bias") != nullptr),
        tail_(ctx, act),
        dk_(ctx, w.find(kernel), w.shared()),
        dp_(ctx, w.find("pointwise_kernel"), w.shared()),
        db_(ctx, w.find("bias"), w.shared()) {}

  absl::StatusOr<DeviceTensor> Forward(const std::vector<const DeviceTensor*>& x,
                                       const StepInfo&) override {
    absl::StatusOr<P*> conv = Plan(*x[0]);
    if (!conv.ok()) return conv.status();
    const float* b = bias_ ? w_.at("bias").master : nullptr;
    if (!separable_) {
      LOCKSTEP_RETURN_IF_ERROR((*conv)->Forward(*x[0], w_.at(kernel_).value, b, &z_));
    } else {
      LOCKSTEP_RETURN_IF_ERROR((*conv)->Forward(*x[0], w_.at(kernel_).value, nullptr, &mid_));
      LOCKSTEP_RETURN_IF_ERROR(cuda::KerasDenseForward(ctx_, mid_, Pointwise(), b, &z_));
    }
    return tail_.Apply(z_);
  }

  absl::Status Backward(const std::vector<const DeviceTensor*>& x, const DeviceTensor& y,
                        const DeviceTensor& dy, const std::vector<DeviceTensor*>& dx) override {
    absl::StatusOr<P*> conv = Plan(*x[0]);
    if (!conv.ok()) return conv.status();
    absl::StatusOr<const DeviceTensor*> dz = tail_.Back(z_, y, dy);
    if (!dz.ok()) return dz.status();
    absl::StatusOr<float*> dk = dk_.Target();
    absl::StatusOr<float*> db = db_.Target();
    if (!dk.ok()) return dk.status();
    if (!db.ok()) return db.status();
    const DeviceTensor* dconv = *dz;
    if (separable_) {
      absl::StatusOr<float*> dp = dp_.Target();
      if (!dp.ok()) return dp.status();
      LOCKSTEP_RETURN_IF_ERROR(
          cuda::KerasDenseBackward(ctx_, mid_, Pointwise(), **dz, &dmid_, *dp, *db));
      LOCKSTEP_RETURN_IF_ERROR(dp_.Commit());
      dconv = &dmid_;
    }
    if (*dk != nullptr || (!separable_ && *db != nullptr)) {
      float* conv_db = separable_ ? nullptr : *db;
      if (*dk != nullptr) {
        LOCKSTEP_RETURN_IF_ERROR((*conv)->BackwardWeights(*x[0], *dconv, *dk, conv_db));
      } else {
        // A frozen kernel with a trained bias (not a Keras layout, but kept exact).
        const int64_t c = dconv->shape().back();
        LOCKSTEP_RETURN_IF_ERROR(cuda::BiasGrad(ctx_, *dconv, conv_db, dconv->size() / c, c, 1));
      }
    }
    LOCKSTEP_RETURN_IF_ERROR(dk_.Commit());
    LOCKSTEP_RETURN_IF_ERROR(db_.Commit());
    if (dx[0] != nullptr) {
      LOCKSTEP_RETURN_IF_ERROR((*conv)->BackwardData(*dconv, w_.at(kernel_).value, dx[0]));
    }
    return absl::OkStatus();
  }

 private:
  // The pointwise kernel [1..., in * multiplier, filters] as [in * multiplier, filters].
  DeviceTensor Pointwise() const {
    const DeviceTensor& p = w_.at("pointwise_kernel").value;
    const int64_t f = p.shape().back();
    return p.Reshaped({p.size() / f, f});
  }
  absl::StatusOr<P*> Plan(const DeviceTensor& x) {
    return plans_.Get(x.shape(), [&]() -> absl::StatusOr<std::unique_ptr<P>> {
      absl::StatusOr<cpu::ConvGeometry> g = graph::CallGeometry(layer_, x.shape());
      if (!g.ok()) return g.status();
      return P::Make(ctx_, *g, x.dtype(), bias_ && !separable_);
    });
  }

  GpuContext* ctx_;
  const GraphLayer& layer_;
  const LayerWeights& w_;
  const char* kernel_;
  bool separable_, bias_;
  ActivationTail tail_;
  GradOut dk_, dp_, db_;
  PlanCache<P> plans_;
  DeviceTensor z_, mid_, dmid_;
};

cuda::PoolKind KindOf(graph::PoolMode m) {
  return m == graph::PoolMode::kMax ? cuda::PoolKind::kMax : cuda::PoolKind::kAverage;
}

class PoolOp final : public DeviceOp {
 public:
  PoolOp(GpuContext* ctx, const GraphLayer& layer, graph::PoolMode mode)
      : ctx_(ctx), layer_(layer), kind_(KindOf(mode)) {}
  absl::StatusOr<DeviceTensor> Forward(const std::vector<const DeviceTensor*>& x,
                                       const StepInfo&) override {
    absl::StatusOr<cpu::ConvGeometry> g = graph::CallGeometry(layer_, x[0]->shape());
    if (!g.ok()) return g.status();
    g_ = *g;
    LOCKSTEP_RETURN_IF_ERROR(cuda::PoolForward(ctx_, *x[0], g_, kind_, &y_, &argmax_));
    return ViewOf(y_);
  }
  absl::Status Backward(const std::vector<const DeviceTensor*>&, const DeviceTensor&,
                        const DeviceTensor& dy, const std::vector<DeviceTensor*>& dx) override {
    return cuda::PoolBackward(ctx_, dy, g_, kind_, argmax_, dx[0]);
  }

 private:
  GpuContext* ctx_;
  const GraphLayer& layer_;
  cuda::PoolKind kind_;
  cpu::ConvGeometry g_;
  DeviceTensor y_, argmax_;
};

class GlobalPoolOp final : public DeviceOp {
 public:
  GlobalPoolOp(GpuContext* ctx, graph::GlobalPoolOptions o) : ctx_(ctx), o_(o) {}
  absl::StatusOr<DeviceTensor> Forward(const std::vector<const DeviceTensor*>& x,
                                       const StepInfo& step) override {
    const DeviceTensor& in = *x[0];
    const int64_t n = in.dim(0), c = in.shape().back();
    const int64_t steps = n * c == 0 ? 0 : in.size() / (n * c);
    // GlobalAveragePooling1D honours a [batch, steps] mask, as on the CPU.
    const DeviceTensor* m = step.mask(0);
    if (o_.rank != 1 || m == nullptr || m->size() != n * steps) m = nullptr;
    LOCKSTEP_RETURN_IF_ERROR(
        cuda::GlobalPoolForward(ctx_, in, m, n, steps, c, KindOf(o_.mode), &y_, &saved_));
    Shape s{n};
    if (o_.keepdims) s.insert(s.end(), static_cast<size_t>(o_.rank), 1);
    s.push_back(c);
    return y_.Reshaped(std::move(s));
  }
  absl::Status Backward(const std::vector<const DeviceTensor*>& x, const DeviceTensor&,
                        const DeviceTensor& dy, const std::vector<DeviceTensor*>& dx) override {
    const DeviceTensor& in = *x[0];
    const int64_t n = in.dim(0), c = in.shape().back();
    const int64_t steps = n * c == 0 ? 0 : in.size() / (n * c);
    LOCKSTEP_RETURN_IF_ERROR(cuda::GlobalPoolBackward(ctx_, dy.Reshaped({n, c}), n, steps, c,
                                                      KindOf(o_.mode), saved_, dx[0]));
    dx[0]->Reshape(in.shape());
    return absl::OkStatus();
  }

 private:
  GpuContext* ctx_;
  graph::GlobalPoolOptions o_;
  DeviceTensor y_, saved_;  // saved_: the arg-max, or a masked average's weights
};

cuda::Axes3 Axes(const graph::AxisPairs& p, bool first, int sign) {
  cuda::Axes3 a{0, 0, 0};
  for (size_t i = 0; i < p.size() && i < 3; ++i) a[i] = sign * (first ? p[i].first : p[i].second);
  return a;
}

// ZeroPadding (positive amounts) and Cropping (negative), each the other's gradient.
class PadCropOp final : public DeviceOp {
 public:
  PadCropOp(GpuContext* ctx, graph::PadCropOptions o) : ctx_(ctx), o_(std::move(o)) {}
  absl::StatusOr<DeviceTensor> Forward(const std::vector<const DeviceTensor*>& x,
                                       const StepInfo&) override {
    const int sign = o_.pad ? 1 : -1;
    LOCKSTEP_RETURN_IF_ERROR(cuda::PadOrCrop(ctx_, *x[0], o_.rank, Axes(o_.pairs, true, sign),
                                             Axes(o_.pairs, false, sign), &y_));
    return ViewOf(y_);
  }
  absl::Status Backward(const std::vector<const DeviceTensor*>&, const DeviceTensor&,
                        const DeviceTensor& dy, const std::vector<DeviceTensor*>& dx) override {
    const int sign = o_.pad ? -1 : 1;
    return cuda::PadOrCrop(ctx_, dy, o_.rank, Axes(o_.pairs, true, sign),
                           Axes(o_.pairs, false, sign), dx[0]);
  }

 private:
  GpuContext* ctx_;
  graph::PadCropOptions o_;
  DeviceTensor y_;
};

class UpSamplingOp final : public DeviceOp {
 public:
  UpSamplingOp(GpuContext* ctx, graph::UpSamplingOptions o) : ctx_(ctx), o_(std::move(o)) {
    for (size_t i = 0; i < o_.size.size() && i < 3; ++i) size_[i] = o_.size[i];
  }
  absl::StatusOr<DeviceTensor> Forward(const std::vector<const DeviceTensor*>& x,
                                       const StepInfo&) override {
    if (o_.interpolation == graph::Interpolation::kBilinear) {
      LOCKSTEP_RETURN_IF_ERROR(cuda::UpsampleBilinear2d(ctx_, *x[0], x[0]->dim(1) * size_[0],
                                                        x[0]->dim(2) * size_[1], &y_));
    } else {
      LOCKSTEP_RETURN_IF_ERROR(cuda::UpsampleNearest(ctx_, *x[0], o_.rank, size_, &y_));
    }
    return ViewOf(y_);
  }
  absl::Status Backward(const std::vector<const DeviceTensor*>& x, const DeviceTensor&,
                        const DeviceTensor& dy, const std::vector<DeviceTensor*>& dx) override {
    if (o_.interpolation == graph::Interpolation::kBilinear) {
      return cuda::UpsampleBilinear2dBackward(ctx_, dy, x[0]->dim(1), x[0]->dim(2), dx[0]);
    }
    return cuda::UpsampleNearestBackward(ctx_, dy, o_.rank, size_, dx[0]);
  }

 private:
  GpuContext* ctx_;
  graph::UpSamplingOptions o_;
  cuda::Axes3 size_{1, 1, 1};
  DeviceTensor y_;
};

// BatchNormalization over the last axis; batch statistics in training unless the layer is
// frozen, the moving ones otherwise.
class BatchNormOp final : public DeviceOp {
 public:
  BatchNormOp(GpuContext* ctx, const GraphLayer& layer, const LayerWeights& w,
              graph::BatchNormOptions o)
      : ctx_(ctx), layer_(layer), w_(w), o_(std::move(o)) {}
  absl::StatusOr<DeviceTensor> Forward(const std::vector<const DeviceTensor*>& x,
                                       const StepInfo& step) override {
    const int64_t c = x[0]->shape().back();
    p_ = {.channels = c,
          .epsilon = o_.epsilon,
          .momentum = o_.momentum,
          .batch_statistics = step.training && layer_.trainable()};
    LOCKSTEP_RETURN_IF_ERROR(mean_.Resize(ctx_, {c}, DType::kF32));
    LOCKSTEP_RETURN_IF_ERROR(rstd_.Resize(ctx_, {c}, DType::kF32));
    LOCKSTEP_RETURN_IF_ERROR(cuda::BatchNormForward(
        ctx_, x[0]->Reshaped({x[0]->size() / c, c}), w_.master("gamma"), w_.master("beta"), p_,
        w_.at("moving_mean").master, w_.at("moving_variance").master, mean_.as<float>(),
        rstd_.as<float>(), &y_));
    y_.Reshape(x[0]->shape());
    return ViewOf(y_);
  }
  absl::Status Backward(const std::vector<const DeviceTensor*>& x, const DeviceTensor&,
                        const DeviceTensor& dy, const std::vector<DeviceTensor*>& dx) override {
    const int64_t c = x[0]->shape().back();
    LOCKSTEP_RETURN_IF_ERROR(cuda::BatchNormBackward(
        ctx_, x[0]->Reshaped({x[0]->size() / c, c}), dy.Reshaped({dy.size() / c, c}),
        w_.master("gamma"), mean_.as<float>(), rstd_.as<float>(), p_, w_.grad("gamma"),
        w_.grad("beta"), dx[0]));
    if (dx[0] != nullptr) dx[0]->Reshape(x[0]->shape());
    return absl::OkStatus();
  }

 private:
  GpuContext* ctx_;
  const GraphLayer& layer_;
  const LayerWeights& w_;
  graph::BatchNormOptions o_;
  cuda::BatchNormParams p_;
  DeviceTensor mean_, rstd_, y_;
};

// LayerNormalization over the trailing axes it names.
class LayerNormOp final : public DeviceOp {
 public:
  LayerNormOp(GpuContext* ctx, const LayerWeights& w, graph::LayerNormOptions o)
      : ctx_(ctx), w_(w), o_(std::move(o)) {}
  absl::StatusOr<DeviceTensor> Forward(const std::vector<const DeviceTensor*>& x,
                                       const StepInfo&) override {
    const int64_t group = Group(*x[0]), rows = x[0]->size() / std::max<int64_t>(group, 1);
    LOCKSTEP_RETURN_IF_ERROR(mean_.Resize(ctx_, {rows}, DType::kF32));
    LOCKSTEP_RETURN_IF_ERROR(rstd_.Resize(ctx_, {rows}, DType::kF32));
    LOCKSTEP_RETURN_IF_ERROR(cuda::LayerNormForward(ctx_, *x[0], group, w_.master("gamma"),
                                                    w_.master("beta"), o_.epsilon,
                                                    mean_.as<float>(), rstd_.as<float>(), &y_));
    return ViewOf(y_);
  }
  absl::Status Backward(const std::vector<const DeviceTensor*>& x, const DeviceTensor&,
                        const DeviceTensor& dy, const std::vector<DeviceTensor*>& dx) override {
    return cuda::LayerNormBackward(ctx_, *x[0], dy, Group(*x[0]), w_.master("gamma"),
                                   mean_.as<float>(), rstd_.as<float>(), w_.grad("gamma"),
                                   w_.grad("beta"), dx[0]);
  }

 private:
  int64_t Group(const DeviceTensor& x) const {
    int64_t g = 1;
    const size_t rank = x.shape().size();
    for (size_t k = 0; k < o_.axes.size() && k < rank; ++k) g *= x.dim(rank - 1 - k);
    return g;
  }
  GpuContext* ctx_;
  const LayerWeights& w_;
  graph::LayerNormOptions o_;
  DeviceTensor mean_, rstd_, y_;
};

// Embedding: rows of the table by id (fp32 ids); an id outside the table is counted in `bad`.
// With mask_zero, id 0 is padding: the output's mask is ids != 0.
class EmbeddingOp final : public DeviceOp {
 public:
  EmbeddingOp(GpuContext* ctx, const LayerWeights& w, bool mask_zero, int* bad)
      : ctx_(ctx), w_(w), mask_zero_(mask_zero), bad_(bad) {}
  absl::StatusOr<DeviceTensor> Forward(const std::vector<const DeviceTensor*>& x,
                                       const StepInfo&) override {
    LOCKSTEP_RETURN_IF_ERROR(
        cuda::EmbeddingForward(ctx_, *x[0], w_.at("embeddings").value, &y_, bad_));
    if (mask_zero_) {
      LOCKSTEP_RETURN_IF_ERROR(
          cuda::CompareForward(ctx_, *x[0], CompareOp::kNotEqual, 0.0f, DType::kF32, &mask_));
    }
    return ViewOf(y_);
  }
  const DeviceTensor* OwnMask() const override { return mask_zero_ ? &mask_ : nullptr; }
  absl::Status Backward(const std::vector<const DeviceTensor*>& x, const DeviceTensor&,
                        const DeviceTensor& dy, const std::vector<DeviceTensor*>&) override {
    const DeviceWeight& t = w_.at("embeddings");
    if (t.grad == nullptr) return absl::OkStatus();
    return cuda::EmbeddingBackward(ctx_, *x[0], dy, t.value.dim(0), t.grad);
  }

 private:
  GpuContext* ctx_;
  const LayerWeights& w_;
  bool mask_zero_;
  int* bad_;
  DeviceTensor y_, mask_;
};

// Masking: time steps whose features all equal the value are zeroed and masked.
class MaskingOp final : public DeviceOp {
 public:
  MaskingOp(GpuContext* ctx, float value) : ctx_(ctx), value_(value) {}
  absl::StatusOr<DeviceTensor> Forward(const std::vector<const DeviceTensor*>& x,
                                       const StepInfo&) override {
    LOCKSTEP_RETURN_IF_ERROR(cuda::MaskingForward(ctx_, *x[0], value_, &y_, &mask_));
    return ViewOf(y_);
  }
  absl::Status Backward(const std::vector<const DeviceTensor*>&, const DeviceTensor&,
                        const DeviceTensor& dy, const std::vector<DeviceTensor*>& dx) override {
    return cuda::MaskingBackward(ctx_, dy, mask_, dx[0]);
  }
  const DeviceTensor* OwnMask() const override { return &mask_; }

 private:
  GpuContext* ctx_;
  float value_;
  DeviceTensor y_, mask_;
};

// A comparison against a constant (1 where it holds, else 0, in the input's dtype): no gradient.
class ComparisonOp final : public DeviceOp {
 public:
  ComparisonOp(GpuContext* ctx, graph::CompareOptions o) : ctx_(ctx), o_(o) {}
  absl::StatusOr<DeviceTensor> Forward(const std::vector<const DeviceTensor*>& x,
                                       const StepInfo&) override {
    LOCKSTEP_RETURN_IF_ERROR(
        cuda::CompareForward(ctx_, *x[0], o_.op, o_.constant, x[0]->dtype(), &y_));
    return ViewOf(y_);
  }
  absl::Status Backward(const std::vector<const DeviceTensor*>&, const DeviceTensor&,
                        const DeviceTensor&, const std::vector<DeviceTensor*>&) override {
    return absl::OkStatus();  // its input takes no gradient (Differentiable is false)
  }

 private:
  GpuContext* ctx_;
  graph::CompareOptions o_;
  DeviceTensor y_;
};

// [x, m]: x passes through with m (as fp32) as its mask.
class MaskWithOp final : public DeviceOp {
 public:
  explicit MaskWithOp(GpuContext* ctx) : ctx_(ctx) {}
  absl::StatusOr<DeviceTensor> Forward(const std::vector<const DeviceTensor*>& x,
                                       const StepInfo&) override {
    const DeviceTensor& m = *x[1];
    LOCKSTEP_RETURN_IF_ERROR(mask_.Resize(ctx_, m.shape(), DType::kF32));
    LOCKSTEP_RETURN_IF_ERROR(
        cuda::Cast(ctx_, m.data(), m.dtype(), mask_.data(), DType::kF32, m.size()));
    return ViewOf(*x[0]);
  }
  absl::Status Backward(const std::vector<const DeviceTensor*>&, const DeviceTensor&,
                        const DeviceTensor& dy, const std::vector<DeviceTensor*>& dx) override {
    if (dx[0] == nullptr) return absl::OkStatus();
    return Copy(ctx_, dy, dx[0]);
  }
  const DeviceTensor* OwnMask() const override { return &mask_; }

 private:
  GpuContext* ctx_;
  DeviceTensor mask_;
};

// The activation a layer with options O ends in.
template <typename O>
Activation ActOf(const GraphLayer& l) {
  return OptionsOf<O>(l)->activation;
}

// Rescaling's or Normalization's (scale, offset) per channel (or one for all).
std::pair<std::vector<float>, std::vector<float>> NormalizationAffine(const GraphLayer& l) {
  const graph::NormalizationOptions o = *OptionsOf<graph::NormalizationOptions>(l);
  std::vector<float> mean, var;
  if (o.mean && o.variance) {
    mean = *o.mean;
    var = *o.variance;
  } else {
    for (const graph::Weight& w : l.weights()) {
      if (w.name == "mean") mean.assign(w.value.data(), w.value.data() + w.value.size());
      if (w.name == "variance") var.assign(w.value.data(), w.value.data() + w.value.size());
    }
  }
  if (mean.size() == 1 && var.size() > 1) mean.resize(var.size(), mean[0]);
  if (var.size() == 1 && mean.size() > 1) var.resize(mean.size(), var[0]);
  std::vector<float> scale(mean.size()), offset(mean.size());
  for (size_t c = 0; c < mean.size(); ++c) {
    const float sd = std::max(std::sqrt(var[c]), 1e-7f);
    scale[c] = o.invert ? sd : 1.0f / sd;
    offset[c] = o.invert ? mean[c] : -mean[c] / sd;
  }
  return {scale, offset};
}

// SimpleRNN, LSTM, GRU over the fp32 master weights (recurrent.h): inputs [x, initial h,
// initial c] (the states optional), outputs [y, final h, final c] with return_state.
class RecurrentOp final : public DeviceOp {
 public:
  RecurrentOp(GpuContext* ctx, const LayerWeights& w, cuda::RnnSpec spec, bool return_state)
      : w_(w),
        lstm_(spec.cell == RnnCell::kLstm),
        return_state_(return_state),
        rnn_(ctx, spec),
        dk_(ctx, w.find("kernel"), w.shared()),
        du_(ctx, w.find("recurrent_kernel"), w.shared()),
        db_(ctx, w.find("bias"), w.shared()) {}
  absl::StatusOr<DeviceTensor> Forward(const std::vector<const DeviceTensor*>& x,
                                       const StepInfo& step) override {
    const DeviceWeight* b = w_.find("bias");
    const cuda::RnnStates initial{x.size() > 1 ? x[1] : nullptr, x.size() > 2 ? x[2] : nullptr};
    LOCKSTEP_RETURN_IF_ERROR(rnn_.Forward(*x[0], step.mask(0), initial, w_.at("kernel").master,
                                          w_.at("recurrent_kernel").master,
                                          b != nullptr ? b->master : nullptr, &y_));
    return ViewOf(y_);
  }
  absl::StatusOr<std::vector<DeviceTensor>> MoreOutputs() override {
    std::vector<DeviceTensor> out;
    if (!return_state_) return out;
    LOCKSTEP_RETURN_IF_ERROR(rnn_.FinalStates(&h_, lstm_ ? &c_ : nullptr));
    out.push_back(ViewOf(h_));
    if (lstm_) out.push_back(ViewOf(c_));
    return out;
  }
  absl::Status Backward(const std::vector<const DeviceTensor*>& x, const DeviceTensor& y,
                        const DeviceTensor& dy, const std::vector<DeviceTensor*>& dx) override {
    return BackwardAll(x, {&y}, {&dy}, dx);
  }
  absl::Status BackwardAll(const std::vector<const DeviceTensor*>&,
                           const std::vector<const DeviceTensor*>&,
                           const std::vector<const DeviceTensor*>& dy,
                           const std::vector<DeviceTensor*>& dx) override {
    absl::StatusOr<float*> dk = dk_.Target();
    absl::StatusOr<float*> du = du_.Target();
    absl::StatusOr<float*> db = db_.Target();
    for (const auto* t : {&dk, &du, &db}) {
      if (!t->ok()) return t->status();
    }
    auto at = [](const auto& v, size_t k) { return k < v.size() ? v[k] : nullptr; };
    LOCKSTEP_RETURN_IF_ERROR(rnn_.Backward(at(dy, 0), {at(dy, 1), at(dy, 2)},
                                           w_.at("kernel").master, w_.at("recurrent_kernel").master,
                                           dx[0], {at(dx, 1), at(dx, 2)}, *dk, *du, *db));
    LOCKSTEP_RETURN_IF_ERROR(dk_.Commit());
    LOCKSTEP_RETURN_IF_ERROR(du_.Commit());
    return db_.Commit();
  }

 private:
  const LayerWeights& w_;
  bool lstm_, return_state_;
  cuda::Recurrent rnn_;
  GradOut dk_, du_, db_;
  DeviceTensor y_, h_, c_;
};

// Bidirectional: the forward layer, the backward one with its sequence lined up in time, and
// their outputs merged (concatenated, or summed, multiplied, averaged).
class BidirectionalOp final : public DeviceOp {
 public:
  BidirectionalOp(GpuContext* ctx, const GraphLayer& l, const LayerWeights& w,
                  graph::BidirectionalOptions o, cuda::RnnSpec fwd, cuda::RnnSpec bwd)
      : ctx_(ctx), merge_(o.merge), fwd_(ctx, fwd), bwd_(ctx, bwd), half_(l.weights().size() / 2) {
    for (const graph::Weight& hw : l.weights()) weights_.push_back(w.find(hw.name));
    for (const DeviceWeight* dw : weights_) grads_.emplace_back(ctx, dw, w.shared());
  }
  absl::StatusOr<DeviceTensor> Forward(const std::vector<const DeviceTensor*>& x,
                                       const StepInfo& step) override {
    const DeviceTensor* m = step.mask(0);
    LOCKSTEP_RETURN_IF_ERROR(fwd_.Forward(*x[0], m, {}, Master(0), Master(1), Bias(0), &yf_));
    LOCKSTEP_RETURN_IF_ERROR(
        bwd_.Forward(*x[0], m, {}, Master(half_), Master(half_ + 1), Bias(half_), &yb_));
    if (merge_ == graph::BidirectionalMerge::kConcat) {
      LOCKSTEP_RETURN_IF_ERROR(cuda::ConcatForward(ctx_, {&yf_, &yb_}, Axis(), &y_));
    } else {
      LOCKSTEP_RETURN_IF_ERROR(cuda::MergeForward(ctx_, Op(), {&yf_, &yb_}, &y_));
    }
    return ViewOf(y_);
  }
  absl::Status Backward(const std::vector<const DeviceTensor*>&, const DeviceTensor& y,
                        const DeviceTensor& dy, const std::vector<DeviceTensor*>& dx) override {
    if (merge_ == graph::BidirectionalMerge::kConcat) {
      LOCKSTEP_RETURN_IF_ERROR(
          cuda::ConcatBackward(ctx_, dy, {&yf_, &yb_}, Axis(), {&dyf_, &dyb_}));
    } else {
      LOCKSTEP_RETURN_IF_ERROR(
          cuda::MergeBackward(ctx_, Op(), {&yf_, &yb_}, y, dy, {&dyf_, &dyb_}));
    }
    std::vector<float*> g;
    for (GradOut& o : grads_) {
      absl::StatusOr<float*> t = o.Target();
      if (!t.ok()) return t.status();
      g.push_back(*t);
    }
    auto grad = [&](size_t k) { return k < g.size() ? g[k] : nullptr; };
    const bool bias = half_ > 2;
    LOCKSTEP_RETURN_IF_ERROR(fwd_.Backward(&dyf_, {}, Master(0), Master(1), dx[0], {}, grad(0),
                                           grad(1), bias ? grad(2) : nullptr));
    LOCKSTEP_RETURN_IF_ERROR(bwd_.Backward(&dyb_, {}, Master(half_), Master(half_ + 1),
                                           dx[0] != nullptr ? &dxb_ : nullptr, {}, grad(half_),
                                           grad(half_ + 1), bias ? grad(half_ + 2) : nullptr));
    for (GradOut& o : grads_) LOCKSTEP_RETURN_IF_ERROR(o.Commit());
    if (dx[0] != nullptr) return cuda::AddInto(ctx_, dx[0], dxb_);
    return absl::OkStatus();
  }

 private:
  const float* Master(size_t k) const { return weights_.at(k)->master; }
  const float* Bias(size_t first) const {
    return half_ > 2 ? weights_.at(first + 2)->master : nullptr;
  }
  int Axis() const { return static_cast<int>(yf_.shape().size()) - 1; }
  MergeOp Op() const {
    return merge_ == graph::BidirectionalMerge::kSum   ? MergeOp::kAdd
           : merge_ == graph::BidirectionalMerge::kMul ? MergeOp::kMultiply
                                                       : MergeOp::kAverage;
  }
  GpuContext* ctx_;
  graph::BidirectionalMerge merge_;
  cuda::Recurrent fwd_, bwd_;
  size_t half_;  // weights per direction: kernel, recurrent kernel (, bias)
  std::vector<const DeviceWeight*> weights_;
  std::vector<GradOut> grads_;
  DeviceTensor yf_, yb_, y_, dyf_, dyb_, dxb_;
};

cuda::RnnSpec RnnSpecOf(const GraphLayer& l) {
  const graph::RnnOptions o = *OptionsOf<graph::RnnOptions>(l);
  const std::string& cls = l.class_name();
  return {.cell = cls == "LSTM"  ? RnnCell::kLstm
                  : cls == "GRU" ? RnnCell::kGru
                                 : RnnCell::kSimpleRnn,
          .units = o.units,
          .activation = o.activation,
          .recurrent_activation = o.recurrent_activation,
          .return_sequences = o.return_sequences,
          .go_backwards = o.go_backwards,
          .reset_after = o.reset_after,
          .zero_output_for_mask = o.zero_output_for_mask};
}

uint64_t Mix(uint64_t a, uint64_t b) {
  uint64_t z = a + 0x9E3779B97F4A7C15ull * (b + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

// The per-layer device state the ops point into; kept apart from the ops so a shared layer's
// nodes see one record.
struct DeviceGraphLayers {
  std::map<const GraphLayer*, std::unique_ptr<LayerWeights>> weights;
  std::vector<cuda::DeviceBuffer> bad;  // per Embedding node: ids outside its table
};

DeviceGraph::~DeviceGraph() = default;

namespace {

// TimeDistributed: the inner layer's op on [batch * time, ...], reshaped back.
class TimeDistributedOp final : public DeviceOp {
 public:
  explicit TimeDistributedOp(std::unique_ptr<DeviceOp> inner) : inner_(std::move(inner)) {}
  absl::StatusOr<DeviceTensor> Forward(const std::vector<const DeviceTensor*>& x,
                                       const StepInfo& step) override {
    folded_ = Fold(*x[0]);
    absl::StatusOr<DeviceTensor> y = inner_->Forward({&folded_}, step);
    if (!y.ok()) return y.status();
    folded_y_ = std::move(*y);
    return Unfold(folded_y_, *x[0]);
  }
  absl::Status Backward(const std::vector<const DeviceTensor*>& x, const DeviceTensor&,
                        const DeviceTensor& dy, const std::vector<DeviceTensor*>& dx) override {
    const DeviceTensor fdy = Fold(dy);
    LOCKSTEP_RETURN_IF_ERROR(inner_->Backward({&folded_}, folded_y_, fdy, dx));
    if (dx[0] != nullptr) dx[0]->Reshape(x[0]->shape());
    return absl::OkStatus();
  }
  absl::Status Reloaded() override { return inner_->Reloaded(); }

 private:
  static DeviceTensor Fold(const DeviceTensor& t) {
    Shape s(t.shape().begin() + 1, t.shape().end());
    s[0] = t.dim(0) * t.dim(1);
    return t.Reshaped(std::move(s));
  }
  static DeviceTensor Unfold(const DeviceTensor& y, const DeviceTensor& x) {
    Shape s{x.dim(0), x.dim(1)};
    s.insert(s.end(), y.shape().begin() + 1, y.shape().end());
    return y.Reshaped(std::move(s));
  }
  std::unique_ptr<DeviceOp> inner_;
  DeviceTensor folded_, folded_y_;
};

// MultiHeadAttention over the fp32 master weights (attention.h): [query, value] or [query,
// value, key].
class AttentionOp final : public DeviceOp {
 public:
  AttentionOp(GpuContext* ctx, const LayerWeights& w, const graph::MultiHeadAttentionOptions& o)
      : w_(w),
        attn_(ctx, {.heads = o.num_heads,
                    .key_dim = o.key_dim,
                    .value_dim = o.value_dim > 0 ? o.value_dim : o.key_dim,
                    .dropout = o.dropout,
                    .causal = o.use_causal_mask}) {
    for (const char* n : kNames) grads_.emplace_back(ctx, w.find(n), w.shared());
  }
  absl::StatusOr<DeviceTensor> Forward(const std::vector<const DeviceTensor*>& x,
                                       const StepInfo& step) override {
    const cuda::AttentionMasks masks{step.mask(0), step.mask(1), step.mask(2)};
    LOCKSTEP_RETURN_IF_ERROR(attn_.Forward(*x[0], *x[1], x.size() > 2 ? x[2] : nullptr, masks,
                                           Weights(), step.training, step.seed, &y_));
    return ViewOf(y_);
  }
  absl::Status Backward(const std::vector<const DeviceTensor*>& x, const DeviceTensor&,
                        const DeviceTensor& dy, const std::vector<DeviceTensor*>& dx) override {
    float* g[8];
    for (size_t k = 0; k < 8; ++k) {
      absl::StatusOr<float*> t = grads_[k].Target();
      if (!t.ok()) return t.status();
      g[k] = *t;
    }
    LOCKSTEP_RETURN_IF_ERROR(attn_.Backward(dy, Weights(), dx[0], dx[1],
                                            x.size() > 2 ? dx[2] : nullptr,
                                            {g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7]}));
    for (GradOut& o : grads_) LOCKSTEP_RETURN_IF_ERROR(o.Commit());
    return absl::OkStatus();
  }

 private:
  static constexpr const char* kNames[8] = {"query/kernel",
                                            "query/bias",
                                            "key/kernel",
                                            "key/bias",
                                            "value/kernel",
                                            "value/bias",
                                            "attention_output/kernel",
                                            "attention_output/bias"};
  const float* Master(size_t k) const {
    const DeviceWeight* d = w_.find(kNames[k]);
    return d != nullptr ? d->master : nullptr;
  }
  cuda::AttentionWeights Weights() const {
    return {Master(0), Master(1), Master(2), Master(3), Master(4), Master(5), Master(6), Master(7)};
  }
  const LayerWeights& w_;
  cuda::Attention attn_;
  std::vector<GradOut> grads_;
  DeviceTensor y_;
};

// The device op of a call of `l` whose per-example output shape is `out`, over the weights `w`.
absl::StatusOr<std::unique_ptr<DeviceOp>> MakeOp(GpuContext* ctx, const GraphLayer& l,
                                                 const LayerWeights& w, const Shape& out,
                                                 DType compute, DeviceGraphLayers* records) {
  absl::StatusOr<GpuOpKind> kind = ClassifyForGpu(l);
  if (!kind.ok()) return kind.status();
  std::unique_ptr<DeviceOp> op;
  switch (*kind) {
    case GpuOpKind::kDense:
      op = std::make_unique<DenseOp>(ctx, w, ActOf<graph::DenseOptions>(l));
      break;
    case GpuOpKind::kActivation: {
      std::optional<Activation> a = OptionsOf<Activation>(l);
      if (!a) a = ReluActivation(*OptionsOf<graph::ReluOptions>(l));
      op = std::make_unique<ActivationOp>(ctx, *a);
      break;
    }
    case GpuOpKind::kReshape:
      op = std::make_unique<ReshapeOp>(ctx, out);
      break;
    case GpuOpKind::kRepeat:
      op = std::make_unique<RepeatOp>(ctx, out[0]);
      break;
    case GpuOpKind::kDropout: {
      const graph::DropoutOptions o = *OptionsOf<graph::DropoutOptions>(l);
      op = std::make_unique<NoiseOp>(ctx, true, o.rate, o.noise_shape);
      break;
    }
    case GpuOpKind::kNoise:
      op = std::make_unique<NoiseOp>(ctx, false, OptionsOf<graph::GaussianNoiseOptions>(l)->stddev,
                                     Shape{});
      break;
    case GpuOpKind::kRescaling: {
      const graph::RescalingOptions o = *OptionsOf<graph::RescalingOptions>(l);
      op = std::make_unique<AffineOp>(ctx, compute, [o] { return std::pair{o.scale, o.offset}; });
      break;
    }
    case GpuOpKind::kNormalization:
      op = std::make_unique<AffineOp>(ctx, compute, [&l] { return NormalizationAffine(l); });
      break;
    case GpuOpKind::kMerge:
      op = std::make_unique<MergeDeviceOp>(ctx, *OptionsOf<MergeOp>(l));
      break;
    case GpuOpKind::kConcat:
      op = std::make_unique<ConcatOp>(ctx, OptionsOf<graph::ConcatOptions>(l)->axis);
      break;
    case GpuOpKind::kConv:
      op = std::make_unique<ConvOp<cuda::CudnnConv>>(ctx, l, w, ActOf<graph::ConvOptions>(l),
                                                     "kernel", false);
      break;
    case GpuOpKind::kDepthwise:
      op = std::make_unique<ConvOp<cuda::CudnnConv>>(ctx, l, w, ActOf<graph::DepthwiseOptions>(l),
                                                     "depthwise_kernel", false);
      break;
    case GpuOpKind::kSeparable:
      op = std::make_unique<ConvOp<cuda::CudnnConv>>(ctx, l, w, ActOf<graph::SeparableOptions>(l),
                                                     "depthwise_kernel", true);
      break;
    case GpuOpKind::kConvTranspose:
      op = std::make_unique<ConvOp<cuda::CudnnConvTranspose>>(
          ctx, l, w, ActOf<graph::ConvTransposeOptions>(l), "kernel", false);
      break;
    case GpuOpKind::kPool:
      op = std::make_unique<PoolOp>(ctx, l, OptionsOf<graph::PoolOptions>(l)->mode);
      break;
    case GpuOpKind::kGlobalPool:
      op = std::make_unique<GlobalPoolOp>(ctx, *OptionsOf<graph::GlobalPoolOptions>(l));
      break;
    case GpuOpKind::kBatchNorm:
      op = std::make_unique<BatchNormOp>(ctx, l, w, *OptionsOf<graph::BatchNormOptions>(l));
      break;
    case GpuOpKind::kLayerNorm:
      op = std::make_unique<LayerNormOp>(ctx, w, *OptionsOf<graph::LayerNormOptions>(l));
      break;
    case GpuOpKind::kPadCrop:
      op = std::make_unique<PadCropOp>(ctx, *OptionsOf<graph::PadCropOptions>(l));
      break;
    case GpuOpKind::kUpSampling:
      op = std::make_unique<UpSamplingOp>(ctx, *OptionsOf<graph::UpSamplingOptions>(l));
      break;
    case GpuOpKind::kEmbedding: {
      absl::StatusOr<cuda::DeviceBuffer> bad =
          cuda::DeviceBuffer::Make(ctx->allocator(), sizeof(int));
      if (!bad.ok()) return bad.status();
      records->bad.push_back(std::move(*bad));
      op = std::make_unique<EmbeddingOp>(ctx, w, OptionsOf<graph::EmbeddingOptions>(l)->mask_zero,
                                         records->bad.back().as<int>());
      break;
    }
    case GpuOpKind::kMasking:
      op = std::make_unique<MaskingOp>(ctx, OptionsOf<graph::MaskingOptions>(l)->value);
      break;
    case GpuOpKind::kCompare:
      op = std::make_unique<ComparisonOp>(ctx, *OptionsOf<graph::CompareOptions>(l));
      break;
    case GpuOpKind::kMaskWith:
      op = std::make_unique<MaskWithOp>(ctx);
      break;
    case GpuOpKind::kRecurrent:
      op = std::make_unique<RecurrentOp>(ctx, w, RnnSpecOf(l),
                                         OptionsOf<graph::RnnOptions>(l)->return_state);
      break;
    case GpuOpKind::kAttention:
      op = std::make_unique<AttentionOp>(ctx, w, *OptionsOf<graph::MultiHeadAttentionOptions>(l));
      break;
    case GpuOpKind::kTimeDistributed: {
      // The inner layer's weights are the wrapper's, under the same names; its output per
      // time step is the wrapper's without the time axis.
      const graph::TimeDistributedOptions o = *OptionsOf<graph::TimeDistributedOptions>(l);
      absl::StatusOr<std::unique_ptr<DeviceOp>> inner =
          MakeOp(ctx, *o.inner, w, Shape(out.begin() + 1, out.end()), compute, records);
      if (!inner.ok()) return inner.status();
      op = std::make_unique<TimeDistributedOp>(std::move(*inner));
      break;
    }
    case GpuOpKind::kBidirectional: {
      const graph::BidirectionalOptions o = *OptionsOf<graph::BidirectionalOptions>(l);
      cuda::RnnSpec bwd = RnnSpecOf(*o.backward);
      bwd.reverse_outputs = true;
      op = std::make_unique<BidirectionalOp>(ctx, l, w, o, RnnSpecOf(*o.forward), bwd);
      break;
    }
  }
  return op;
}

}  // namespace

absl::StatusOr<std::unique_ptr<DeviceGraph>> DeviceGraph::Create(GpuContext* ctx, GraphModel& host,
                                                                 DType compute, uint64_t seed) {
  graph::Graph& g = host.graph();
  LOCKSTEP_RETURN_IF_ERROR(GpuSupported(g));
  std::unique_ptr<DeviceGraph> d(new DeviceGraph);
  d->ctx_ = ctx;
  d->host_ = &host;
  d->seed_ = seed;

  // The weights: trainable (Params() order) then the rest, as the host graph lists them.
  std::vector<Tensor*> trainable = g.Params(), state;
  for (graph::Weight* w : g.State()) state.push_back(&w->value);
  LOCKSTEP_RETURN_IF_ERROR(d->weights_.Init(ctx, trainable, state, compute));
  std::map<const Tensor*, size_t> index;  // host weight -> its place in the flat buffers
  for (size_t i = 0; i < trainable.size(); ++i) index[trainable[i]] = i;
  for (size_t i = 0; i < state.size(); ++i) index[state[i]] = trainable.size() + i;
  for (const auto& [layer, w] : g.AllWeights()) {
    if (w->trainable && (w->l1 != 0 || w->l2 != 0)) {
      d->penalties_.push_back({index.at(&w->value), w->value.size(), w->l1, w->l2});
    }
  }

  // Slots for the penalties of a step: the weight regularizers', then one per node with an
  // activity regularizer.
  int64_t slots = static_cast<int64_t>(d->penalties_.size());
  std::vector<int> activity_slot(g.num_nodes(), -1);
  for (size_t i = 0; i < g.num_nodes(); ++i) {
    if (g.node(i).layer->activity_penalty().any()) activity_slot[i] = static_cast<int>(slots++);
  }
  if (slots > 0) LOCKSTEP_RETURN_IF_ERROR(d->penalty_values_.Resize(ctx, {slots}, DType::kF32));

  auto records = std::make_unique<DeviceGraphLayers>();
  std::map<const GraphLayer*, int> calls;
  for (size_t i = 0; i < g.num_nodes(); ++i) ++calls[g.node(i).layer];
  for (auto [layer, count] : calls) {
    std::map<std::string, DeviceWeight> w;
    for (const graph::Weight& hw : layer->weights()) {
      const size_t k = index.at(&hw.value);
      w[hw.name] = {.value = d->weights_.compute_view(k, hw.value.shape()),
                    .master = d->weights_.master(k),
                    .grad = d->weights_.grad(k)};
    }
    records->weights[layer] = std::make_unique<LayerWeights>(*layer, std::move(w), count > 1);
  }

  // The inputs: token ids stay fp32 (an fp16 id above 2048 would round).
  for (int t : g.inputs()) {
    bool ids = false, other = false;
    // A comparison (the padding mask's NotEqual) reads ids in any dtype.
    for (const GraphLayer* c : g.Consumers(t)) {
      if (OptionsOf<graph::CompareOptions>(*c)) continue;
      (c->class_name() == "Embedding" ? ids : other) = true;
    }
    if (ids && other && compute != DType::kF32) {
      return absl::FailedPreconditionError(
          "input '" + g.input_name(d->input_dtypes_.size()) +
          "' feeds an Embedding and other layers: token ids stay fp32 on the GPU, so the "
          "model runs there in float32 only");
    }
    d->input_dtypes_.push_back(ids ? DType::kF32 : compute);
  }

  for (size_t i = 0; i < g.num_nodes(); ++i) {
    graph::Graph::NodeSpec spec = g.node(i);
    const GraphLayer& l = *spec.layer;
    absl::StatusOr<std::unique_ptr<DeviceOp>> op =
        MakeOp(ctx, l, *records->weights.at(&l), g.shape(spec.outputs[0]), compute, records.get());
    if (!op.ok()) return op.status();
    d->nodes_.push_back({std::move(*op), std::move(spec), MaskRuleOf(l), activity_slot[i]});
  }
  size_t tensors = g.inputs().size();
  for (const Node& n : d->nodes_) {
    for (int t : n.spec.outputs) tensors = std::max(tensors, static_cast<size_t>(t) + 1);
  }
  d->values_.resize(tensors);
  d->masks_.assign(tensors, nullptr);
  d->grads_.resize(tensors);
  d->has_grad_.assign(tensors, false);
  d->inputs_.resize(g.inputs().size());
  d->layers_ = std::move(records);
  return d;
}

absl::Status DeviceGraph::Activity(const Node& node, DeviceTensor* dy, float loss_scale) {
  const GraphLayer::ActivityPenalty& p = node.spec.layer->activity_penalty();
  const DeviceTensor& y = values_[static_cast<size_t>(node.spec.outputs[0])];
  // Keras 2 divides by the batch size, Keras 3 does not (Layer::ActivityPenalty).
  const float scale = p.per_example && !y.shape().empty() && y.dim(0) > 0
                          ? 1.0f / static_cast<float>(y.dim(0))
                          : 1.0f;
  return cuda::ActivityPenalty(ctx_, y, p.l1 * scale, p.l2 * scale, dy, loss_scale,
                               penalty_values_.as<float>() + node.activity_slot);
}

absl::Status DeviceGraph::AddPenalties(bool gradients, float loss_scale, double* loss) {
  if (penalty_values_.data() == nullptr) return absl::OkStatus();
  for (size_t k = 0; k < penalties_.size(); ++k) {
    const Penalty& p = penalties_[k];
    LOCKSTEP_RETURN_IF_ERROR(cuda::WeightPenalty(ctx_, weights_.master(p.weight), p.size, p.l1,
                                                 p.l2,
                                                 gradients ? weights_.grad(p.weight) : nullptr,
                                                 loss_scale, penalty_values_.as<float>() + k));
  }
  std::vector<float> values(static_cast<size_t>(penalty_values_.size()));
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudaMemcpyAsync(values.data(), penalty_values_.data(),
                                               values.size() * sizeof(float),
                                               cudaMemcpyDeviceToHost, ctx_->stream()));
  LOCKSTEP_RETURN_IF_ERROR(ctx_->Synchronize());
  for (float v : values) *loss += v;
  return absl::OkStatus();
}

absl::Status DeviceGraph::Reloaded() {
  for (Node& n : nodes_) LOCKSTEP_RETURN_IF_ERROR(n.op->Reloaded());
  return absl::OkStatus();
}

absl::StatusOr<cuda::LossResult> DeviceGraph::TrainStep(const Tensor& x,
                                                        const std::vector<int32_t>& labels,
                                                        float loss_scale) {
  return Run(x, labels, true, loss_scale);
}

absl::StatusOr<cuda::LossResult> DeviceGraph::Evaluate(const Tensor& x,
                                                       const std::vector<int32_t>& labels) {
  return Run(x, labels, false, 1.0f);
}

absl::StatusOr<cuda::LossResult> DeviceGraph::Run(const Tensor& x,
                                                  const std::vector<int32_t>& labels, bool training,
                                                  float loss_scale) {
  graph::Graph& g = host_->graph();
  DeviceGraphLayers& records = *layers_;
  ++step_;
  const auto n = static_cast<int64_t>(labels.size());
  Shape shape{n};
  for (int64_t dim : host_->example_shape()) shape.push_back(dim);
  LOCKSTEP_RETURN_IF_ERROR(cuda::Upload(ctx_, x.Reshaped(shape), input_dtypes_[0], &inputs_[0]));
  values_[static_cast<size_t>(g.inputs()[0])] = ViewOf(inputs_[0]);
  for (cuda::DeviceBuffer& b : records.bad) {
    LOCKSTEP_GPU_RETURN_IF_ERROR(cudaMemsetAsync(b.get(), 0, sizeof(int), ctx_->stream()));
  }

  // Forward, node by node, each tensor's mask following it (the graph's inputs have none).
  std::vector<const DeviceTensor*> in;
  StepInfo step;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    Node& node = nodes_[i];
    in.clear();
    step.masks.clear();
    for (int t : node.spec.inputs) {
      in.push_back(&values_[static_cast<size_t>(t)]);
      step.masks.push_back(masks_[static_cast<size_t>(t)]);
    }
    step.training = node.spec.training.value_or(training);
    step.seed = Mix(Mix(seed_, step_), i);
    absl::StatusOr<DeviceTensor> y = node.op->Forward(in, step);
    if (!y.ok()) {
      return absl::Status(y.status().code(), "layer '" + node.spec.layer->name() + "' (" +
                                                 node.spec.layer->class_name() +
                                                 "): " + std::string(y.status().message()));
    }
    const auto o = static_cast<size_t>(node.spec.outputs[0]);
    values_[o] = std::move(*y);
    masks_[o] = node.mask == MaskRule::kOwn          ? node.op->OwnMask()
                : node.mask == MaskRule::kFirstInput ? step.mask(0)
                                                     : nullptr;
    if (node.activity_slot >= 0) LOCKSTEP_RETURN_IF_ERROR(Activity(node, nullptr, 1.0f));
    if (node.spec.outputs.size() > 1) {  // a recurrent layer's states: no masks
      absl::StatusOr<std::vector<DeviceTensor>> more = node.op->MoreOutputs();
      if (!more.ok()) return more.status();
      if (more->size() + 1 != node.spec.outputs.size()) {
        return absl::InternalError("layer '" + node.spec.layer->name() + "' made " +
                                   std::to_string(more->size() + 1) + " outputs, not " +
                                   std::to_string(node.spec.outputs.size()));
      }
      for (size_t k = 1; k < node.spec.outputs.size(); ++k) {
        const auto t = static_cast<size_t>(node.spec.outputs[k]);
        values_[t] = std::move((*more)[k - 1]);
        masks_[t] = nullptr;
      }
    }
  }

  // The loss (and dL/d(output) times the loss scale).
  host_->Targets(labels, &host_targets_);
  LOCKSTEP_RETURN_IF_ERROR(cuda::Upload(ctx_, host_targets_, DType::kF32, &targets_));
  const auto out = static_cast<size_t>(g.outputs()[0]);
  std::fill(has_grad_.begin(), has_grad_.end(), false);
  absl::StatusOr<cuda::LossResult> loss = cuda::ComputeLoss(
      ctx_, host_->loss(), values_[out], targets_, training ? &grads_[out] : nullptr, loss_scale);
  int bad = 0;
  for (cuda::DeviceBuffer& b : records.bad) {
    int count = 0;
    LOCKSTEP_GPU_RETURN_IF_ERROR(
        cudaMemcpyAsync(&count, b.get(), sizeof(int), cudaMemcpyDeviceToHost, ctx_->stream()));
    LOCKSTEP_RETURN_IF_ERROR(ctx_->Synchronize());
    bad += count;
  }
  if (bad > 0) {
    return absl::DataLossError("a batch the model cannot take: " + std::to_string(bad) +
                               " token id(s) outside an Embedding's table");
  }
  if (!loss.ok())
    return absl::DataLossError("a batch the model cannot take: " +
                               std::string(loss.status().message()));
  cuda::LossResult r = *loss;
  if (!training) {
    LOCKSTEP_RETURN_IF_ERROR(AddPenalties(false, 1.0f, &r.loss));
    return r;
  }

  // Backward, node by node in reverse; each tensor's gradient sums its readers'.
  has_grad_[out] = true;
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudaMemsetAsync(
      weights_.grads(), 0, static_cast<size_t>(weights_.trainable_size()) * sizeof(float),
      ctx_->stream()));
  std::vector<DeviceTensor*> dx;
  std::vector<DeviceTensor> scratch;
  std::vector<const DeviceTensor*> ys, dys;
  for (size_t i = nodes_.size(); i-- > 0;) {
    Node& node = nodes_[i];
    if (node.activity_slot >= 0) {
      // The activity regularizer's gradient joins the output's, once its readers' are in.
      const auto o = static_cast<size_t>(node.spec.outputs[0]);
      if (!has_grad_[o]) {
        LOCKSTEP_RETURN_IF_ERROR(grads_[o].Resize(ctx_, values_[o].shape(), values_[o].dtype()));
        LOCKSTEP_GPU_RETURN_IF_ERROR(
            cudaMemsetAsync(grads_[o].data(), 0, grads_[o].bytes(), ctx_->stream()));
        has_grad_[o] = true;
      }
      LOCKSTEP_RETURN_IF_ERROR(Activity(node, &grads_[o], loss_scale));
    }
    ys.clear();
    dys.clear();
    for (int t : node.spec.outputs) {
      const auto k = static_cast<size_t>(t);
      ys.push_back(&values_[k]);
      dys.push_back(has_grad_[k] ? &grads_[k] : nullptr);
    }
    if (std::all_of(dys.begin(), dys.end(), [](const DeviceTensor* d) { return d == nullptr; })) {
      continue;  // feeds no loss: every gradient through it is zero
    }
    in.clear();
    for (int t : node.spec.inputs) in.push_back(&values_[static_cast<size_t>(t)]);
    const size_t k = node.spec.inputs.size();
    dx.assign(k, nullptr);
    scratch.resize(std::max(scratch.size(), k));
    for (size_t j = 0; j < k; ++j) {
      if (!node.spec.need_din[j]) continue;
      const int t = node.spec.inputs[j];
      // The first contribution lands in the tensor's gradient, later ones (another reader's,
      // or this node's own when it reads the tensor twice) in scratch.
      const bool taken =
          has_grad_[static_cast<size_t>(t)] ||
          std::find(node.spec.inputs.begin(), node.spec.inputs.begin() + static_cast<long>(j), t) !=
              node.spec.inputs.begin() + static_cast<long>(j);
      dx[j] = taken ? &scratch[j] : &grads_[static_cast<size_t>(t)];
    }
    const bool trains =
        std::any_of(node.spec.layer->weights().begin(), node.spec.layer->weights().end(),
                    [](const graph::Weight& w) { return w.trainable; });
    if (!trains &&
        std::all_of(dx.begin(), dx.end(), [](DeviceTensor* t) { return t == nullptr; })) {
      continue;  // nothing to compute: no weight to train, no input that takes a gradient
    }
    absl::Status s = node.op->BackwardAll(in, ys, dys, dx);
    if (!s.ok()) {
      return absl::Status(s.code(), "layer '" + node.spec.layer->name() + "' (" +
                                        node.spec.layer->class_name() +
                                        ") backward: " + std::string(s.message()));
    }
    for (size_t j = 0; j < k; ++j) {
      if (dx[j] == nullptr) continue;
      const auto t = static_cast<size_t>(node.spec.inputs[j]);
      if (dx[j] == &scratch[j]) {
        LOCKSTEP_RETURN_IF_ERROR(cuda::AddInto(ctx_, &grads_[t], scratch[j]));
      }
      has_grad_[t] = true;
    }
  }
  LOCKSTEP_RETURN_IF_ERROR(AddPenalties(true, loss_scale, &r.loss));
  return r;
}

}  // namespace lockstep::trainer
