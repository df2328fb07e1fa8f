#include <algorithm>
#include <cmath>

#include "trainer/layers/preprocessing/preprocessing.h"

namespace lockstep::trainer::graph {
namespace {

// Normalization's floor on the standard deviation (backend.epsilon()).
constexpr float kStdFloor = 1e-7f;

class Normalization final : public Layer, public HasOptions<NormalizationOptions> {
 public:
  NormalizationOptions options() const override { return o_; }
  std::type_index options_type() const override { return typeid(NormalizationOptions); }
  Normalization(std::string name, NormalizationOptions o)
      : Layer(std::move(name), "Normalization"), o_(std::move(o)) {}

  absl::StatusOr<std::vector<Shape>> Build(const std::vector<Shape>& in,
                                           const BuildContext&) override {
    if (in.size() != 1) return LayerError(*this, "takes one input");
    const auto rank = static_cast<int64_t>(in[0].size());  // without the batch axis
    int64_t c = 1;
    if (o_.axis) {
      const int64_t a = *o_.axis < 0 ? *o_.axis + rank + 1 : *o_.axis;
      if (rank == 0 || a != rank) {
        return LayerError(*this, "axis " + std::to_string(*o_.axis) +
                                     " is not the last axis of input " + ShapeString(in[0]) +
                                     " (supported: the last axis, or None)");
      }
      c = in[0].back();
      if (c <= 0) return LayerError(*this, "the last axis of its input must be known");
    }
    if (o_.mean) {
      for (const auto* v : {&*o_.mean, &*o_.variance}) {
        if (v->size() != 1 && static_cast<int64_t>(v->size()) != c) {
          return LayerError(*this, "mean and variance have " + std::to_string(v->size()) +
                                       " values; the input has " + std::to_string(c) + " channels");
        }
      }
    }
    if (!built_) {
      if (!o_.mean) {
        const Shape shape = o_.axis ? Shape{c} : Shape{};
        AddWeight("mean", Tensor(shape, 0.0f), false);
        AddWeight("variance", Tensor(shape, 1.0f), false);
        AddWeight("count", Tensor(Shape{}, 0.0f), false);  // Keras keeps an int64
      }
      c_ = c;
      built_ = true;
    } else if (c != c_) {
      return LayerError(*this, "called on inputs of " + std::to_string(c) +
                                   " channels, built for " + std::to_string(c_));
    }
    return in;
  }

  void Forward(const Args& in, std::vector<Tensor>* out, Saved*, const CallContext&) override {
    const Tensor& x = *in.x[0];
    Stats();
    const int64_t c = c_, rows = x.size() / c;
    Tensor& y = (*out)[0];
    y.Resize(x.shape());
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = x.data() + r * c;
      float* yr = y.data() + r * c;
      for (int64_t j = 0; j < c; ++j) {
        const auto u = static_cast<size_t>(j);
        yr[j] = o_.invert ? xr[j] * std_[u] + mean_[u] : (xr[j] - mean_[u]) / std_[u];
      }
    }
  }

  void Backward(const Args& in, const std::vector<Tensor>&, const std::vector<const Tensor*>& dout,
                const std::vector<bool>& need, std::vector<Tensor>* din, Saved*) override {
    if (!need[0]) return;
    const Tensor& x = *in.x[0];
    Stats();
    const int64_t c = c_, rows = x.size() / c;
    Tensor& dx = (*din)[0];
    dx.Resize(x.shape());
    for (int64_t r = 0; r < rows; ++r) {
      const float* g = dout[0]->data() + r * c;
      float* d = dx.data() + r * c;
      for (int64_t j = 0; j < c; ++j) {
        const auto u = static_cast<size_t>(j);
        d[j] = o_.invert ? g[j] * std_[u] : g[j] / std_[u];
      }
    }
  }

 private:
  // The per-channel mean and max(sqrt(variance), 1e-7) from the config or the weights.
  void Stats() {
    const auto c = static_cast<size_t>(c_);
    mean_.assign(c, 0.0f);
    std_.assign(c, 1.0f);
    const float* m = o_.mean ? o_.mean->data() : weights()[0].value.data();
    const float* v = o_.mean ? o_.variance->data() : weights()[1].value.data();
    const size_t n = o_.mean ? o_.mean->size() : static_cast<size_t>(weights()[0].value.size());
    for (size_t j = 0; j < c; ++j) {
      const size_t k = n == 1 ? 0 : j;
      mean_[j] = m[k];
      std_[j] = std::max(std::sqrt(v[k]), kStdFloor);
    }
  }

  NormalizationOptions o_;
  int64_t c_ = 1;
  std::vector<float> mean_, std_;
};

}  // namespace

std::unique_ptr<Layer> MakeNormalization(std::string name, NormalizationOptions o) {
  return std::make_unique<Normalization>(std::move(name), std::move(o));
}

}  // namespace lockstep::trainer::graph
