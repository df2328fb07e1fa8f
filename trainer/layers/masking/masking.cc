#include "trainer/layers/masking/masking.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "trainer/kernels/cpu/column_sums.h"
#include "trainer/kernels/cpu/gemm.h"
#include "trainer/tensor/random.h"

namespace lockstep::trainer::graph {
namespace {

class Compare final : public Layer, public HasOptions<CompareOptions> {
 public:
  CompareOptions options() const override { return {op_, c_}; }
  std::type_index options_type() const override { return typeid(CompareOptions); }
  Compare(std::string name, std::string cls, CompareOp op, float c)
      : Layer(std::move(name), std::move(cls)), op_(op), c_(c) {}
  absl::StatusOr<std::vector<Shape>> Build(const std::vector<Shape>& in,
                                           const BuildContext&) override {
    if (in.size() != 1) return LayerError(*this, "takes one tensor and one constant");
    built_ = true;
    return in;
  }
  void Forward(const Args& in, std::vector<Tensor>* out, Saved*, const CallContext&) override {
    const Tensor& x = *in.x[0];
    Tensor& y = (*out)[0];
    y.Resize(x.shape());
    for (int64_t i = 0; i < x.size(); ++i) {
      const float v = x[i];
      bool r = false;
      switch (op_) {
        case CompareOp::kEqual:
          r = v == c_;
          break;
        case CompareOp::kNotEqual:
          r = v != c_;
          break;
        case CompareOp::kGreater:
          r = v > c_;
          break;
        case CompareOp::kGreaterEqual:
          r = v >= c_;
          break;
        case CompareOp::kLess:
          r = v < c_;
          break;
        case CompareOp::kLessEqual:
          r = v <= c_;
          break;
      }
      y[i] = r ? 1.0f : 0.0f;
    }
  }
  void Backward(const Args&, const std::vector<Tensor>&, const std::vector<const Tensor*>&,
                const std::vector<bool>&, std::vector<Tensor>*, Saved*) override {}
  bool Differentiable(size_t) const override { return false; }
  bool ReadsAnyDtype(size_t) const override { return true; }
  const Tensor* OutputMask(const Args&, const Saved&) const override { return nullptr; }

 private:
  CompareOp op_;
  float c_;
};

class Masking final : public Layer, public HasOptions<MaskingOptions> {
 public:
  MaskingOptions options() const override { return {value_}; }
  std::type_index options_type() const override { return typeid(MaskingOptions); }
  Masking(std::string name, float value) : Layer(std::move(name), "Masking"), value_(value) {}
  absl::StatusOr<std::vector<Shape>> Build(const std::vector<Shape>& in,
                                           const BuildContext&) override {
    if (in.size() != 1 || in[0].size() < 2) {
      return LayerError(*this, "takes one input of [batch, time, features...]");
    }
    built_ = true;
    return in;
  }
  void Forward(const Args& in, std::vector<Tensor>* out, Saved* s, const CallContext&) override {
    const Tensor& x = *in.x[0];
    const int64_t b = x.dim(0), t = x.dim(1), f = x.size() / (b * t);
    s->mask.Resize({b, t});
    Tensor& y = (*out)[0];
    y.Resize(x.shape());
    for (int64_t r = 0; r < b * t; ++r) {
      const float* xr = x.data() + r * f;
      const bool keep = std::any_of(xr, xr + f, [&](float v) { return v != value_; });
      s->mask[r] = keep ? 1.0f : 0.0f;
      for (int64_t j = 0; j < f; ++j) y[r * f + j] = keep ? xr[j] : 0.0f;
    }
  }
  void Backward(const Args& in, const std::vector<Tensor>&, const std::vector<const Tensor*>& dout,
                const std::vector<bool>& need, std::vector<Tensor>* din, Saved* s) override {
    if (!need[0]) return;
    const Tensor& x = *in.x[0];
    const int64_t rows = x.dim(0) * x.dim(1), f = x.size() / rows;
    Tensor& dx = (*din)[0];
    dx.Resize(x.shape());
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < f; ++j) dx[r * f + j] = s->mask[r] * (*dout[0])[r * f + j];
    }
  }
  const Tensor* OutputMask(const Args&, const Saved& s) const override { return &s.mask; }

 private:
  float value_;
};

class MaskWith final : public Layer, public HasOptions<MaskWithOptions> {
 public:
  MaskWithOptions options() const override { return {}; }
  std::type_index options_type() const override { return typeid(MaskWithOptions); }
  explicit MaskWith(std::string name) : Layer(std::move(name), "mask") {}
  absl::StatusOr<std::vector<Shape>> Build(const std::vector<Shape>& in,
                                           const BuildContext&) override {
    if (in.size() != 2 || in[1].size() != 1) {
      return LayerError(*this, "a mask must be [batch, time]");
    }
    built_ = true;
    return std::vector<Shape>{in[0]};
  }
  void Forward(const Args& in, std::vector<Tensor>* out, Saved*, const CallContext&) override {
    (*out)[0] = *in.x[0];
  }
  void Backward(const Args&, const std::vector<Tensor>&, const std::vector<const Tensor*>& dout,
                const std::vector<bool>& need, std::vector<Tensor>* din, Saved*) override {
    if (need[0]) (*din)[0] = *dout[0];
  }
  bool Differentiable(size_t input) const override { return input == 0; }
  const Tensor* OutputMask(const Args& in, const Saved&) const override { return in.x[1]; }
};

}  // namespace

std::unique_ptr<Layer> MakeCompare(std::string name, std::string class_name, CompareOp op,
                                   float constant) {
  return std::make_unique<Compare>(std::move(name), std::move(class_name), op, constant);
}

std::unique_ptr<Layer> MakeMasking(std::string name, float value) {
  return std::make_unique<Masking>(std::move(name), value);
}

std::unique_ptr<Layer> MakeMaskWith(std::string name) {
  return std::make_unique<MaskWith>(std::move(name));
}

}  // namespace lockstep::trainer::graph
