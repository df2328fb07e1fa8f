// The model shapes a user brings, trained through GraphModel and checked against PyTorch built
// with the same weights (model/testdata/shapes_oracle.py): a regression MLP (no loss in the
// file: a linear Dense(1) is a regression), a convolutional autoencoder whose target is its
// input, a U-Net with a class per pixel, and a two-input, two-output model compiled with a loss
// and a loss weight per output. The loss and every gradient agree within float32 rounding, and
// 60 steps of Adam bring each model's loss down.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "trainer/model/fit_data.h"
#include "trainer/model/graph_model.h"
#include "trainer/optim/optimizer.h"
#include "trainer/testing/python_peer.h"
#include "trainer/testing/temp_dir.h"

namespace lockstep::trainer {
namespace {

using nlohmann::json;

std::string ExampleModel(const std::string& name) {
  return std::string(LOCKSTEP_SOURCE_DIR) + "/examples/models/" + name + ".json";
}

json Json(const Tensor& t) { return {{"shape", t.shape()}, {"data", t.values()}}; }

// The model's data: synthetic, except the autoencoder's, whose pixels in [0, 1) are its target.
Dataset Data(GraphModel& m, const std::string& name, int64_t n, uint64_t split) {
  const std::vector<ModelInput> in = m.inputs();
  const std::vector<ModelOutput> out = m.outputs();
  SyntheticSignature sig = SyntheticFor(in, out);
  sig.noise = 0.2f;  // an easy task: the loss must fall within a few steps
  Dataset d = SyntheticDataset(n, 5, split, sig);
  DataSources src{.what = name};
  if (name == "autoencoder") {
    for (float& v : d.inputs[0].values()) v = 1.0f / (1.0f + std::exp(-v));  // into (0, 1)
    d.targets.clear();
    src.target_is_input = true;
  }
  EXPECT_TRUE(FitToModel(in, out, src, &d).ok());
  return d;
}

class ShapesOracle : public ::testing::TestWithParam<std::string> {};

TEST_P(ShapesOracle, LossAndGradientsMatchPyTorchAndTheLossFalls) {
  const std::string name = GetParam();
  auto loaded = GraphModel::Load(ExampleModel(name), 3);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  GraphModel& m = **loaded;
  const Dataset batch = Data(m, name, 6, 0);

  // One step's loss and gradients, against PyTorch from the same weights and batch.
  const StepResult r = m.TrainStep(batch);
  ASSERT_EQ(m.TakeInputError(), "");
  json c = {{"model", name}, {"weights", json::object()}};
  std::map<std::string, const Tensor*> grads;
  for (const auto& l : m.graph().layers()) {
    for (const graph::Weight& w : l->weights()) {
      if (!w.trainable) continue;
      const std::string key = l->name() + "/" + w.name;
      c["weights"][key] = Json(w.value);
      grads[key] = &w.grad;
    }
  }
  for (const Tensor& t : batch.inputs) c["inputs"].push_back(Json(t));
  for (const Tensor& t : batch.targets) c["targets"].push_back(Json(t));
  testing::TempDir dir("shapes_oracle");
  const std::string path = dir.Path("case.json");
  std::ofstream(path) << c.dump();
  absl::StatusOr<json> want =
      testing::RunPythonPeer("trainer/model/testdata/shapes_oracle.py", {path});
  if (absl::IsUnavailable(want.status())) GTEST_SKIP() << want.status();
  ASSERT_TRUE(want.ok()) << want.status();
  const double loss = (*want)["loss"].get<double>();
  EXPECT_NEAR(r.loss, loss, 1e-5 * std::max(1.0, std::abs(loss)));
  ASSERT_EQ((*want)["grads"].size(), grads.size());
  for (const auto& [key, got] : grads) {
    SCOPED_TRACE(key);
    const std::vector<float> g = (*want)["grads"][key]["data"].get<std::vector<float>>();
    ASSERT_EQ(static_cast<int64_t>(g.size()), got->size());
    float scale = 0;
    for (float v : g) scale = std::max(scale, std::abs(v));
    for (size_t i = 0; i < g.size(); ++i) {
      ASSERT_NEAR((*got)[static_cast<int64_t>(i)], g[i], 1e-4f * scale + 1e-6f) << "element " << i;
    }
  }

  // Training: 60 steps of Adam at batch 16 bring the held-out loss down: its excess over the
  // least it can be (for the autoencoder's binary cross-entropy on pixels in (0, 1), the
  // targets' own entropy; 0 for the others) falls by at least 15%.
  const Dataset train = Data(m, name, 256, 0), test = Data(m, name, 64, 1);
  auto opt = MakeOptimizer("adam", 0.01f, 0.9f);
  ASSERT_TRUE(opt.ok());
  (*opt)->Init(m.Params());
  double floor = 0;
  if (name == "autoencoder") {
    for (float y : test.targets[0].values()) {
      floor -= y * std::log(y) + (1 - y) * std::log(1 - y);
    }
    floor /= static_cast<double>(test.targets[0].size());
  }
  const double before = m.Evaluate(test).loss - floor;
  for (int step = 0; step < 60; ++step) {
    m.TrainStep(Rows(train, (step * 16) % 256, 16));
    (*opt)->Step(m.Params(), m.Grads());
  }
  const double after = m.Evaluate(test).loss - floor;
  EXPECT_LT(after, 0.85 * before) << "before " << before;
}

INSTANTIATE_TEST_SUITE_P(Models, ShapesOracle,
                         ::testing::Values("regression", "autoencoder", "unet", "two_tower"));

}  // namespace
}  // namespace lockstep::trainer
