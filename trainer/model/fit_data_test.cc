// FitToModel: the user's sources matched to a model's inputs and outputs (by position or by
// name), shaped, and their targets checked and converted for each output's loss; and the
// synthetic data signature of any model.
#include "trainer/model/fit_data.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace lockstep::trainer {
namespace {

std::vector<ModelInput> TwoInputs() { return {{"image", {2, 2, 1}}, {"meta", {3}}}; }

std::vector<ModelOutput> Outputs(LossKind kind, Shape shape, const std::string& name = "out") {
  return {{.name = name, .shape = std::move(shape), .loss = {.kind = kind}}};
}

Tensor Iota(Shape s, float from = 0) {
  Tensor t(std::move(s));
  for (int64_t i = 0; i < t.size(); ++i) t[i] = from + static_cast<float>(i);
  return t;
}

TEST(FitToModelTest, SourcesByNameAreOrderedAsTheModelsInputsAndShaped) {
  Dataset d{.inputs = {Iota({2, 3}), Iota({2, 4}, 100)}, .targets = {Tensor({2}, {0, 2})}};
  const DataSources named{.input_names = {"meta", "image"}, .input_scale = 0.5f, .what = "w"};
  ASSERT_TRUE(
      FitToModel(TwoInputs(), Outputs(LossKind::kSparseCategoricalCrossentropy, {3}), named, &d)
          .ok());
  EXPECT_EQ(d.inputs[0].shape(), (Shape{2, 2, 2, 1}));
  EXPECT_EQ(d.inputs[0][0], 50.0f);  // scaled
  EXPECT_EQ(d.inputs[1].shape(), (Shape{2, 3}));
  EXPECT_EQ(d.targets[0], Tensor({2}, {0, 2}));

  // By position the count must match; by name every name must be the model's.
  auto refused = [](DataSources src, Dataset data, const std::string& want) {
    absl::Status s =
        FitToModel(TwoInputs(), Outputs(LossKind::kSparseCategoricalCrossentropy, {3}), src, &data);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find(want), std::string::npos) << s;
  };
  const Dataset one{.inputs = {Iota({2, 4})}, .targets = {Tensor({2}, {0, 1})}};
  refused({.what = "w"}, one, "1 input source(s); the model has 2 inputs ('image', 'meta')");
  Dataset two{.inputs = {Iota({2, 4}), Iota({2, 3})}, .targets = {Tensor({2}, {0, 1})}};
  refused({.input_names = {"image", "extra"}, .what = "w"}, two,
          "the model has no input 'extra' (its inputs: 'image', 'meta')");
  refused({.input_names = {"image", "image"}, .what = "w"}, two,
          "nothing feeds the model's input 'meta'");
  two.inputs[1] = Iota({2, 5});
  refused({.what = "w"}, two, "examples of shape [5] (5 values) for input 'meta'");
  two.inputs[1] = Iota({3, 3});
  refused({.what = "w"}, two, "input 'meta' has 3 examples; the first input has 2");
}

TEST(FitToModelTest, TargetsAreCheckedAndConvertedForTheirLoss) {
  const std::vector<ModelInput> in = {{"x", {2}}};
  auto fit = [&](LossKind kind, Shape out, Tensor target) -> absl::StatusOr<Tensor> {
    Dataset d{.inputs = {Iota({target.dim(0), 2})}, .targets = {std::move(target)}};
    absl::Status s = FitToModel(in, Outputs(kind, std::move(out)), {.what = "w"}, &d);
    if (!s.ok()) return s;
    return d.targets[0];
  };
  // Sparse: ids per output row ([N] or [N, 1]), or one-hot rows taken as their ids.
  EXPECT_EQ(*fit(LossKind::kSparseCategoricalCrossentropy, {3}, Tensor({2, 1}, {2, 0})),
            Tensor({2}, {2, 0}));
  EXPECT_EQ(*fit(LossKind::kSparseCategoricalCrossentropy, {3}, Tensor({2, 3}, {0, 0, 1, 1, 0, 0})),
            Tensor({2}, {2, 0}));
  // Per-pixel ids: a segmentation mask.
  EXPECT_EQ(fit(LossKind::kSparseCategoricalCrossentropy, {2, 2, 4}, Iota({1, 2, 2}))->shape(),
            (Shape{1, 2, 2}));
  absl::StatusOr<Tensor> bad =
      fit(LossKind::kSparseCategoricalCrossentropy, {3}, Tensor({2}, {1, 3}));
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(bad.status().message().find("example 1 has the class id 3"), std::string::npos)
      << bad.status();
  bad = fit(LossKind::kSparseCategoricalCrossentropy, {3}, Tensor({1, 3}, {0.2f, 0.3f, 0.5f}));
  EXPECT_NE(bad.status().message().find("not one-hot"), std::string::npos) << bad.status();
  bad = fit(LossKind::kSparseCategoricalCrossentropy, {3}, Tensor({1}, 1.5f));
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kDataLoss);
  // Categorical: one-hot rows, or ids expanded to them.
  EXPECT_EQ(*fit(LossKind::kCategoricalCrossentropy, {3}, Tensor({2}, {1, 2})),
            Tensor({2, 3}, {0, 1, 0, 0, 0, 1}));
  EXPECT_EQ(*fit(LossKind::kCategoricalCrossentropy, {3}, Tensor({1, 3}, {0.2f, 0.3f, 0.5f})),
            Tensor({1, 3}, {0.2f, 0.3f, 0.5f}));
  // Regression: values of the output's shape, whatever their layout.
  EXPECT_EQ(fit(LossKind::kMeanSquaredError, {2, 2}, Iota({3, 4}))->shape(), (Shape{3, 2, 2}));
  EXPECT_EQ(fit(LossKind::kMeanSquaredError, {1}, Iota({3}))->shape(), (Shape{3, 1}));
  bad = fit(LossKind::kMeanSquaredError, {2}, Iota({3}));
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find(
                "targets of shape [] per example do not fit output 'out' [2] trained with "
                "mean_squared_error (it takes [2] per example)"),
            std::string::npos)
      << bad.status();
}

TEST(FitToModelTest, TheTargetCanBeTheInput) {
  Dataset d{.inputs = {Iota({2, 4})}};
  const std::vector<ModelOutput> out = {{.name = "a", .shape = {2, 2}, .loss = {}},
                                        {.name = "b", .shape = {4}, .loss = {}}};
  std::vector<ModelOutput> mse = out;
  for (ModelOutput& o : mse) o.loss.kind = LossKind::kMeanSquaredError;
  ASSERT_TRUE(FitToModel({{"x", {4}}}, mse, {.target_is_input = true, .what = "w"}, &d).ok());
  EXPECT_EQ(d.targets[0].shape(), (Shape{2, 2, 2}));
  EXPECT_EQ(d.targets[1], d.inputs[0]);
  Dataset two{.inputs = {Iota({2, 4}), Iota({2, 3})}};
  EXPECT_NE(FitToModel(TwoInputs(), mse, {.target_is_input = true, .what = "w"}, &two)
                .message()
                .find("needs a one-input model"),
            std::string::npos);
}

TEST(SyntheticForTest, EveryInputAndTargetTakesItsFormAndTheTaskIsReproducible) {
  const std::vector<ModelInput> in = {{"image", {4, 4, 1}}, {"tokens", {6}, 50}};
  const std::vector<ModelOutput> out = {
      {.name = "label", .shape = {5}, .loss = {.kind = LossKind::kSparseCategoricalCrossentropy}},
      {.name = "onehot", .shape = {3}, .loss = {.kind = LossKind::kCategoricalCrossentropy}},
      {.name = "mask",
       .shape = {4, 4, 2},
       .loss = {.kind = LossKind::kSparseCategoricalCrossentropy}},
      {.name = "flags", .shape = {3}, .loss = {.kind = LossKind::kBinaryCrossentropy}},
      {.name = "value", .shape = {2, 3}, .loss = {.kind = LossKind::kMeanSquaredError}}};
  const SyntheticSignature sig = SyntheticFor(in, out);
  EXPECT_EQ(sig.classes, 5);  // the first one-class-per-example output's
  const Dataset d = SyntheticDataset(64, 7, 0, sig);
  ASSERT_EQ(d.inputs.size(), 2u);
  ASSERT_EQ(d.targets.size(), 5u);
  EXPECT_EQ(d.inputs[0].shape(), (Shape{64, 4, 4, 1}));
  EXPECT_EQ(d.targets[0].shape(), (Shape{64}));
  EXPECT_EQ(d.targets[1].shape(), (Shape{64, 3}));
  EXPECT_EQ(d.targets[2].shape(), (Shape{64, 4, 4}));
  EXPECT_EQ(d.targets[4].shape(), (Shape{64, 2, 3}));
  for (float v : d.inputs[1].values()) EXPECT_TRUE(v >= 0 && v < 50 && v == std::floor(v));
  for (float v : d.targets[2].values()) EXPECT_TRUE(v == 0 || v == 1) << v;
  for (float v : d.targets[3].values()) EXPECT_TRUE(v == 0 || v == 1) << v;
  for (int64_t i = 0; i < 64; ++i) {
    float row = 0;
    for (int j = 0; j < 3; ++j) row += d.targets[1][i * 3 + j];
    EXPECT_EQ(row, 1.0f);
  }
  // Every target is its example's class's: examples of one class share their targets.
  for (int64_t i = 0; i < 64; ++i) {
    for (int64_t j = 0; j < i; ++j) {
      if (d.targets[0][i] != d.targets[0][j]) continue;
      for (int64_t k = 0; k < 6; ++k) EXPECT_EQ(d.targets[4][i * 6 + k], d.targets[4][j * 6 + k]);
    }
  }
  // And the whole set fits the model it was made for.
  Dataset fitted = d;
  EXPECT_TRUE(FitToModel(in, out, {.what = "synthetic"}, &fitted).ok());
  EXPECT_EQ(SyntheticDataset(64, 7, 0, sig).targets, d.targets);      // reproducible
  EXPECT_NE(SyntheticDataset(64, 7, 1, sig).inputs[0], d.inputs[0]);  // another split's examples
  // A one-input, one-class set is what SyntheticDataset always made.
  const Dataset classic = SyntheticDataset(32, 3, 0, {1, 28, 28}, 10);
  const Dataset general = SyntheticDataset(
      32, 3, 0, SyntheticFor({{"x", {1, 28, 28}}}, {{.name = "y", .shape = {10}, .loss = {}}}));
  EXPECT_EQ(classic.inputs, general.inputs);
  EXPECT_EQ(classic.targets, general.targets);
}

// Keras's sample_weight: each example's losses scaled by its weight, then the mean over every
// element (sum_over_batch_size), so the batch's loss is the weighted sum of the examples' own
// losses over the batch size, and so is each example's gradient.
TEST(SampleWeightTest, EachExamplesLossAndGradientAreScaledByItsWeight) {
  std::mt19937_64 rng(4);
  std::uniform_real_distribution<float> u(0.05f, 0.95f);
  const Tensor w({3}, {0.5f, 0.0f, 2.0f});
  struct Case {
    Loss loss;
    Shape pred, target;
  };
  const std::vector<Case> cases = {
      {{.kind = LossKind::kSparseCategoricalCrossentropy}, {3, 2, 4}, {3, 2}},
      {{.kind = LossKind::kSparseCategoricalCrossentropy, .from_logits = true}, {3, 4}, {3}},
      {{.kind = LossKind::kCategoricalCrossentropy}, {3, 2, 4}, {3, 2, 4}},
      {{.kind = LossKind::kBinaryCrossentropy}, {3, 5}, {3, 5}},
      {{.kind = LossKind::kMeanSquaredError}, {3, 2, 2}, {3, 2, 2}},
      {{.kind = LossKind::kHuber}, {3, 2}, {3, 2}}};
  for (const Case& c : cases) {
    SCOPED_TRACE(graph::LossName(c.loss) + ShapeString(c.pred));
    Tensor pred(c.pred), target(c.target);
    for (float& v : pred.values()) v = u(rng);
    const bool ids = c.loss.kind == LossKind::kSparseCategoricalCrossentropy;
    for (float& v : target.values()) v = ids ? std::floor(u(rng) * 4) : std::round(u(rng));
    Tensor d;
    absl::StatusOr<double> weighted = graph::ComputeLoss(c.loss, pred, target, &d, &w);
    ASSERT_TRUE(weighted.ok()) << weighted.status();
    double want = 0;
    for (int64_t i = 0; i < 3; ++i) {
      const Dataset one = Rows({.inputs = {pred}, .targets = {target}}, i, 1);
      Tensor di;
      absl::StatusOr<double> alone = graph::ComputeLoss(c.loss, one.inputs[0], one.targets[0], &di);
      ASSERT_TRUE(alone.ok()) << alone.status();
      want += w[i] * *alone / 3;
      for (int64_t j = 0; j < di.size(); ++j) {
        EXPECT_NEAR(d[i * di.size() + j], w[i] * di[j] / 3, 1e-6) << "example " << i;
      }
    }
    EXPECT_NEAR(*weighted, want, 1e-6);
  }
  const Tensor wrong({2}, {1, 1});
  EXPECT_FALSE(graph::ComputeLoss({}, Tensor({3, 4}), Tensor({3}), nullptr, &wrong).ok());
}

TEST(SampleWeightTest, WeightsAreOnePerExampleFiniteAndNotNegative) {
  const std::vector<ModelInput> in = {{"x", {2}}};
  const std::vector<ModelOutput> out = {
      {.name = "y", .shape = {1}, .loss = {.kind = LossKind::kMeanSquaredError}}};
  Dataset d{.inputs = {Iota({3, 2})}, .targets = {Iota({3})}, .sample_weights = Tensor({3, 1})};
  EXPECT_TRUE(FitToModel(in, out, {.what = "w"}, &d).ok());
  EXPECT_EQ(d.sample_weights.shape(), Shape({3}));
  d.sample_weights = Tensor({3}, {1, -1, 1});
  absl::Status s = FitToModel(in, out, {.what = "w"}, &d);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("example 1 has the sample weight -1"), std::string::npos) << s;
  d.sample_weights = Tensor({2}, {1, 1});
  EXPECT_NE(FitToModel(in, out, {.what = "w"}, &d).message().find("2 sample weights for 3"),
            std::string::npos);
}

}  // namespace
}  // namespace lockstep::trainer
