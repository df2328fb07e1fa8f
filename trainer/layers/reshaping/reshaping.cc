#include "trainer/layers/reshaping/reshaping.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "trainer/kernels/cpu/column_sums.h"
#include "trainer/kernels/cpu/gemm.h"
#include "trainer/tensor/random.h"

namespace lockstep::trainer::graph {
namespace {

// Layers that only change the shape (Flatten, Reshape): the data is copied as is.
class ReshapeLayer final : public Layer, public HasOptions<ReshapeOptions> {
 public:
  ReshapeLayer(std::string name, std::string cls, Shape target)
      : Layer(std::move(name), std::move(cls)), target_(std::move(target)) {}
  ReshapeOptions options() const override { return {target_, class_name() == "Flatten"}; }
  std::type_index options_type() const override { return typeid(ReshapeOptions); }
  absl::StatusOr<std::vector<Shape>> Build(const std::vector<Shape>& in,
                                           const BuildContext&) override {
    if (in.size() != 1) return LayerError(*this, "takes one input");
    const Shape& s = in[0];
    const bool known = std::all_of(s.begin(), s.end(), [](int64_t d) { return d > 0; });
    Shape out;
    if (class_name() == "Flatten") {
      if (!known) return LayerError(*this, "needs every input axis known, got " + ShapeString(s));
      out = {NumElements(s)};
    } else {
      out = target_;
      const auto unknown = std::count(out.begin(), out.end(), -1);
      if (unknown > 1) return LayerError(*this, "target_shape has more than one unknown axis");
      if (!known) {
        if (unknown > 0)
          return LayerError(*this, "cannot infer an axis of input " + ShapeString(s));
      } else {
        int64_t rest = 1;
        for (int64_t d : out) rest *= d > 0 ? d : 1;
        if (unknown == 1) {
          if (rest == 0 || NumElements(s) % rest != 0) {
            return LayerError(*this,
                              "cannot reshape " + ShapeString(s) + " to " + ShapeString(target_));
          }
          *std::find(out.begin(), out.end(), -1) = NumElements(s) / rest;
        } else if (rest != NumElements(s)) {
          return LayerError(*this, "cannot reshape " + ShapeString(s) + " (" +
                                       std::to_string(NumElements(s)) + " values) to " +
                                       ShapeString(target_));
        }
      }
    }
    out_ = out;
    built_ = true;
    return std::vector<Shape>{out};
  }
  void Forward(const Args& in, std::vector<Tensor>* out, Saved*, const CallContext&) override {
    const Tensor& x = *in.x[0];
    (*out)[0] = x.Reshaped(Batched(x.dim(0), out_));
  }
  void Backward(const Args& in, const std::vector<Tensor>&, const std::vector<const Tensor*>& dout,
                const std::vector<bool>& need, std::vector<Tensor>* din, Saved*) override {
    if (need[0]) (*din)[0] = dout[0]->Reshaped(in.x[0]->shape());
  }
  // A mask of [batch, time] survives only while the time axis does.
  const Tensor* OutputMask(const Args&, const Saved&) const override { return nullptr; }

 private:
  Shape target_, out_;
};

class RepeatVector final : public Layer, public HasOptions<RepeatOptions> {
 public:
  RepeatVector(std::string name, int64_t n) : Layer(std::move(name), "RepeatVector"), n_(n) {}
  RepeatOptions options() const override { return {n_}; }
  std::type_index options_type() const override { return typeid(RepeatOptions); }
  absl::StatusOr<std::vector<Shape>> Build(const std::vector<Shape>& in,
                                           const BuildContext&) override {
    if (in.size() != 1 || in[0].size() != 1) {
      return LayerError(*this, "takes one input of rank 2 (batch, features)");
    }
    built_ = true;
    return std::vector<Shape>{{n_, in[0][0]}};
  }
  void Forward(const Args& in, std::vector<Tensor>* out, Saved*, const CallContext&) override {
    const Tensor& x = *in.x[0];
    const int64_t b = x.dim(0), d = x.dim(1);
    Tensor& y = (*out)[0];
    y.Resize({b, n_, d});
    for (int64_t i = 0; i < b; ++i) {
      for (int64_t t = 0; t < n_; ++t)
        std::copy_n(x.data() + i * d, d, y.data() + (i * n_ + t) * d);
    }
  }
  void Backward(const Args& in, const std::vector<Tensor>&, const std::vector<const Tensor*>& dout,
                const std::vector<bool>& need, std::vector<Tensor>* din, Saved*) override {
    if (!need[0]) return;
    const Tensor& x = *in.x[0];
    const int64_t b = x.dim(0), d = x.dim(1);
    Tensor& dx = (*din)[0];
    dx.Resize(x.shape());
    dx.Fill(0.0f);
    for (int64_t i = 0; i < b; ++i) {
      for (int64_t t = 0; t < n_; ++t) {
        for (int64_t j = 0; j < d; ++j) dx[i * d + j] += (*dout[0])[(i * n_ + t) * d + j];
      }
    }
  }
  const Tensor* OutputMask(const Args&, const Saved&) const override { return nullptr; }

 private:
  int64_t n_;
};

}  // namespace

std::unique_ptr<Layer> MakeFlatten(std::string name) {
  return std::make_unique<ReshapeLayer>(std::move(name), "Flatten", Shape{});
}

std::unique_ptr<Layer> MakeReshape(std::string name, Shape target) {
  return std::make_unique<ReshapeLayer>(std::move(name), "Reshape", std::move(target));
}

std::unique_ptr<Layer> MakeRepeatVector(std::string name, int64_t n) {
  return std::make_unique<RepeatVector>(std::move(name), n);
}

}  // namespace lockstep::trainer::graph
