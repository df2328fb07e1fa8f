// DepthwiseConv1D/2D and SeparableConv1D/2D on the CPU (layers/convolutional/convolutional.h).
#include "trainer/layers/convolutional/window_layer.h"

namespace lockstep::trainer::graph {
namespace {

using namespace conv_detail;

class DepthwiseConv final : public WindowLayer, public HasOptions<DepthwiseOptions> {
 public:
  DepthwiseOptions options() const override { return o_; }
  std::type_index options_type() const override { return typeid(DepthwiseOptions); }
  cpu::ConvGeometry Geometry(const Shape& x) const override {
    return ToConvGeometry(InputGeo(x), x.back() * o_.depth_multiplier, true);
  }
  explicit DepthwiseConv(std::string name, DepthwiseOptions o)
      : WindowLayer(std::move(name), ConvClass("DepthwiseConv", o.rank), o.rank, o.kernel_size,
                    o.strides, o.dilation_rate, o.padding, o.activation, o.use_bias),
        o_(std::move(o)) {}

  absl::StatusOr<std::vector<Shape>> Build(const std::vector<Shape>& in,
                                           const BuildContext& ctx) override {
    Shape out;
    if (absl::Status st = CheckInput(in, &out); !st.ok()) return st;
    const int64_t cin = in[0].back(), mult = o_.depth_multiplier;
    if (!built_) {
      Shape ks = o_.kernel_size;
      ks.push_back(cin);
      ks.push_back(mult);
      SetRegularizers(
          AddWeight("depthwise_kernel", Initialize(o_.depthwise_initializer, ks, ctx.rng)),
          o_.depthwise_l1, o_.depthwise_l2);
      if (use_bias_) {
        SetRegularizers(AddWeight("bias", Initialize(o_.bias_initializer, {cin * mult}, ctx.rng)),
                        o_.bias_l1, o_.bias_l2);
      }
      cin_ = cin;
      built_ = true;
    } else if (cin != cin_) {
      return LayerError(*this, "called on inputs of " + std::to_string(cin) +
                                   " channels, built for " + std::to_string(cin_));
    }
    out.push_back(cin * mult);
    return std::vector<Shape>{out};
  }

  void Forward(const Args& in, std::vector<Tensor>* out, Saved* s,
               const CallContext& ctx) override {
    const Tensor& x = *in.x[0];
    const Geo g = InputGeo(x.shape());
    ReportEmpty(g, x.shape(), ctx);
    const int64_t cm = g.c * o_.depth_multiplier;
    Tensor& z = PreActivation(out, s);
    z.Resize(OutShape(g, cm));
    if (DnnlForward(g, cm, true, use_bias_, x.data(), z.data())) {
      Activate(out, s);
      return;
    }
    z.Fill(0.0f);
    DepthwiseForward(g, o_.depth_multiplier, x.data(), weights()[0].value.data(), z.data());
    if (use_bias_) AddBias(weights()[1].value.data(), z.size() / cm, cm, z.data());
    Activate(out, s);
  }

  void Backward(const Args& in, const std::vector<Tensor>& out,
                const std::vector<const Tensor*>& dout, const std::vector<bool>& need,
                std::vector<Tensor>* din, Saved* s) override {
    const Tensor& x = *in.x[0];
    const Geo g = InputGeo(x.shape());
    const Tensor* dz = PreActivationGrad(out, dout, s);
    const int64_t cm = g.c * o_.depth_multiplier;
    const bool wgrad = weights()[0].trainable;
    if (need[0]) (*din)[0].Resize(x.shape());
    if (DnnlBackward(g, cm, true, use_bias_, x.data(), dz->data(),
                     need[0] ? (*din)[0].data() : nullptr)) {
      return;
    }
    if (wgrad && use_bias_)
      cpu::AddColumnSums(dz->data(), dz->size() / cm, cm, weights()[1].grad.data());
    float* dx = nullptr;
    if (need[0]) {
      (*din)[0].Resize(x.shape());
      (*din)[0].Fill(0.0f);
      dx = (*din)[0].data();
    }
    DepthwiseBackward(g, o_.depth_multiplier, x.data(), weights()[0].value.data(), dz->data(), dx,
                      wgrad ? weights()[0].grad.data() : nullptr);
  }

 private:
  DepthwiseOptions o_;
};

class SeparableConv final : public WindowLayer, public HasOptions<SeparableOptions> {
 public:
  SeparableOptions options() const override { return o_; }
  std::type_index options_type() const override { return typeid(SeparableOptions); }
  cpu::ConvGeometry Geometry(const Shape& x) const override {
    return ToConvGeometry(InputGeo(x), x.back() * o_.depth_multiplier, true);
  }
  explicit SeparableConv(std::string name, SeparableOptions o)
      : WindowLayer(std::move(name), ConvClass("SeparableConv", o.rank), o.rank, o.kernel_size,
                    o.strides, o.dilation_rate, o.padding, o.activation, o.use_bias),
        o_(std::move(o)) {}

  absl::StatusOr<std::vector<Shape>> Build(const std::vector<Shape>& in,
                                           const BuildContext& ctx) override {
    Shape out;
    if (absl::Status st = CheckInput(in, &out); !st.ok()) return st;
    const int64_t cin = in[0].back(), mult = o_.depth_multiplier;
    if (!built_) {
      Shape ks = o_.kernel_size;
      ks.push_back(cin);
      ks.push_back(mult);
      SetRegularizers(
          AddWeight("depthwise_kernel", Initialize(o_.depthwise_initializer, ks, ctx.rng)),
          o_.depthwise_l1, o_.depthwise_l2);
      Shape ps(static_cast<size_t>(rank_), 1);
      ps.push_back(cin * mult);
      ps.push_back(o_.filters);
      SetRegularizers(
          AddWeight("pointwise_kernel", Initialize(o_.pointwise_initializer, ps, ctx.rng)),
          o_.pointwise_l1, o_.pointwise_l2);
      if (use_bias_) {
        SetRegularizers(AddWeight("bias", Initialize(o_.bias_initializer, {o_.filters}, ctx.rng)),
                        o_.bias_l1, o_.bias_l2);
      }
      cin_ = cin;
      built_ = true;
    } else if (cin != cin_) {
      return LayerError(*this, "called on inputs of " + std::to_string(cin) +
                                   " channels, built for " + std::to_string(cin_));
    }
    out.push_back(o_.filters);
    return std::vector<Shape>{out};
  }

  void Forward(const Args& in, std::vector<Tensor>* out, Saved* s,
               const CallContext& ctx) override {
    const Tensor& x = *in.x[0];
    const Geo g = InputGeo(x.shape());
    ReportEmpty(g, x.shape(), ctx);
    const int64_t cm = g.c * o_.depth_multiplier, f = o_.filters;
    Tensor& z = PreActivation(out, s);
    Tensor& mid = s->t[1];
    mid.Resize(OutShape(g, cm));
    if (!DnnlForward(g, cm, true, false, x.data(), mid.data())) {
      mid.Fill(0.0f);
      DepthwiseForward(g, o_.depth_multiplier, x.data(), weights()[0].value.data(), mid.data());
    }
    z.Resize(OutShape(g, f));
    const int64_t rows = mid.size() / cm;
    if (rows > 0) {
      cpu::Gemm(false, false, rows, f, cm, 1.0f, mid.data(), weights()[1].value.data(), 0.0f,
                z.data());
    }
    if (use_bias_) AddBias(weights()[2].value.data(), rows, f, z.data());
    Activate(out, s);
  }

  void Backward(const Args& in, const std::vector<Tensor>& out,
                const std::vector<const Tensor*>& dout, const std::vector<bool>& need,
                std::vector<Tensor>* din, Saved* s) override {
    const Tensor& x = *in.x[0];
    const Geo g = InputGeo(x.shape());
    const Tensor* dz = PreActivationGrad(out, dout, s);
    const int64_t cm = g.c * o_.depth_multiplier, f = o_.filters;
    const Tensor& mid = s->t[1];
    const int64_t rows = mid.size() / cm;
    const bool wgrad = weights()[0].trainable;
    if (wgrad && use_bias_) cpu::AddColumnSums(dz->data(), rows, f, weights()[2].grad.data());
    float* dx = nullptr;
    if (need[0]) {
      (*din)[0].Resize(x.shape());
      (*din)[0].Fill(0.0f);
      dx = (*din)[0].data();
    }
    if (rows == 0) return;
    if (wgrad) {
      cpu::Gemm(true, false, cm, f, rows, 1.0f, mid.data(), dz->data(), 1.0f,
                weights()[1].grad.data());
    }
    Tensor& dmid = s->t[3];
    dmid.Resize(mid.shape());
    cpu::Gemm(false, true, rows, cm, f, 1.0f, dz->data(), weights()[1].value.data(), 0.0f,
              dmid.data());
    if (DnnlBackward(g, cm, true, false, x.data(), dmid.data(), dx)) return;
    DepthwiseBackward(g, o_.depth_multiplier, x.data(), weights()[0].value.data(), dmid.data(), dx,
                      wgrad ? weights()[0].grad.data() : nullptr);
  }

 private:
  SeparableOptions o_;
};

}  // namespace

std::unique_ptr<Layer> MakeDepthwiseConv(std::string name, DepthwiseOptions o) {
  return std::make_unique<DepthwiseConv>(std::move(name), std::move(o));
}
std::unique_ptr<Layer> MakeSeparableConv(std::string name, SeparableOptions o) {
  return std::make_unique<SeparableConv>(std::move(name), std::move(o));
}

}  // namespace lockstep::trainer::graph
