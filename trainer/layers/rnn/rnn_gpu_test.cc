// the recurrent layers's CUDA ops against the CPU layers on fresh random inputs, for each storage
// dtype, by the relative error ||gpu - cpu|| / ||cpu|| (op_test_util.h). Outputs are poisoned (NaN)
// before each op so an unwritten element fails. Every test skips itself where no GPU is
// visible (ctest label gpu).
#include <gtest/gtest.h>

#include "trainer/kernels/cuda/gpu_available.h"

#ifndef LOCKSTEP_HAVE_CUDA

TEST(RnnCudaOps, SkippedWithoutCuda) {
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

TEST_F(GraphCudaOpsTest, RecurrentLayersMatchTheCpuLayer) {
  struct Case {
    RnnCell cell;
    bool reset_after, sequences, backwards;
    Act act, recurrent;
  };
  const std::vector<Case> cases = {
      {RnnCell::kSimpleRnn, true, true, false, Act::kTanh, Act::kSigmoid},
      {RnnCell::kSimpleRnn, true, false, true, Act::kRelu, Act::kSigmoid},
      {RnnCell::kLstm, true, false, false, Act::kTanh, Act::kSigmoid},
      {RnnCell::kLstm, true, true, true, Act::kTanh, Act::kHardSigmoid2},
      {RnnCell::kGru, true, true, false, Act::kTanh, Act::kSigmoid},
      {RnnCell::kGru, true, false, true, Act::kTanh, Act::kHardSigmoid3},
      {RnnCell::kGru, false, true, true, Act::kTanh, Act::kSigmoid},
      {RnnCell::kGru, false, false, false, Act::kTanh, Act::kHardSigmoid2},
  };
  const int64_t b = 5, t = 7, d = 6, u = 9;
  // A padding mask: rows of 7, 4, 1 and 0 real steps (then padding), and one with gaps.
  const Tensor mask({b, t}, {1, 1, 1, 1, 1, 1, 1,  //
                             1, 1, 1, 1, 0, 0, 0,  //
                             1, 0, 0, 0, 0, 0, 0,  //
                             0, 0, 0, 0, 0, 0, 0,  //
                             0, 1, 1, 0, 1, 0, 1});
  for (const Case& c : cases) {
    for (int variant = 0; variant < 4; ++variant) {
      // 0: no mask; 1: masked, masked steps repeat the last output; 2: they output zeros;
      // 3: masked, with initial states in and the final states out (return_state).
      const bool masked = variant > 0, states = variant == 3;
      const DType dt = variant == 1 ? DType::kBF16 : DType::kF32;
      const std::string what =
          std::string(graph::RnnClassName(c.cell)) + (c.reset_after ? "" : " reset_before") +
          (c.sequences ? " sequences" : " last") + (c.backwards ? " backwards " : " ") +
          DTypeName(dt) + (masked ? variant == 2 ? " masked, zeros" : " masked" : "") +
          (states ? ", states" : "");
      graph::RnnOptions o;
      o.zero_output_for_mask = variant == 2;
      o.return_state = states;
      o.units = u;
      o.activation = {c.act, 0};
      o.recurrent_activation = {c.recurrent, 0};
      o.return_sequences = c.sequences;
      o.go_backwards = c.backwards;
      o.reset_after = c.reset_after;
      o.bias_initializer.kind = graph::Initializer::Kind::kRandomUniform;
      auto layer = graph::MakeRnn("rnn", c.cell, o);
      const size_t n_states = !states ? 0 : c.cell == RnnCell::kLstm ? 2 : 1;
      std::vector<Shape> in_shapes{Shape{t, d}};
      for (size_t k = 0; k < n_states; ++k) in_shapes.push_back(Shape{u});
      std::mt19937_64 brng(1);
      ASSERT_TRUE(layer->Build(in_shapes, graph::BuildContext{&brng}).ok()) << what;
      const Tensor x = Rounded(ctx_.get(), Random({b, t, d}, -1.0f, 1.0f), dt);
      const Shape ys = c.sequences ? Shape{b, t, u} : Shape{b, u};
      const Tensor dy = Rounded(ctx_.get(), Random(ys, -1.0f, 1.0f), dt);
      // Initial states and the final states' gradients.
      std::vector<Tensor> s0, ds;
      for (size_t k = 0; k < n_states; ++k) {
        s0.push_back(Rounded(ctx_.get(), Random({b, u}, -1.0f, 1.0f), dt));
        ds.push_back(Rounded(ctx_.get(), Random({b, u}, -1.0f, 1.0f), dt));
      }
      // The CPU layer.
      std::mt19937_64 rng(3);
      graph::Args args{{&x}, {masked ? &mask : nullptr}};
      std::vector<const Tensor*> douts{&dy};
      for (size_t k = 0; k < n_states; ++k) {
        args.x.push_back(&s0[k]);
        args.mask.push_back(nullptr);
        douts.push_back(&ds[k]);
      }
      std::vector<Tensor> out(1 + n_states), din(args.x.size());
      graph::Saved saved;
      layer->Forward(args, &out, &saved, graph::CallContext{true, &rng});
      for (graph::Weight& wt : layer->weights()) wt.grad.Fill(0.0f);
      layer->Backward(args, out, douts, std::vector<bool>(args.x.size(), true), &din, &saved);
      // The GPU.
      const bool bias = layer->weights().size() > 2;
      std::vector<DeviceTensor> w(layer->weights().size()), g(layer->weights().size());
      for (size_t k = 0; k < w.size(); ++k) {
        ASSERT_OK(Upload(ctx_.get(), layer->weights()[k].value, DType::kF32, &w[k]));
        ASSERT_OK(g[k].Resize(ctx_.get(), layer->weights()[k].value.shape(), DType::kF32));
        Poison(&g[k]);
      }
      DeviceTensor dx_in, ddy, dmask, y, dx;
      std::vector<DeviceTensor> ds0(2), dds(2), fin(2), dinit(2);
      ASSERT_OK(Upload(ctx_.get(), x, dt, &dx_in));
      ASSERT_OK(Upload(ctx_.get(), dy, dt, &ddy));
      ASSERT_OK(Upload(ctx_.get(), mask, DType::kF32, &dmask));
      for (size_t k = 0; k < n_states; ++k) {
        ASSERT_OK(Upload(ctx_.get(), s0[k], dt, &ds0[k]));
        ASSERT_OK(Upload(ctx_.get(), ds[k], dt, &dds[k]));
      }
      auto state = [&](std::vector<DeviceTensor>& v, size_t k) {
        return k < n_states ? &v[k] : nullptr;
      };
      Recurrent rnn(ctx_.get(), {.cell = c.cell,
                                 .units = u,
                                 .activation = o.activation,
                                 .recurrent_activation = o.recurrent_activation,
                                 .return_sequences = c.sequences,
                                 .go_backwards = c.backwards,
                                 .reset_after = c.reset_after,
                                 .zero_output_for_mask = o.zero_output_for_mask});
      ASSERT_OK(rnn.Forward(dx_in, masked ? &dmask : nullptr, {state(ds0, 0), state(ds0, 1)},
                            w[0].as<float>(), w[1].as<float>(), bias ? w[2].as<float>() : nullptr,
                            &y));
      ASSERT_OK(rnn.FinalStates(state(fin, 0), state(fin, 1)));
      ASSERT_OK(rnn.Backward(&ddy, {state(dds, 0), state(dds, 1)}, w[0].as<float>(),
                             w[1].as<float>(), &dx, {state(dinit, 0), state(dinit, 1)},
                             g[0].as<float>(), g[1].as<float>(),
                             bias ? g[2].as<float>() : nullptr));
      const double tol = dt == DType::kF32 ? 1e-4 : Tolerance(dt);
      EXPECT_EQ(y.shape(), ys) << what;
      EXPECT_LT(DeviceError(ctx_.get(), y, out[0]), tol) << what << " y";
      EXPECT_LT(DeviceError(ctx_.get(), dx, din[0]), tol) << what << " dx";
      for (size_t k = 0; k < n_states; ++k) {
        EXPECT_LT(DeviceError(ctx_.get(), fin[k], out[1 + k]), tol) << what << " final state " << k;
        EXPECT_LT(DeviceError(ctx_.get(), dinit[k], din[1 + k]), tol)
            << what << " initial state " << k << "'s gradient";
      }
      for (size_t k = 0; k < g.size(); ++k) {
        EXPECT_LT(DeviceError(ctx_.get(), g[k], layer->weights()[k].grad), tol)
            << what << " " << layer->weights()[k].name;
      }
    }
  }
}

// MultiHeadAttention against the CPU layer: self-attention (the value is the key, its gradient
// summing both uses) and a separate key, causal or not, over one and two attention axes;
// output, every input gradient and every weight gradient (dropout off: the draws differ).

}  // namespace
}  // namespace lockstep::trainer::cuda

#endif  // LOCKSTEP_HAVE_CUDA
