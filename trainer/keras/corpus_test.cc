// The compatibility corpus: thirty model configs that Keras wrote, copied from public
// repositories (../shared/testdata/keras-configs, see its README). Every file loads, or is
// refused naming the layer that holds Python code or a user-defined class; every loaded model
// trains 20 steps as the trainer trains it (its outputs' losses from the file or inferred,
// synthetic data of its signature) with a finite loss, and its
// gradients match finite differences on a small batch; its weights round-trip through Keras 3's
// and Keras 2's weights files; and its ONNX export passes the onnx checker and matches the
// engine's inference under an independent evaluator (or is refused for a mask, by layer).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <random>

#include "trainer/graph/loss.h"
#include "trainer/graph/testing/gradcheck.h"
#include "trainer/keras/model_loader.h"
#include "trainer/keras/weights_file.h"
#include "trainer/model/fit_data.h"
#include "trainer/model/graph_model.h"
#include "trainer/optim/optimizer.h"
#include "trainer/tensor/random.h"
#include "trainer/testing/onnx_check.h"
#include "trainer/testing/temp_dir.h"

namespace lockstep::trainer::keras {
namespace {

namespace fs = std::filesystem;

fs::path CorpusDir() {
  return fs::path(LOCKSTEP_SOURCE_DIR) / ".." / "shared" / "testdata" / "keras-configs";
}

std::vector<std::string> CorpusFiles() {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(CorpusDir(), ec)) {
    if (e.path().extension() == ".json") out.push_back(e.path().filename().string());
  }
  std::sort(out.begin(), out.end());
  if (out.empty()) out.push_back("absent");
  return out;
}

// The files whose models cannot run here, and the layer class each refusal must name.
const std::map<std::string, std::string>& ExpectedRefusals() {
  static const auto* m = new std::map<std::string, std::string>{
      {"013-dec-nested-seq-customlayer.json", "(ClusteringLayer)"},
      {"021-inpainting-tfoplayer.json", "(TensorFlowOpLayer)"},  // its first; Lambdas follow
      {"023-srgan-generator-customlayer.json", "(PixelShuffler)"},
  };
  return *m;
}

// Synthetic inputs: token ids where an input feeds an Embedding (or a comparison), values in
// [-1, 1) elsewhere; an axis the config leaves open gets length 8.
std::vector<Tensor> Inputs(const graph::Graph& g, int64_t batch, uint64_t seed) {
  std::vector<Tensor> out;
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i < g.num_inputs(); ++i) {
    Shape s{batch};
    for (int64_t d : g.shape(g.inputs()[i])) s.push_back(d > 0 ? d : 8);
    int64_t vocab = 0;
    for (const graph::Layer* l : g.Consumers(g.inputs()[i])) {
      if (l->class_name() == "Embedding") vocab = l->weights()[0].value.dim(0);
      if (vocab == 0 && l->class_name() == "NotEqual") vocab = 2;
    }
    Tensor t(s);
    if (vocab > 0) {
      std::uniform_int_distribution<int64_t> d(0, std::min<int64_t>(vocab, 40) - 1);
      for (float& v : t.values()) v = static_cast<float>(d(rng));
    } else {
      UniformDraw<float> d(-1, 1);
      for (float& v : t.values()) v = d(rng);
    }
    out.push_back(std::move(t));
  }
  return out;
}

class CorpusTest : public ::testing::TestWithParam<std::string> {};

TEST_P(CorpusTest, LoadsOrIsRefusedByNameAndTrains) {
  if (GetParam() == "absent") {
    GTEST_SKIP() << "no Keras config corpus at " << CorpusDir() << " (it lives in ../shared)";
  }
  const std::string path = (CorpusDir() / GetParam()).string();
  // An axis the file leaves open is 8 long.
  absl::StatusOr<KerasModel> m = LoadKerasModelFile(path, {.open_axis_size = 8});
  auto refusal = ExpectedRefusals().find(GetParam());
  if (refusal != ExpectedRefusals().end()) {
    ASSERT_FALSE(m.ok()) << GetParam() << " should be refused";
    EXPECT_NE(m.status().message().find(refusal->second), std::string::npos) << m.status();
    EXPECT_NE(m.status().message().find("layer '"), std::string::npos) << m.status();
    return;
  }
  ASSERT_TRUE(m.ok()) << m.status().message();
  ASSERT_GT(m->graph->NumParams(), 0);

  // Through the trainer's path: the loss each output gets (the file's, or inferred), synthetic
  // data of the model's signature fitted to it, 20 steps of the trainer's
  // default optimizer (Adam, learning rate 0.001) at batch 2 (6 steps at batch 1 for large
  // images, to keep the suite short: the 224x224 models cost a minute otherwise); the loss
  // stays finite.
  absl::StatusOr<std::unique_ptr<GraphModel>> model = GraphModel::FromKeras(std::move(*m), 1);
  ASSERT_TRUE(model.ok()) << model.status();
  const bool large = NumElements((*model)->example_shape()) > 50000;
  const int64_t batch = large ? 1 : 2;
  const int steps = large ? 6 : 20;
  GraphModel& gm = **model;
  Dataset data = SyntheticDataset(batch * steps, 1, 0, SyntheticFor(gm.inputs(), gm.outputs()));
  ASSERT_TRUE(FitToModel(gm.inputs(), gm.outputs(), {.what = GetParam()}, &data).ok());
  absl::StatusOr<std::unique_ptr<Optimizer>> adam = MakeOptimizer("adam", 0.001f, 0.9f);
  ASSERT_TRUE(adam.ok());
  (*adam)->Init(gm.Params());
  for (int step = 0; step < steps; ++step) {
    const StepResult r = gm.TrainStep(Rows(data, step * batch, batch));
    ASSERT_EQ(gm.TakeInputError(), "") << "step " << step;
    ASSERT_TRUE(std::isfinite(r.loss)) << "step " << step;
    (*adam)->Step(gm.Params(), gm.Grads());
  }

  // Gradients against finite differences, in inference mode (no dropout or noise draws; batch
  // normalisation by its moving statistics) at a few coordinates of a few weights.
  graph::testing::GradCheckOptions o;
  o.training = false;
  o.samples = 2;
  o.max_tensors = 8;
  o.eps = 1e-2f;
  o.tolerance = 5e-2;
  std::vector<Tensor> small = Inputs(gm.graph(), 1, 3);
  EXPECT_EQ(graph::testing::CheckGraphGradients(gm.graph(), small, o), "");
}

TEST_P(CorpusTest, WeightsRoundTripThroughKerasFiles) {
  if (GetParam() == "absent") {
    GTEST_SKIP() << "no Keras config corpus at " << CorpusDir() << " (it lives in ../shared)";
  }
  if (ExpectedRefusals().count(GetParam())) GTEST_SKIP() << "refused at load";
  const std::string path = (CorpusDir() / GetParam()).string();
  absl::StatusOr<KerasModel> trained = LoadKerasModelFile(path, {.seed = 1});
  ASSERT_TRUE(trained.ok()) << trained.status();
  std::mt19937_64 rng(4);
  UniformDraw<float> d(-1, 1);
  std::vector<std::vector<float>> want;
  for (auto& [layer, w] : trained->graph->AllWeights()) {
    for (float& v : w->value.values()) v = w->name == "count" ? 3.0f : d(rng);
    want.push_back(w->value.values());
  }
  testing::TempDir dir("corpus_weights");
  for (const char* file : {"m.weights.h5", "m.h5"}) {
    SCOPED_TRACE(file);
    const bool keras3 = std::string(file) == "m.weights.h5";
    absl::Status w = keras3 ? WriteKeras3Weights(*trained, dir.Path(file))
                            : WriteKeras2Weights(*trained, dir.Path(file));
    ASSERT_TRUE(w.ok()) << w;
    absl::StatusOr<KerasModel> fresh = LoadKerasModelFile(path, {.seed = 2});
    ASSERT_TRUE(fresh.ok());
    absl::Status r = ReadKerasWeights(dir.Path(file), &*fresh);
    ASSERT_TRUE(r.ok()) << r;
    size_t i = 0;
    for (auto& [layer, w2] : fresh->graph->AllWeights()) {
      if (!(keras3 && w2->name == "count")) {
        EXPECT_EQ(w2->value.values(), want[i]) << w2->name;
      }
      ++i;
    }
  }
}

// The models whose ONNX export is refused, and what the refusal must name.
const std::map<std::string, std::string>& OnnxRefusals() {
  static const auto* m = new std::map<std::string, std::string>{
      {"049-k3-captioning-functional.json",
       "layer 'embedding' (Embedding) has no ONNX export: "
       "mask_zero"},
  };
  return *m;
}

TEST_P(CorpusTest, ExportsToOnnx) {
  if (GetParam() == "absent") {
    GTEST_SKIP() << "no Keras config corpus at " << CorpusDir() << " (it lives in ../shared)";
  }
  if (ExpectedRefusals().count(GetParam())) GTEST_SKIP() << "refused at load";
  absl::StatusOr<KerasModel> m = LoadKerasModelFile((CorpusDir() / GetParam()).string());
  ASSERT_TRUE(m.ok()) << m.status();
  testing::TempDir dir("corpus_onnx");
  const std::string r = testing::CheckOnnxExport(*m->graph, dir.Path("m.onnx"), 8);
  auto refusal = OnnxRefusals().find(GetParam());
  if (refusal != OnnxRefusals().end()) {
    EXPECT_NE(r.find("skip: refused: "), std::string::npos) << r;
    EXPECT_NE(r.find(refusal->second), std::string::npos) << r;
    return;
  }
  if (r.rfind("skip: ", 0) == 0 && r.find("refused") == std::string::npos) GTEST_SKIP() << r;
  EXPECT_EQ(r, "");
}

INSTANTIATE_TEST_SUITE_P(Corpus, CorpusTest, ::testing::ValuesIn(CorpusFiles()),
                         [](const ::testing::TestParamInfo<std::string>& p) {
                           std::string n = p.param.substr(0, p.param.find('.'));
                           std::replace(n.begin(), n.end(), '-', '_');
                           return "f" + n;
                         });

}  // namespace
}  // namespace lockstep::trainer::keras
