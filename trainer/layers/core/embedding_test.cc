// Embedding: lookups, masks and ids that are not ids.
#include <gtest/gtest.h>

#include "trainer/graph/testing/forward.h"
#include "trainer/layers/core/core.h"

namespace lockstep::trainer::graph {
namespace {

using testing::LayerCall;
using testing::RunLayer;
using testing::Values;
using testing::WeightNames;

TEST(EmbeddingTest, LooksUpRowsMasksZerosAndReportsBadIds) {
  EmbeddingOptions o;
  o.input_dim = 10;
  o.output_dim = 2;
  o.mask_zero = true;
  auto e = MakeEmbedding("emb", o);
  std::mt19937_64 rng(1);
  ASSERT_TRUE(e->Build({{3}}, BuildContext{&rng}).ok());
  ASSERT_EQ(WeightNames(*e), std::vector<std::string>{"embeddings"});
  Tensor table({10, 2});
  for (int64_t i = 0; i < 20; ++i) table[i] = static_cast<float>(i);
  e->weights()[0].value = table;
  Tensor ids({2, 3}, {1, 0, 9, 3, 3, 0});
  LayerCall c = RunLayer(*e, {ids});
  EXPECT_EQ(Values(c.out[0]), (std::vector<float>{2, 3, 0, 1, 18, 19, 6, 7, 6, 7, 0, 1}));
  EXPECT_EQ(c.error, "");
  Args a{{&ids}, {nullptr}};
  const Tensor* m = e->OutputMask(a, c.saved);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(*m, Tensor({2, 3}, {1, 0, 1, 1, 1, 0}));
  EXPECT_FALSE(e->Differentiable(0));
  // An id out of range or not an integer reads zeros, and the first is reported.
  Tensor bad({2, 3}, {1, 12, 2, 2.5f, -1, 3});
  c = RunLayer(*e, {bad});
  EXPECT_EQ(c.error, "layer 'emb' (Embedding): id 12.0 at position [0, 1] is outside [0, 10)");
  EXPECT_EQ(Values(c.out[0]), (std::vector<float>{2, 3, 0, 0, 4, 5, 0, 0, 0, 0, 6, 7}));
  Tensor frac({1, 3}, {2.5f, 1, 1});
  EXPECT_EQ(RunLayer(*e, {frac}).error,
            "layer 'emb' (Embedding): id 2.5 at position [0, 0] is not an integer in [0, 10)");
  // Gradients go to the looked-up rows only (repeats add).
  Tensor ids2({1, 3}, {4, 4, 7});
  c = RunLayer(*e, {ids2});
  e->weights()[0].grad.Fill(0.0f);
  Tensor dy({1, 3, 2}, {1, 2, 3, 4, 5, 6});
  std::vector<Tensor> din(1);
  e->Backward(Args{{&ids2}, {nullptr}}, c.out, {&dy}, {false}, &din, &c.saved);
  const Tensor& g = e->weights()[0].grad;
  EXPECT_EQ(g[8], 4);
  EXPECT_EQ(g[9], 6);
  EXPECT_EQ(g[14], 5);
  EXPECT_EQ(g[15], 6);
  EXPECT_EQ(g[0], 0);
  // Without mask_zero there is no output mask; input_length is checked.
  EmbeddingOptions plain = o;
  plain.mask_zero = false;
  plain.input_length = {4};
  auto p = MakeEmbedding("emb", plain);
  EXPECT_FALSE(p->Build({{3}}, BuildContext{&rng}).ok());
  ASSERT_TRUE(p->Build({{-1}}, BuildContext{&rng}).ok());
  Tensor ids4({1, 4}, {1, 0, 2, 0});
  EXPECT_EQ(p->OutputMask(Args{{&ids4}, {nullptr}}, RunLayer(*p, {ids4}).saved), nullptr);
}

// --- Wrappers --------------------------------------------------------------------------------

}  // namespace
}  // namespace lockstep::trainer::graph
