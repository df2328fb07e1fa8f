// SimpleRNN, LSTM, GRU, Bidirectional and TimeDistributed on the GPU: their device ops
// (layers/gpu_op.h) over the CUDA kernels, registered with the layer registry. CUDA builds only.
#include <memory>
#include <string>
#include <vector>

#include "trainer/kernels/cuda/merge.h"
#include "trainer/layers/gpu_op.h"
#include "trainer/layers/registry.h"
#include "trainer/layers/rnn/rnn.h"
#include "trainer/layers/rnn/rnn_kernels.h"

namespace lockstep::trainer::layers::rnn {
namespace {

using GraphLayer = graph::Layer;
using graph::OptionsOf;
using OpOr = absl::StatusOr<std::unique_ptr<DeviceOp>>;

// SimpleRNN, LSTM, GRU over the fp32 master weights (rnn.h): inputs [x, initial h,
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

}  // namespace

void RegisterGpu(Registry& r) {
  r.GpuOp<graph::RnnOptions>([](const GpuOpArgs& a) -> OpOr {
    return std::make_unique<RecurrentOp>(a.ctx, a.weights, RnnSpecOf(a.layer),
                                         OptionsOf<graph::RnnOptions>(a.layer)->return_state);
  });
  r.GpuOp<graph::BidirectionalOptions>([](const GpuOpArgs& a) -> OpOr {
    const graph::BidirectionalOptions o = *OptionsOf<graph::BidirectionalOptions>(a.layer);
    cuda::RnnSpec bwd = RnnSpecOf(*o.backward);
    bwd.reverse_outputs = true;
    return std::make_unique<BidirectionalOp>(a.ctx, a.layer, a.weights, o, RnnSpecOf(*o.forward),
                                             bwd);
  });
  // The inner layer's weights are the wrapper's, under the same names; its output per time step
  // is the wrapper's without the time axis.
  r.GpuOp<graph::TimeDistributedOptions>([](const GpuOpArgs& a) -> OpOr {
    const graph::TimeDistributedOptions o = *OptionsOf<graph::TimeDistributedOptions>(a.layer);
    absl::StatusOr<std::unique_ptr<DeviceOp>> inner =
        a.inner(*o.inner, Shape(a.out.begin() + 1, a.out.end()));
    if (!inner.ok()) return inner.status();
    return std::make_unique<TimeDistributedOp>(std::move(*inner));
  });
}

}  // namespace lockstep::trainer::layers::rnn
