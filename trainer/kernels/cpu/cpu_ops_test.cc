// Every CPU op against a direct reference, and every backward pass against central finite
// differences of a scalar loss L = sum(y * g) for a random g.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>

#include "trainer/kernels/cpu/conv2d.h"
#include "trainer/kernels/cpu/dense.h"
#include "trainer/kernels/cpu/gemm.h"
#include "trainer/kernels/cpu/max_pool.h"
#include "trainer/kernels/cpu/relu.h"
#include "trainer/kernels/cpu/softmax_xent.h"

namespace lockstep::trainer::cpu {
namespace {

Tensor Random(Shape shape, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  Tensor t(std::move(shape));
  for (int64_t i = 0; i < t.size(); ++i) t[i] = u(rng);
  return t;
}

double Dot(const Tensor& a, const Tensor& b) {
  double s = 0;
  for (int64_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

// Compares `analytic` (dL/dp) with central differences of `loss` around `*p`, at up to 40
// coordinates spread over p.
void CheckGradient(const std::string& what, Tensor* p, const Tensor& analytic,
                   const std::function<double()>& loss, float eps = 1e-2f, double tol = 2e-2) {
  ASSERT_EQ(p->size(), analytic.size()) << what;
  const int64_t step = std::max<int64_t>(1, p->size() / 40);
  for (int64_t i = 0; i < p->size(); i += step) {
    const float saved = (*p)[i];
    (*p)[i] = saved + eps;
    const double up = loss();
    (*p)[i] = saved - eps;
    const double down = loss();
    (*p)[i] = saved;
    const double numeric = (up - down) / (2.0 * eps);
    const double a = analytic[i];
    EXPECT_NEAR(a, numeric, tol * std::max(1.0, std::abs(numeric)))
        << what << " at " << i << " of " << ShapeString(p->shape());
  }
}

TEST(GemmTest, MatchesNaiveForEveryTranspose) {
  const int64_t m = 7, n = 5, k = 9;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      Tensor a = Random(ta ? Shape{k, m} : Shape{m, k}, 1);
      Tensor b = Random(tb ? Shape{n, k} : Shape{k, n}, 2);
      Tensor c = Random({m, n}, 3);
      Tensor want = c;
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          double s = 0;
          for (int64_t l = 0; l < k; ++l) {
            s += static_cast<double>(ta ? a[l * m + i] : a[i * k + l]) *
                 (tb ? b[j * k + l] : b[l * n + j]);
          }
          want[i * n + j] = static_cast<float>(2.0 * s + 0.5 * c[i * n + j]);
        }
      }
      Gemm(ta, tb, m, n, k, 2.0f, a.data(), b.data(), 0.5f, c.data());
      for (int64_t i = 0; i < c.size(); ++i) EXPECT_NEAR(c[i], want[i], 1e-4) << ta << tb << i;
    }
  }
}

TEST(DenseTest, ForwardMatchesNaiveAndGradientsMatchFiniteDifferences) {
  Tensor x = Random({4, 6}, 1), w = Random({3, 6}, 2), b = Random({3}, 3), g = Random({4, 3}, 4);
  Tensor y;
  DenseForward(x, w, b, &y);
  ASSERT_EQ(y.shape(), (Shape{4, 3}));
  for (int64_t i = 0; i < 4; ++i) {
    for (int64_t j = 0; j < 3; ++j) {
      double s = b[j];
      for (int64_t l = 0; l < 6; ++l) s += static_cast<double>(x[i * 6 + l]) * w[j * 6 + l];
      EXPECT_NEAR(y[i * 3 + j], s, 1e-5);
    }
  }
  Tensor dx, dw, db;
  DenseBackward(x, w, g, &dx, &dw, &db);
  auto loss = [&] {
    Tensor out;
    DenseForward(x, w, b, &out);
    return Dot(out, g);
  };
  CheckGradient("dense dx", &x, dx, loss);
  CheckGradient("dense dw", &w, dw, loss);
  CheckGradient("dense db", &b, db, loss);
}

TEST(ReluTest, ForwardAndGradient) {
  Tensor x({6}, {-2.0f, -0.5f, 0.3f, 1.5f, -1.0f, 2.0f});
  Tensor y;
  ReluForward(x, &y);
  EXPECT_EQ(y.values(), (std::vector<float>{0, 0, 0.3f, 1.5f, 0, 2.0f}));
  Tensor g = Random({6}, 5), dx;
  ReluBackward(x, g, &dx);
  auto loss = [&] {
    Tensor out;
    ReluForward(x, &out);
    return Dot(out, g);
  };
  CheckGradient("relu dx", &x, dx, loss, 1e-3f);  // no input within eps of the kink
}

TEST(SoftmaxXentTest, LossAccuracyAndGradient) {
  Tensor logits = Random({5, 4}, 6, 3.0f);
  std::vector<int32_t> labels = {0, 3, 1, 2, 3};
  Tensor d;
  XentResult r = SoftmaxCrossEntropy(logits, labels, &d);
  double want = 0;
  int64_t correct = 0;
  for (int64_t i = 0; i < 5; ++i) {
    double z = 0;
    int64_t best = 0;
    for (int64_t j = 0; j < 4; ++j) {
      z += std::exp(static_cast<double>(logits[i * 4 + j]));
      if (logits[i * 4 + j] > logits[i * 4 + best]) best = j;
    }
    want += -std::log(std::exp(static_cast<double>(logits[i * 4 + labels[i]])) / z);
    correct += best == labels[i];
  }
  EXPECT_NEAR(r.loss, want / 5, 1e-6);
  EXPECT_EQ(r.correct, correct);
  CheckGradient(
      "xent dlogits", &logits, d, [&] { return SoftmaxCrossEntropy(logits, labels, nullptr).loss; },
      1e-2f, 1e-2);
}

TEST(SoftmaxXentTest, StableForHugeLogits) {
  Tensor logits({1, 3}, {1000.0f, 0.0f, -1000.0f});
  XentResult r = SoftmaxCrossEntropy(logits, {0}, nullptr);
  EXPECT_NEAR(r.loss, 0.0, 1e-6);
  EXPECT_TRUE(std::isfinite(SoftmaxCrossEntropy(logits, {2}, nullptr).loss));
}

class Conv2dTest : public ::testing::TestWithParam<int64_t> {};

TEST_P(Conv2dTest, ForwardMatchesDirectAndGradientsMatchFiniteDifferences) {
  const Conv2dParams p{.pad = GetParam()};
  Tensor x = Random({2, 3, 6, 5}, 7), w = Random({4, 3, 3, 3}, 8), b = Random({4}, 9);
  Tensor y;
  Conv2dWorkspace ws;
  Conv2dForward(x, w, b, p, &y, &ws);
  const Shape ys = Conv2dOutputShape(x.shape(), w.shape(), p);
  ASSERT_EQ(y.shape(), ys);
  for (int64_t n = 0; n < 2; ++n) {
    for (int64_t k = 0; k < 4; ++k) {
      for (int64_t oy = 0; oy < ys[2]; ++oy) {
        for (int64_t ox = 0; ox < ys[3]; ++ox) {
          double s = b[k];
          for (int64_t c = 0; c < 3; ++c) {
            for (int64_t r = 0; r < 3; ++r) {
              for (int64_t q = 0; q < 3; ++q) {
                int64_t iy = oy + r - p.pad, ix = ox + q - p.pad;
                if (iy < 0 || iy >= 6 || ix < 0 || ix >= 5) continue;
                s += static_cast<double>(x[((n * 3 + c) * 6 + iy) * 5 + ix]) *
                     w[((k * 3 + c) * 3 + r) * 3 + q];
              }
            }
          }
          EXPECT_NEAR(y[((n * 4 + k) * ys[2] + oy) * ys[3] + ox], s, 1e-4);
        }
      }
    }
  }
  Tensor g = Random(ys, 10), dx, dw, db;
  Conv2dBackward(x, w, g, p, &dx, &dw, &db, &ws);
  auto loss = [&] {
    Tensor out;
    Conv2dWorkspace ws2;
    Conv2dForward(x, w, b, p, &out, &ws2);
    return Dot(out, g);
  };
  CheckGradient("conv dx", &x, dx, loss);
  CheckGradient("conv dw", &w, dw, loss);
  CheckGradient("conv db", &b, db, loss);
}

INSTANTIATE_TEST_SUITE_P(Padding, Conv2dTest, ::testing::Values(0, 1));

TEST(MaxPoolTest, ForwardPicksMaximaAndBackwardRoutesToThem) {
  // One 5x4 plane: the last row does not fill a window and is dropped.
  Tensor x({1, 1, 5, 4}, {1,  2,  3,  4,   //
                          8,  7,  6,  5,   //
                          9,  1,  1,  12,  //
                          1,  10, 11, 1,   //
                          99, 99, 99, 99});
  Tensor y;
  std::vector<int32_t> argmax;
  MaxPoolForward(x, 2, &y, &argmax);
  ASSERT_EQ(y.shape(), (Shape{1, 1, 2, 2}));
  EXPECT_EQ(y.values(), (std::vector<float>{8, 6, 10, 12}));
  Tensor dy({1, 1, 2, 2}, {1, 2, 3, 4}), dx;
  MaxPoolBackward(dy, argmax, x.shape(), &dx);
  EXPECT_EQ(dx[4], 1);
  EXPECT_EQ(dx[6], 2);
  EXPECT_EQ(dx[13], 3);
  EXPECT_EQ(dx[11], 4);
  double sum = 0;
  for (float v : dx.values()) sum += v;
  EXPECT_EQ(sum, 10);
}

TEST(MaxPoolTest, GradientMatchesFiniteDifferences) {
  Tensor x = Random({2, 3, 4, 6}, 11), g = Random({2, 3, 2, 3}, 12), y, dx;
  std::vector<int32_t> argmax;
  MaxPoolForward(x, 2, &y, &argmax);
  MaxPoolBackward(g, argmax, x.shape(), &dx);
  CheckGradient(
      "maxpool dx", &x, dx,
      [&] {
        Tensor out;
        std::vector<int32_t> am;
        MaxPoolForward(x, 2, &out, &am);
        return Dot(out, g);
      },
      1e-3f);
}

}  // namespace
}  // namespace lockstep::trainer::cpu
