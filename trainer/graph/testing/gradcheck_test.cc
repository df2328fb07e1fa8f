// The finite-difference checker itself: it must pass a correct derivative of a strongly curved
// or kinked function and report a wrong one, whatever step it starts from.

#include "trainer/graph/testing/gradcheck.h"

#include <cmath>
#include <functional>
#include <utility>

#include "gtest/gtest.h"

namespace lockstep::trainer::graph::testing {
namespace {

// y[i] = f(i, x[i]), whose backward pass takes df(i, x[i]) as the derivative.
class Elementwise : public Layer {
 public:
  using Fn = std::function<float(int64_t, float)>;
  Elementwise(Fn f, Fn df) : Layer("elementwise", "Elementwise"), f_(std::move(f)), df_(df) {}
  absl::StatusOr<std::vector<Shape>> Build(const std::vector<Shape>& inputs,
                                           const BuildContext&) override {
    built_ = true;
    return inputs;
  }
  void Forward(const Args& in, std::vector<Tensor>* out, Saved*, const CallContext&) override {
    Tensor& y = (*out)[0];
    y = Tensor(in.x[0]->shape());
    for (int64_t i = 0; i < y.size(); ++i) y[i] = f_(i, (*in.x[0])[i]);
  }
  void Backward(const Args& in, const std::vector<Tensor>&, const std::vector<const Tensor*>& dout,
                const std::vector<bool>&, std::vector<Tensor>* din, Saved*) override {
    Tensor& dx = (*din)[0];
    dx = Tensor(in.x[0]->shape());
    for (int64_t i = 0; i < dx.size(); ++i) dx[i] = df_(i, (*in.x[0])[i]) * (*dout[0])[i];
  }

 private:
  Fn f_, df_;
};

// y = sin(k x); the backward pass's derivative is `error` times the true one.
Elementwise Sine(float k, float error) {
  return Elementwise([k](int64_t, float x) { return std::sin(k * x); },
                     [k, error](int64_t, float x) { return error * k * std::cos(k * x); });
}

TEST(GradCheckTest, ACorrectDerivativeOfACurvedFunctionPasses) {
  // At k = 40 the central difference at the default step is off by (k h)^2 / 6, about 3%,
  // more than the 2% tolerance: the check confirms at smaller steps before it reports.
  Elementwise layer = Sine(40, 1.0f);
  GradCheckOptions o;
  o.samples = 24;
  EXPECT_EQ(CheckLayerGradients(layer, {RandomTensor({2, 12}, 3)}, o), "");
}

TEST(GradCheckTest, AKinkNearThePointIsSteppedOver) {
  // y = |x - c| + x with c 0.001 below each input: steps 0.01 down to 0.00125 straddle the
  // kink, 0.000625 and smaller do not.
  const Tensor x = RandomTensor({2, 6}, 5);
  auto center = [&x](int64_t i) { return x[i] - 0.001f; };
  Elementwise layer([center](int64_t i, float v) { return std::abs(v - center(i)) + v; },
                    [center](int64_t i, float v) { return (v > center(i) ? 1.0f : -1.0f) + 1.0f; });
  EXPECT_EQ(CheckLayerGradients(layer, {x}), "");
}

TEST(GradCheckTest, AWrongDerivativeIsReportedAtEveryCurvature) {
  for (float k : {1.0f, 40.0f}) {
    Elementwise layer = Sine(k, 1.1f);
    const std::string report = CheckLayerGradients(layer, {RandomTensor({2, 12}, 3)});
    EXPECT_NE(report.find("input 0["), std::string::npos) << "k = " << k << ": " << report;
    EXPECT_NE(report.find("finite differences"), std::string::npos) << report;
  }
}

}  // namespace
}  // namespace lockstep::trainer::graph::testing
