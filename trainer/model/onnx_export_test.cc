// The ONNX export: each file passes the onnx checker and strict shape inference, and evaluated
// by an independent evaluator of ONNX's operators (trainer/model/testdata/onnx_peer.py, on
// PyTorch's functions; ONNX Runtime too where installed) gives the engine's own inference
// output within float32 rounding. Models that need masks are refused by name.
#include "trainer/model/onnx_export.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <random>

#include "trainer/keras/model_loader.h"
#include "trainer/testing/onnx_check.h"
#include "trainer/testing/source_dir.h"
#include "trainer/testing/temp_dir.h"

namespace lockstep::trainer {
namespace {

using ::lockstep::trainer::testing::SourcePath;

class OnnxExportTest : public ::testing::TestWithParam<std::string> {};

TEST_P(OnnxExportTest, MatchesTheEngineUnderAnIndependentEvaluator) {
  absl::StatusOr<keras::KerasModel> m =
      keras::LoadKerasModelFile(SourcePath(GetParam()), {.seed = 3});
  ASSERT_TRUE(m.ok()) << m.status();
  testing::TempDir dir("onnx_export_test");
  const std::string result = testing::CheckOnnxExport(*m->graph, dir.Path("model.onnx"), 5);
  if (result.rfind("skip: ", 0) == 0) GTEST_SKIP() << result;
  EXPECT_EQ(result, "");
}

INSTANTIATE_TEST_SUITE_P(Models, OnnxExportTest,
                         ::testing::Values("examples/models/mlp.json", "examples/models/cnn.json",
                                           "examples/models/lstm.json",
                                           "examples/models/attention.json",
                                           "trainer/model/testdata/recurrent.json",
                                           "trainer/model/testdata/every_gpu_op.json",
                                           "trainer/model/testdata/states.json"),
                         [](const ::testing::TestParamInfo<std::string>& p) {
                           std::string n = p.param.substr(p.param.rfind('/') + 1);
                           n = n.substr(0, n.find('.'));
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

TEST(OnnxExportRefusalTest, MasksAreRefusedByLayer) {
  absl::StatusOr<keras::KerasModel> m =
      keras::LoadKerasModelFile(SourcePath("trainer/model/testdata/masked.json"), {.seed = 1});
  ASSERT_TRUE(m.ok()) << m.status();
  testing::TempDir dir("onnx_export_test");
  absl::Status s = WriteOnnx(*m->graph, "masked", dir.Path("m.onnx"));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(s.message().find("layer '"), std::string::npos) << s;
  EXPECT_NE(s.message().find("mask"), std::string::npos) << s;
}

}  // namespace
}  // namespace lockstep::trainer
