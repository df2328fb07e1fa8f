// MultiHeadAttention's CUDA ops against the CPU layers on fresh random inputs, for each storage
// dtype, by the relative error ||gpu - cpu|| / ||cpu|| (op_test_util.h). Outputs are poisoned (NaN)
// before each op so an unwritten element fails. Every test skips itself where no GPU is
// visible (ctest label gpu).
#include <gtest/gtest.h>

#include "trainer/kernels/cuda/gpu_available.h"

#ifndef LOCKSTEP_HAVE_CUDA

TEST(AttentionCudaOps, SkippedWithoutCuda) {
  GTEST_SKIP() << lockstep::trainer::cuda::GpuCount().why_none;
}

#else

#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>

#include "trainer/graph/activation.h"
#include "trainer/graph/loss.h"
#include "trainer/kernels/cuda/activation.h"
#include "trainer/kernels/cuda/device.h"
#include "trainer/kernels/cuda/dropout.h"
#include "trainer/kernels/cuda/keras_dense.h"
#include "trainer/kernels/cuda/loss.h"
#include "trainer/kernels/cuda/masking.h"
#include "trainer/kernels/cuda/merge.h"
#include "trainer/kernels/cuda/op_test_util.h"
#include "trainer/kernels/cuda/spatial.h"
#include "trainer/layers/attention/attention.h"
#include "trainer/layers/attention/attention_kernels.h"
#include "trainer/layers/convolutional/convolutional.h"
#include "trainer/layers/core/core.h"
#include "trainer/layers/gpu_op_testing.h"
#include "trainer/layers/masking/masking.h"
#include "trainer/layers/merging/merging.h"
#include "trainer/layers/normalization/normalization.h"
#include "trainer/layers/normalization/normalization_kernels.h"
#include "trainer/layers/preprocessing/preprocessing.h"
#include "trainer/layers/rnn/rnn.h"
#include "trainer/layers/rnn/rnn_kernels.h"

namespace lockstep::trainer::cuda {
namespace {

TEST_F(GraphCudaOpsTest, AttentionMatchesTheCpuLayer) {
  struct Case {
    Shape q, v;
    bool own_key, causal, masked;
  };
  const std::vector<Case> cases = {{{3, 5, 8}, {3, 5, 8}, false, false, false},
                                   {{2, 6, 8}, {2, 6, 5}, true, true, false},
                                   {{2, 3, 4, 6}, {2, 2, 5, 7}, true, false, false},
                                   {{3, 5, 8}, {3, 5, 8}, false, false, true},
                                   {{2, 6, 8}, {2, 4, 5}, true, true, true}};
  for (const Case& c : cases) {
    for (DType dt : {DType::kF32, DType::kBF16}) {
      const std::string what = ShapeString(c.q) + " " + ShapeString(c.v) +
                               (c.own_key ? " key" : "") + (c.causal ? " causal " : " ") +
                               (c.masked ? "masked " : "") + DTypeName(dt);
      graph::MultiHeadAttentionOptions o;
      o.num_heads = 3;
      o.key_dim = 4;
      o.value_dim = 2;
      o.use_causal_mask = c.causal;
      o.bias_initializer.kind = graph::Initializer::Kind::kRandomUniform;
      auto layer = graph::MakeMultiHeadAttention("mha", o);
      Shape k = c.v;
      k.back() = 3;
      std::vector<Shape> in{Shape(c.q.begin() + 1, c.q.end()), Shape(c.v.begin() + 1, c.v.end())};
      if (c.own_key) in.push_back(Shape(k.begin() + 1, k.end()));
      std::mt19937_64 brng(1);
      ASSERT_TRUE(layer->Build(in, graph::BuildContext{&brng}).ok()) << what;
      const Tensor q = Rounded(ctx_.get(), Random(c.q, -1.0f, 1.0f), dt);
      const Tensor v = Rounded(ctx_.get(), Random(c.v, -1.0f, 1.0f), dt);
      const Tensor kt = Rounded(ctx_.get(), Random(k, -1.0f, 1.0f), dt);
      const Tensor dy = Rounded(ctx_.get(), Random(c.q, -1.0f, 1.0f), dt);
      // Padding masks of the query's and the value's positions (an example's first position
      // always kept, one query row wholly masked), and the key's alike.
      auto padding = [&](int64_t n, int64_t len, uint64_t seed) {
        std::mt19937_64 mrng(seed);
        Tensor m({n, len});
        for (int64_t i = 0; i < m.size(); ++i) m[i] = i % len == 0 || mrng() % 3 != 0 ? 1.0f : 0.0f;
        return m;
      };
      const int64_t tq = q.size() / (c.q[0] * c.q.back()), tv = v.size() / (c.v[0] * c.v.back());
      Tensor qm = padding(c.q[0], tq, 5), vm = padding(c.v[0], tv, 6), km = padding(c.v[0], tv, 7);
      qm[0] = 0;  // the first query attends to nothing: uniform weights, as on the CPU
      // The CPU layer.
      std::mt19937_64 rng(3);
      graph::Args args{{&q, &v}, {nullptr, nullptr}};
      if (c.masked) args.mask = {&qm, &vm};
      if (c.own_key) {
        args.x.push_back(&kt);
        args.mask.push_back(c.masked ? &km : nullptr);
      }
      std::vector<Tensor> out(1), din(args.x.size());
      graph::Saved saved;
      layer->Forward(args, &out, &saved, graph::CallContext{true, &rng});
      for (graph::Weight& w : layer->weights()) w.grad.Fill(0.0f);
      layer->Backward(args, out, {&dy}, std::vector<bool>(args.x.size(), true), &din, &saved);
      // The GPU.
      const auto& wts = layer->weights();
      std::vector<DeviceTensor> w(wts.size()), g(wts.size());
      for (size_t i = 0; i < wts.size(); ++i) {
        ASSERT_OK(Upload(ctx_.get(), wts[i].value, DType::kF32, &w[i]));
        ASSERT_OK(g[i].Resize(ctx_.get(), wts[i].value.shape(), DType::kF32));
        Poison(&g[i]);
      }
      auto f = [&](size_t i) { return w[i].as<float>(); };
      auto gf = [&](size_t i) { return g[i].as<float>(); };
      DeviceTensor dq_in, dv_in, dk_in, ddy, y, dq, dv, dk, dqm, dvm, dkm;
      ASSERT_OK(Upload(ctx_.get(), q, dt, &dq_in));
      ASSERT_OK(Upload(ctx_.get(), v, dt, &dv_in));
      ASSERT_OK(Upload(ctx_.get(), kt, dt, &dk_in));
      ASSERT_OK(Upload(ctx_.get(), dy, dt, &ddy));
      ASSERT_OK(Upload(ctx_.get(), qm, DType::kF32, &dqm));
      ASSERT_OK(Upload(ctx_.get(), vm, DType::kF32, &dvm));
      ASSERT_OK(Upload(ctx_.get(), km, DType::kF32, &dkm));
      AttentionMasks masks;
      if (c.masked) masks = {&dqm, &dvm, c.own_key ? &dkm : nullptr};
      Attention attn(ctx_.get(), {.heads = 3, .key_dim = 4, .value_dim = 2, .causal = c.causal});
      ASSERT_OK(attn.Forward(dq_in, dv_in, c.own_key ? &dk_in : nullptr, masks,
                             {f(0), f(1), f(2), f(3), f(4), f(5), f(6), f(7)}, true, 1, &y));
      ASSERT_OK(attn.Backward(ddy, {f(0), f(1), f(2), f(3), f(4), f(5), f(6), f(7)}, &dq, &dv,
                              c.own_key ? &dk : nullptr,
                              {gf(0), gf(1), gf(2), gf(3), gf(4), gf(5), gf(6), gf(7)}));
      const double tol = dt == DType::kF32 ? 1e-4 : Tolerance(dt);
      EXPECT_LT(DeviceError(ctx_.get(), y, out[0]), tol) << what << " y";
      EXPECT_LT(DeviceError(ctx_.get(), dq, din[0]), tol) << what << " dquery";
      EXPECT_LT(DeviceError(ctx_.get(), dv, din[1]), tol) << what << " dvalue";
      if (c.own_key) {
        EXPECT_LT(DeviceError(ctx_.get(), dk, din[2]), tol) << what << " dkey";
      }
      for (size_t i = 0; i < g.size(); ++i) {
        EXPECT_LT(DeviceError(ctx_.get(), g[i], wts[i].grad), tol) << what << " " << wts[i].name;
      }
    }
  }
}

// Transposed convolutions through the convolution plans, against the CPU layers: Keras's
// output lengths and TensorFlow's padding (odd same padding included), 1D to 3D.

}  // namespace
}  // namespace lockstep::trainer::cuda

#endif  // LOCKSTEP_HAVE_CUDA
