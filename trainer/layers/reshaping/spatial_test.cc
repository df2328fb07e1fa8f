// The spatial reshaping layers (spatial.cc): ZeroPadding, Cropping, UpSampling on hand-computed
// cases and against finite differences at every rank. Their Keras factories are tested beside
// the poolings' (pooling/pooling_test.cc), over the window options they share.
#include <gtest/gtest.h>

#include "trainer/graph/testing/forward.h"
#include "trainer/graph/testing/gradcheck.h"
#include "trainer/layers/reshaping/reshaping.h"

namespace lockstep::trainer::graph {
namespace {

using testing::CheckLayerGradients;
using testing::Forward1;
using testing::RandomTensor;

TEST(SpatialReshapingTest, PaddingCroppingAndUpsampling) {
  // ZeroPadding2D ((1, 0), (0, 2)) on a 1 x 2 image.
  auto zp = MakeZeroPadding("z", 2, {{1, 0}, {0, 2}});
  EXPECT_EQ(Forward1(*zp, Tensor({1, 1, 2, 1}, {1, 2})),
            Tensor({1, 2, 4, 1}, {0, 0, 0, 0, 1, 2, 0, 0}));
  auto cr = MakeCropping("c", 1, {{1, 2}});
  EXPECT_EQ(Forward1(*cr, Tensor({1, 5, 2}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10})),
            Tensor({1, 2, 2}, {3, 4, 5, 6}));
  auto up = MakeUpSampling("u", 1, {2}, Interpolation::kNearest);
  EXPECT_EQ(Forward1(*up, Tensor({1, 2, 1}, {1, 2})), Tensor({1, 4, 1}, {1, 1, 2, 2}));
  // Bilinear with half-pixel centres: sources -0.25 (clamped), 0.25, 0.75, 1.25 (clamped).
  auto bl = MakeUpSampling("u", 2, {1, 2}, Interpolation::kBilinear);
  EXPECT_EQ(Forward1(*bl, Tensor({1, 1, 2, 1}, {0, 4})), Tensor({1, 1, 4, 1}, {0, 1, 3, 4}));

  for (int rank : {1, 2, 3}) {
    Shape shape{2};
    for (int a = 0; a < rank; ++a) shape.push_back(4 - a);
    shape.push_back(2);
    AxisPairs pairs;
    for (int a = 0; a < rank; ++a) pairs.push_back({a % 2, 1});
    EXPECT_EQ(CheckLayerGradients(*MakeZeroPadding("z", rank, pairs), {RandomTensor(shape, 1)}),
              "");
    EXPECT_EQ(CheckLayerGradients(*MakeCropping("c", rank, pairs), {RandomTensor(shape, 2)}), "");
    std::vector<int64_t> size(static_cast<size_t>(rank), 2);
    size[0] = 3;
    EXPECT_EQ(CheckLayerGradients(*MakeUpSampling("u", rank, size, Interpolation::kNearest),
                                  {RandomTensor(shape, 3)}),
              "");
  }
  EXPECT_EQ(CheckLayerGradients(*MakeUpSampling("u", 2, {2, 3}, Interpolation::kBilinear),
                                {RandomTensor({2, 3, 4, 2}, 4)}),
            "");
  std::mt19937_64 rng(1);
  EXPECT_FALSE(MakeCropping("c", 1, {{2, 2}})->Build({{4, 3}}, BuildContext{&rng}).ok());
  auto open = MakeZeroPadding("z", 1, {{1, 2}})->Build({{-1, 3}}, BuildContext{&rng});
  ASSERT_TRUE(open.ok());
  EXPECT_EQ((*open)[0], Shape({-1, 3}));
}

}  // namespace
}  // namespace lockstep::trainer::graph
