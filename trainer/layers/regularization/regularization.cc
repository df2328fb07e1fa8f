#include "trainer/layers/regularization/regularization.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "trainer/kernels/cpu/column_sums.h"
#include "trainer/kernels/cpu/gemm.h"
#include "trainer/tensor/random.h"

namespace lockstep::trainer::graph {
namespace {

class Dropout final : public Layer, public HasOptions<DropoutOptions> {
 public:
  DropoutOptions options() const override { return {rate_, noise_}; }
  std::type_index options_type() const override { return typeid(DropoutOptions); }
  Dropout(std::string name, float rate, Shape noise)
      : Layer(std::move(name), "Dropout"), rate_(rate), noise_(std::move(noise)) {}
  absl::StatusOr<std::vector<Shape>> Build(const std::vector<Shape>& in,
                                           const BuildContext&) override {
    if (in.size() != 1) return LayerError(*this, "takes one input");
    if (!noise_.empty() && noise_.size() != in[0].size()) {
      return LayerError(*this, "noise_shape " + ShapeString(noise_) + " does not match input " +
                                   ShapeString(in[0]));
    }
    built_ = true;
    return in;
  }
  void Forward(const Args& in, std::vector<Tensor>* out, Saved* s,
               const CallContext& ctx) override {
    const Tensor& x = *in.x[0];
    Tensor& y = (*out)[0];
    if (!ctx.training || rate_ <= 0) {
      y = x;
      s->t.clear();
      return;
    }
    s->t.resize(1);
    Tensor& mask = s->t[0];
    mask.Resize(x.shape());
    std::bernoulli_distribution keep(1.0 - rate_);
    const float scale = 1.0f / (1.0f - rate_);
    if (noise_.empty()) {
      for (float& v : mask.values()) v = keep(*ctx.rng) ? scale : 0.0f;
    } else {
      // One draw per position of the noise shape, broadcast along its 1-axes.
      const Shape& xs = x.shape();
      Shape ns{xs[0]};
      for (size_t a = 0; a < noise_.size(); ++a) ns.push_back(noise_[a] == 1 ? 1 : xs[a + 1]);
      Tensor draw(ns);
      for (float& v : draw.values()) v = keep(*ctx.rng) ? scale : 0.0f;
      std::vector<int64_t> idx(xs.size(), 0);
      for (int64_t i = 0; i < x.size(); ++i) {
        int64_t j = 0;
        for (size_t a = 0; a < xs.size(); ++a) j = j * ns[a] + (ns[a] == 1 ? 0 : idx[a]);
        mask[i] = draw[j];
        for (size_t a = xs.size(); a-- > 0;) {
          if (++idx[a] < xs[a]) break;
          idx[a] = 0;
        }
      }
    }
    y.Resize(x.shape());
    for (int64_t i = 0; i < x.size(); ++i) y[i] = x[i] * mask[i];
  }
  void Backward(const Args& in, const std::vector<Tensor>&, const std::vector<const Tensor*>& dout,
                const std::vector<bool>& need, std::vector<Tensor>* din, Saved* s) override {
    if (!need[0]) return;
    Tensor& dx = (*din)[0];
    if (s->t.empty()) {
      dx = *dout[0];
      return;
    }
    dx.Resize(in.x[0]->shape());
    for (int64_t i = 0; i < dx.size(); ++i) dx[i] = (*dout[0])[i] * s->t[0][i];
  }

 private:
  float rate_;
  Shape noise_;
};

class GaussianNoise final : public Layer, public HasOptions<GaussianNoiseOptions> {
 public:
  GaussianNoiseOptions options() const override { return {stddev_}; }
  std::type_index options_type() const override { return typeid(GaussianNoiseOptions); }
  GaussianNoise(std::string name, float stddev)
      : Layer(std::move(name), "GaussianNoise"), stddev_(stddev) {}
  absl::StatusOr<std::vector<Shape>> Build(const std::vector<Shape>& in,
                                           const BuildContext&) override {
    if (in.size() != 1) return LayerError(*this, "takes one input");
    built_ = true;
    return in;
  }
  void Forward(const Args& in, std::vector<Tensor>* out, Saved*, const CallContext& ctx) override {
    Tensor& y = (*out)[0];
    y = *in.x[0];
    if (!ctx.training || stddev_ <= 0) return;
    NormalDraw<float> d(0.0f, stddev_);
    for (float& v : y.values()) v += d(*ctx.rng);
  }
  void Backward(const Args&, const std::vector<Tensor>&, const std::vector<const Tensor*>& dout,
                const std::vector<bool>& need, std::vector<Tensor>* din, Saved*) override {
    if (need[0]) (*din)[0] = *dout[0];
  }

 private:
  float stddev_;
};

}  // namespace

std::unique_ptr<Layer> MakeDropout(std::string name, float rate, Shape noise_shape) {
  return std::make_unique<Dropout>(std::move(name), rate, std::move(noise_shape));
}

std::unique_ptr<Layer> MakeGaussianNoise(std::string name, float stddev) {
  return std::make_unique<GaussianNoise>(std::move(name), stddev);
}

}  // namespace lockstep::trainer::graph
