#include "trainer/layers/prelu/prelu.h"

#include <algorithm>

#include "trainer/keras/layer_factory.h"
#include "trainer/layers/onnx_builder.h"
#include "trainer/layers/registry.h"

namespace lockstep::trainer {
namespace graph {
namespace {

class PRelu final : public Layer, public HasOptions<PReluOptions> {
 public:
  PRelu(std::string name, PReluOptions o) : Layer(std::move(name), "PReLU"), o_(std::move(o)) {}
  PReluOptions options() const override { return o_; }
  std::type_index options_type() const override { return typeid(PReluOptions); }

  absl::StatusOr<std::vector<Shape>> Build(const std::vector<Shape>& in,
                                           const BuildContext& ctx) override {
    if (in.size() != 1 || in[0].empty()) return LayerError(*this, "takes one input of rank >= 2");
    const Shape& s = in[0];
    if (std::any_of(s.begin(), s.end(), [](int64_t d) { return d <= 0; })) {
      return LayerError(*this, "needs every input axis known, got " + ShapeString(s));
    }
    Shape alpha = s;
    for (int64_t a : o_.shared_axes) {
      if (a < 1 || a > static_cast<int64_t>(s.size())) {
        return LayerError(*this, "shared axis " + std::to_string(a) + " is not an axis of its " +
                                     "input " + ShapeString(s) + " (axes count from 1)");
      }
      alpha[static_cast<size_t>(a - 1)] = 1;
    }
    if (!built_) {
      Weight& w = AddWeight("alpha", Initialize(o_.alpha_initializer, alpha, ctx.rng));
      w.l1 = o_.alpha_l1;
      w.l2 = o_.alpha_l2;
      Index(s, alpha);
      built_ = true;
    } else if (static_cast<int64_t>(map_.size()) != NumElements(s) ||
               weights()[0].value.shape() != alpha) {
      return LayerError(*this, "called on inputs of shape " + ShapeString(s) +
                                   ", which its alpha " + ShapeString(weights()[0].value.shape()) +
                                   " was not built for");
    }
    return std::vector<Shape>{s};
  }

  void Forward(const Args& in, std::vector<Tensor>* out, Saved*, const CallContext&) override {
    const Tensor& x = *in.x[0];
    Tensor& y = (*out)[0];
    y.Resize(x.shape());
    const float* a = weights()[0].value.data();
    const auto e = static_cast<int64_t>(map_.size());
    const float* px = x.data();
    float* py = y.data();
    for (int64_t r = 0; r < x.size() / e; ++r) {
      for (int64_t j = 0; j < e; ++j) {
        const float v = px[r * e + j];
        py[r * e + j] = v >= 0.0f ? v : a[map_[static_cast<size_t>(j)]] * v;
      }
    }
  }

  void Backward(const Args& in, const std::vector<Tensor>&, const std::vector<const Tensor*>& dout,
                const std::vector<bool>& need, std::vector<Tensor>* din, Saved*) override {
    const Tensor& x = *in.x[0];
    const float* dy = dout[0]->data();
    const float* a = weights()[0].value.data();
    Weight& w = weights()[0];
    float* da = w.trainable ? w.grad.data() : nullptr;
    float* dx = nullptr;
    if (need[0]) {
      (*din)[0].Resize(x.shape());
      dx = (*din)[0].data();
    }
    const auto e = static_cast<int64_t>(map_.size());
    const float* px = x.data();
    for (int64_t r = 0; r < x.size() / e; ++r) {
      for (int64_t j = 0; j < e; ++j) {
        const int64_t i = r * e + j;
        const int64_t k = map_[static_cast<size_t>(j)];
        const bool pos = px[i] >= 0.0f;
        if (dx != nullptr) dx[i] = pos ? dy[i] : a[k] * dy[i];
        if (da != nullptr && !pos) da[k] += dy[i] * px[i];
      }
    }
  }

 private:
  // map_[j]: the alpha element that example element j (row-major over `s`) uses.
  void Index(const Shape& s, const Shape& alpha) {
    map_.assign(static_cast<size_t>(NumElements(s)), 0);
    std::vector<int64_t> coord(s.size(), 0);
    for (size_t j = 0; j < map_.size(); ++j) {
      int64_t k = 0;
      for (size_t d = 0; d < s.size(); ++d) k = k * alpha[d] + (alpha[d] == 1 ? 0 : coord[d]);
      map_[j] = k;
      for (size_t d = s.size(); d-- > 0;) {
        if (++coord[d] < s[d]) break;
        coord[d] = 0;
      }
    }
  }

  PReluOptions o_;
  std::vector<int64_t> map_;
};

}  // namespace

std::unique_ptr<Layer> MakePRelu(std::string name, PReluOptions o) {
  return std::make_unique<PRelu>(std::move(name), std::move(o));
}

}  // namespace graph

namespace layers::prelu {
namespace {

absl::StatusOr<std::unique_ptr<graph::Layer>> FromKeras(keras::LayerConfig& c,
                                                        const keras::LayerFactories&) {
  graph::PReluOptions o;
  o.alpha_initializer = c.Initializer("alpha_initializer", graph::Zeros());
  const keras::Regularizer r = c.Regularization("alpha_regularizer");
  o.alpha_l1 = r.l1;
  o.alpha_l2 = r.l2;
  c.ExpectNull({"alpha_constraint"});
  o.shared_axes = c.Axes("shared_axes", {});
  return graph::MakePRelu(c.name(), o);
}

// ONNX's PRelu broadcasts alpha (the example's shape) against [batch, ...] as the layer does.
absl::StatusOr<std::vector<std::string>> ToOnnx(OnnxBuilder& ox, const OnnxArgs& a) {
  return std::vector<std::string>{
      ox.Op("PRelu", {a.in[0], ox.Const("alpha", *a.weights.Get("alpha"))})};
}

}  // namespace

void Register(Registry& r) {
  r.keras().Add("PReLU", FromKeras);
  // The GPU op reduces alpha's gradient as a bias's: alpha must vary along the trailing axes
  // only (shared axes, if any, the leading ones: Keras's usual [1, 2] over images).
  r.SupportsGpu<graph::PReluOptions>([](const graph::Layer& l, const GpuNode&) {
    std::vector<int64_t> axes = graph::OptionsOf<graph::PReluOptions>(l)->shared_axes;
    std::sort(axes.begin(), axes.end());
    for (size_t i = 0; i < axes.size(); ++i) {
      if (axes[i] != static_cast<int64_t>(i) + 1) {
        return GpuRefusal(l, "shared_axes other than the leading axes");
      }
    }
    return absl::OkStatus();
  });
  r.Onnx<graph::PReluOptions>(ToOnnx);
}

}  // namespace layers::prelu
}  // namespace lockstep::trainer
