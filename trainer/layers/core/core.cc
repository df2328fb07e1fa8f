#include "trainer/layers/core/core.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "trainer/kernels/cpu/column_sums.h"
#include "trainer/kernels/cpu/gemm.h"
#include "trainer/kernels/cpu/threads.h"
#include "trainer/tensor/random.h"

namespace lockstep::trainer::graph {
namespace {

class Dense final : public Layer, public HasOptions<DenseOptions> {
 public:
  DenseOptions options() const override { return o_; }
  std::type_index options_type() const override { return typeid(DenseOptions); }
  Dense(std::string name, DenseOptions o) : Layer(std::move(name), "Dense"), o_(std::move(o)) {}
  const Activation* output_activation() const override { return &o_.activation; }

  absl::StatusOr<std::vector<Shape>> Build(const std::vector<Shape>& in,
                                           const BuildContext& ctx) override {
    if (in.size() != 1 || in[0].empty()) return LayerError(*this, "takes one input of rank >= 2");
    const int64_t d = in[0].back();
    if (d <= 0) return LayerError(*this, "the last axis of its input must be known");
    if (!built_) {
      Weight& k = AddWeight("kernel", Initialize(o_.kernel_initializer, {d, o_.units}, ctx.rng));
      k.l1 = o_.kernel_l1;
      k.l2 = o_.kernel_l2;
      if (o_.use_bias) {
        Weight& b = AddWeight("bias", Initialize(o_.bias_initializer, {o_.units}, ctx.rng));
        b.l1 = o_.bias_l1;
        b.l2 = o_.bias_l2;
      }
      in_ = d;
      built_ = true;
    } else if (d != in_) {
      return LayerError(*this, "called on inputs of " + std::to_string(d) +
                                   " features, built for " + std::to_string(in_));
    }
    Shape out = in[0];
    out.back() = o_.units;
    return std::vector<Shape>{out};
  }

  void Forward(const Args& in, std::vector<Tensor>* out, Saved* s, const CallContext&) override {
    const Tensor& x = *in.x[0];
    const int64_t m = x.size() / in_;
    Shape shape = x.shape();
    shape.back() = o_.units;
    const bool linear = o_.activation.kind == Act::kLinear;
    if (s->t.empty()) s->t.resize(1);
    Tensor& z = linear ? (*out)[0] : s->t[0];
    z.Resize(shape);
    float* zp = z.data();
    if (o_.use_bias) {
      const float* b = weights()[1].value.data();
      for (int64_t r = 0; r < m; ++r) std::copy_n(b, o_.units, zp + r * o_.units);
    }
    cpu::Gemm(false, false, m, o_.units, in_, 1.0f, x.data(), weights()[0].value.data(),
              o_.use_bias ? 1.0f : 0.0f, zp);
    if (!linear) ActivationForward(o_.activation, z, &(*out)[0]);
  }

  void Backward(const Args& in, const std::vector<Tensor>& out,
                const std::vector<const Tensor*>& dout, const std::vector<bool>& need,
                std::vector<Tensor>* din, Saved* s) override {
    const Tensor& x = *in.x[0];
    const int64_t m = x.size() / in_;
    const Tensor* dz = dout[0];
    if (o_.activation.kind != Act::kLinear) {
      if (s->t.size() < 2) s->t.resize(2);
      ActivationBackward(o_.activation, s->t[0], out[0], *dout[0], &s->t[1]);
      dz = &s->t[1];
    }
    if (weights()[0].trainable) {
      cpu::Gemm(true, false, in_, o_.units, m, 1.0f, x.data(), dz->data(), 1.0f,
                weights()[0].grad.data());
      if (o_.use_bias) cpu::AddColumnSums(dz->data(), m, o_.units, weights()[1].grad.data());
    }
    if (need[0]) {
      (*din)[0].Resize(x.shape());
      cpu::Gemm(false, true, m, in_, o_.units, 1.0f, dz->data(), weights()[0].value.data(), 0.0f,
                (*din)[0].data());
    }
  }

 private:
  DenseOptions o_;
  int64_t in_ = 0;
};

class ActivationLayer final : public Layer, public HasOptions<Activation> {
 public:
  Activation options() const override { return a_; }
  std::type_index options_type() const override { return typeid(Activation); }
  ActivationLayer(std::string name, std::string cls, Activation a)
      : Layer(std::move(name), std::move(cls)), a_(a) {}
  const Activation* output_activation() const override { return &a_; }
  absl::StatusOr<std::vector<Shape>> Build(const std::vector<Shape>& in,
                                           const BuildContext&) override {
    if (in.size() != 1) return LayerError(*this, "takes one input");
    built_ = true;
    return in;
  }
  void Forward(const Args& in, std::vector<Tensor>* out, Saved*, const CallContext&) override {
    ActivationForward(a_, *in.x[0], &(*out)[0]);
  }
  void Backward(const Args& in, const std::vector<Tensor>& out,
                const std::vector<const Tensor*>& dout, const std::vector<bool>& need,
                std::vector<Tensor>* din, Saved*) override {
    if (!need[0]) return;
    Tensor& dz = (*din)[0];
    if (a_.kind == Act::kRelu && &dz != dout[0]) {
      // dz = dy where z > 0, as ActivationBackward computes it, but reading dy unconditionally
      // so the loop vectorises (a conditional read keeps it a branch per element, which
      // mispredicts on half of them: 9% of a ResNet-20 step).
      const Tensor& z = *in.x[0];
      dz.Resize(z.shape());
      const float* zp = z.data();
      const float* gp = dout[0]->data();
      float* dp = dz.data();
      cpu::ParallelFor(z.size(), 2, [&](int64_t b, int64_t e) {
        const float* __restrict zi = zp;
        const float* __restrict g = gp;
        float* __restrict d = dp;
        for (int64_t i = b; i < e; ++i) {
          const float gi = g[i];
          d[i] = zi[i] > 0 ? gi : 0.0f;
        }
      });
      return;
    }
    ActivationBackward(a_, *in.x[0], out[0], *dout[0], &dz);
  }

 private:
  Activation a_;
};

class ReluLayer final : public Layer, public HasOptions<ReluOptions> {
 public:
  ReluOptions options() const override { return {max_, slope_, threshold_}; }
  std::type_index options_type() const override { return typeid(ReluOptions); }
  ReluLayer(std::string name, float max_value, float slope, float threshold)
      : Layer(std::move(name), "ReLU"), max_(max_value), slope_(slope), threshold_(threshold) {}
  absl::StatusOr<std::vector<Shape>> Build(const std::vector<Shape>& in,
                                           const BuildContext&) override {
    if (in.size() != 1) return LayerError(*this, "takes one input");
    built_ = true;
    return in;
  }
  void Forward(const Args& in, std::vector<Tensor>* out, Saved*, const CallContext&) override {
    const Tensor& x = *in.x[0];
    Tensor& y = (*out)[0];
    y.Resize(x.shape());
    for (int64_t i = 0; i < x.size(); ++i) {
      const float v = x[i];
      y[i] = v >= threshold_ ? std::min(v, max_) : slope_ * (v - threshold_);
    }
  }
  void Backward(const Args& in, const std::vector<Tensor>&, const std::vector<const Tensor*>& dout,
                const std::vector<bool>& need, std::vector<Tensor>* din, Saved*) override {
    if (!need[0]) return;
    const Tensor& x = *in.x[0];
    Tensor& dx = (*din)[0];
    dx.Resize(x.shape());
    for (int64_t i = 0; i < x.size(); ++i) {
      const float v = x[i];
      dx[i] = v >= threshold_ ? (v < max_ ? (*dout[0])[i] : 0.0f) : slope_ * (*dout[0])[i];
    }
  }

 private:
  float max_, slope_, threshold_;
};

}  // namespace

std::unique_ptr<Layer> MakeDense(std::string name, DenseOptions o) {
  return std::make_unique<Dense>(std::move(name), std::move(o));
}

std::unique_ptr<Layer> MakeActivation(std::string name, std::string class_name, Activation a) {
  return std::make_unique<ActivationLayer>(std::move(name), std::move(class_name), a);
}

std::unique_ptr<Layer> MakeRelu(std::string name, float max_value, float negative_slope,
                                float threshold) {
  return std::make_unique<ReluLayer>(std::move(name), max_value, negative_slope, threshold);
}

std::optional<Activation> ReluActivation(const ReluOptions& r) {
  const bool unbounded = r.max_value >= 3.0e38f;
  if (r.threshold != 0) return std::nullopt;
  if (r.negative_slope == 0 && unbounded) return Activation{Act::kRelu, 0};
  if (r.negative_slope == 0 && r.max_value == 6.0f) return Activation{Act::kRelu6, 0};
  if (unbounded) return Activation{Act::kLeakyRelu, r.negative_slope};
  return std::nullopt;
}

}  // namespace lockstep::trainer::graph
