// The finite-difference checker itself: it must pass a correct derivative of a strongly curved
// function and report a wrong one, whatever step it starts from.

#include "trainer/graph/testing/gradcheck.h"

#include <cmath>

#include "gtest/gtest.h"

namespace lockstep::trainer::graph::testing {
namespace {

// y = sin(k * x) elementwise; Backward multiplies the true derivative by `error`.
class Sine : public Layer {
 public:
  Sine(float k, float error) : Layer("sine", "Sine"), k_(k), error_(error) {}
  absl::StatusOr<std::vector<Shape>> Build(const std::vector<Shape>& inputs,
                                           const BuildContext&) override {
    built_ = true;
    return inputs;
  }
  void Forward(const Args& in, std::vector<Tensor>* out, Saved*, const CallContext&) override {
    Tensor& y = (*out)[0];
    y = Tensor(in.x[0]->shape());
    for (int64_t i = 0; i < y.size(); ++i) y[i] = std::sin(k_ * (*in.x[0])[i]);
  }
  void Backward(const Args& in, const std::vector<Tensor>&, const std::vector<const Tensor*>& dout,
                const std::vector<bool>&, std::vector<Tensor>* din, Saved*) override {
    Tensor& dx = (*din)[0];
    dx = Tensor(in.x[0]->shape());
    for (int64_t i = 0; i < dx.size(); ++i) {
      dx[i] = error_ * k_ * std::cos(k_ * (*in.x[0])[i]) * (*dout[0])[i];
    }
  }

 private:
  float k_, error_;
};

TEST(GradCheckTest, ACorrectDerivativeOfACurvedFunctionPasses) {
  // At k = 40 the central difference at the default step is off by (k h)^2 / 6, about 3%,
  // more than the 2% tolerance: the check confirms at smaller steps before it reports.
  Sine layer(40, 1.0f);
  GradCheckOptions o;
  o.samples = 24;
  EXPECT_EQ(CheckLayerGradients(layer, {RandomTensor({2, 12}, 3)}, o), "");
}

// y = |x - c| + x with c just off the sampled point: correct away from the kink, which every
// step wider than the distance to c straddles.
class Kink : public Layer {
 public:
  explicit Kink(float offset) : Layer("kink", "Kink"), offset_(offset) {}
  absl::StatusOr<std::vector<Shape>> Build(const std::vector<Shape>& inputs,
                                           const BuildContext&) override {
    built_ = true;
    return inputs;
  }
  void Forward(const Args& in, std::vector<Tensor>* out, Saved*, const CallContext&) override {
    Tensor& y = (*out)[0];
    y = Tensor(in.x[0]->shape());
    for (int64_t i = 0; i < y.size(); ++i) {
      const float x = (*in.x[0])[i];
      y[i] = std::abs(x - Center(i)) + x;
    }
  }
  void Backward(const Args& in, const std::vector<Tensor>&, const std::vector<const Tensor*>& dout,
                const std::vector<bool>&, std::vector<Tensor>* din, Saved*) override {
    Tensor& dx = (*din)[0];
    dx = Tensor(in.x[0]->shape());
    for (int64_t i = 0; i < dx.size(); ++i) {
      const float x = (*in.x[0])[i];
      dx[i] = ((x > Center(i) ? 1.0f : -1.0f) + 1.0f) * (*dout[0])[i];
    }
  }
  // The kink sits `offset` below each input's value (set from the first forward).
  float Center(int64_t i) {
    if (centers_.size() <= static_cast<size_t>(i)) centers_.resize(static_cast<size_t>(i) + 1);
    return centers_[static_cast<size_t>(i)];
  }
  void Place(const Tensor& x) {
    centers_.clear();
    for (float v : x.values()) centers_.push_back(v - offset_);
  }

 private:
  float offset_;
  std::vector<float> centers_;
};

TEST(GradCheckTest, AKinkNearThePointIsSteppedOver) {
  // 0.001 away: steps 0.01 down to 0.00125 straddle it, 0.000625 and smaller do not.
  const Tensor x = RandomTensor({2, 6}, 5);
  Kink layer(0.001f);
  layer.Place(x);
  EXPECT_EQ(CheckLayerGradients(layer, {x}), "");
}

TEST(GradCheckTest, AWrongDerivativeIsReportedAtEveryCurvature) {
  for (float k : {1.0f, 40.0f}) {
    Sine layer(k, 1.1f);
    const std::string report = CheckLayerGradients(layer, {RandomTensor({2, 12}, 3)});
    EXPECT_NE(report.find("input 0["), std::string::npos) << "k = " << k << ": " << report;
    EXPECT_NE(report.find("finite differences"), std::string::npos) << report;
  }
}

}  // namespace
}  // namespace lockstep::trainer::graph::testing
