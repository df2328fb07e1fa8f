// The shared CUDA primitives (GEMM, the optimizers' update, the elementwise kernels) against
// their CPU counterparts on fresh random inputs, for each storage dtype, by the relative error
// ||gpu - cpu|| / ||cpu||: fp32 (TF32 off) 1e-5, TF32 5e-3, fp16 5e-3, bf16 3e-2 (the 16-bit
// inputs are rounded; sums stay fp32). Outputs are poisoned (NaN) before each op so an
// unwritten element fails. The layers' kernels are checked against their CPU layers in
// graph_ops_test.cc. Every test skips itself where no GPU is visible (ctest label gpu).
#include <gtest/gtest.h>

#include "trainer/kernels/cuda/gpu_available.h"

#ifndef LOCKSTEP_HAVE_CUDA

TEST(CudaOps, SkippedWithoutCuda) { GTEST_SKIP() << lockstep::trainer::cuda::GpuCount().why_none; }

#else

#include <cmath>
#include <limits>
#include <random>

#include "trainer/kernels/cpu/gemm.h"
#include "trainer/kernels/cuda/device.h"
#include "trainer/kernels/cuda/elementwise.h"
#include "trainer/kernels/cuda/gemm.h"
#include "trainer/kernels/cuda/op_test_util.h"
#include "trainer/kernels/cuda/optimizer_kernels.h"
#include "trainer/optim/optimizer.h"

namespace lockstep::trainer::cuda {
namespace {

class CudaOpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    GpuCountResult n = GpuCount();
    if (n.count == 0) GTEST_SKIP() << n.why_none;
    absl::StatusOr<std::unique_ptr<GpuContext> > c = GpuContext::Create(0, {.tf32 = false});
    ASSERT_TRUE(c.ok()) << c.status();
    ctx_ = std::move(*c);
    absl::StatusOr<std::unique_ptr<GpuContext> > t = GpuContext::Create(0, {.tf32 = true});
    ASSERT_TRUE(t.ok()) << t.status();
    tf32_ = std::move(*t);
    rng_.seed(static_cast<uint32_t>(std::random_device{}()));
  }

  // An fp32 device copy of `t` (for fp32 parameters and gradients).
  float* F32(const Tensor& t, std::vector<DeviceTensor>* keep) {
    DeviceTensor d;
    EXPECT_TRUE(Upload(ctx_.get(), t, DType::kF32, &d).ok());
    keep->push_back(std::move(d));
    return keep->back().as<float>();
  }
  // A device fp32 buffer of n NaNs.
  float* Poisoned(int64_t n, std::vector<DeviceTensor>* keep) {
    return F32(Tensor({n}, std::numeric_limits<float>::quiet_NaN()), keep);
  }
  Tensor Host(const float* d, Shape shape) {
    Tensor out;
    EXPECT_TRUE(
        Download(ctx_.get(), DeviceTensor::View(const_cast<float*>(d), shape, DType::kF32), &out)
            .ok());
    return out;
  }
  void Poison(DeviceTensor* t) {
    ASSERT_EQ(cudaMemsetAsync(t->data(), 0xff, t->bytes(), ctx_->stream()), cudaSuccess);
  }

  std::unique_ptr<GpuContext> ctx_, tf32_;
  std::mt19937 rng_;
};

constexpr DType kDTypes[] = {DType::kF32, DType::kF16, DType::kBF16};

TEST_F(CudaOpsTest, DeviceInfoAndAllocatorReuse) {
  EXPECT_FALSE(ctx_->info().name.empty());
  EXPECT_GT(ctx_->info().multiprocessors, 0);
  CachingAllocator* a = ctx_->allocator();
  const int64_t before = a->stats().backend_allocations;
  absl::StatusOr<void*> p = a->Allocate(1 << 20);
  ASSERT_TRUE(p.ok());
  a->Free(*p);
  absl::StatusOr<void*> q = a->Allocate(1 << 20);
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(*q, *p);
  EXPECT_EQ(a->stats().backend_allocations, before + 1);
  a->Free(*q);
}

TEST_F(CudaOpsTest, GemmMatchesCpuForEveryTransposeAndDtype) {
  const int64_t m = 67, n = 45, k = 129;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      Tensor a = Random(ta ? Shape{k, m} : Shape{m, k}, &rng_);
      Tensor b = Random(tb ? Shape{n, k} : Shape{k, n}, &rng_);
      Tensor c0 = Random({m, n}, &rng_);
      Tensor want = c0;
      cpu::Gemm(ta, tb, m, n, k, 0.5f, a.data(), b.data(), 0.25f, want.data());
      for (DType t : kDTypes) {
        for (bool tf32 : {false, true}) {
          if (t != DType::kF32 && tf32) continue;
          GpuContext* ctx = tf32 ? tf32_.get() : ctx_.get();
          DeviceTensor da, db, dc;
          ASSERT_OK(Upload(ctx, a, t, &da));
          ASSERT_OK(Upload(ctx, b, t, &db));
          ASSERT_OK(Upload(ctx, c0, DType::kF32, &dc));
          ASSERT_OK(Gemm(ctx, ta, tb, m, n, k, 0.5f, da.data(), db.data(), t, 0.25f, dc.data(),
                         DType::kF32));
          Tensor got;
          ASSERT_OK(Download(ctx, dc, &got));
          EXPECT_LT(RelativeError(got, want), Tolerance(t, tf32))
              << "ta " << ta << " tb " << tb << " " << DTypeName(t) << " tf32 " << tf32;
        }
      }
    }
  }
}

TEST_F(CudaOpsTest, OptimizerKernelsMatchCpuOptimizers) {
  // Every rule of kernels/cpu/update.h, through the optimizers that choose it, with Keras's
  // clipping: two parameters (the second not a multiple of the segment alignment) in one flat
  // buffer, three steps on the CPU optimizer and on the GPU kernel side by side.
  const std::vector<std::pair<std::string, std::string> > cases = {
      {"sgd", ""},
      {"adam", ""},
      {"", R"({"class_name": "SGD", "config": {"learning_rate": 0.05, "clipvalue": 0.3}})"},
      {"", R"({"class_name": "SGD", "config": {"learning_rate": 0.05, "momentum": 0.9}})"},
      {"", R"({"class_name": "SGD", "config": {"momentum": 0.9, "nesterov": true,
                                              "global_clipnorm": 1.0}})"},
      {"", R"({"class_name": "Adam", "config": {"learning_rate": 0.01, "clipnorm": 0.5}})"},
      {"", R"({"class_name": "Adam", "config": {"amsgrad": true}})"},
      {"", R"({"class_name": "AdamW", "config": {"weight_decay": 0.1, "learning_rate": 0.01}})"},
      {"", R"({"class_name": "RMSprop", "config": {}})"},
      {"", R"({"class_name": "RMSprop", "config": {"momentum": 0.5}})"},
      {"", R"({"class_name": "RMSprop", "config": {"centered": true}})"},
      {"", R"({"class_name": "RMSprop", "config": {"centered": true, "momentum": 0.5,
                                                  "clipnorm": 0.2, "global_clipnorm": 0.3}})"},
      {"", R"({"class_name": "Adagrad", "config": {"learning_rate": 0.1}})"},
  };
  const std::vector<Shape> shapes = {{1000}, {7, 10}};
  const std::vector<int64_t> offsets = {0, 1024};
  const int64_t n = 1024 + 128;
  for (const auto& [name, keras] : cases) {
    SCOPED_TRACE(name + keras);
    auto cpu_opt = *MakeOptimizer(name, 0.01f, 0.9f, keras);
    auto gpu_opt = *MakeOptimizer(name, 0.01f, 0.9f, keras);
    std::vector<Tensor> cpu_p, steps_grads;
    for (const Shape& sh : shapes) cpu_p.push_back(Random(sh, &rng_));
    std::vector<Tensor*> cpu_pp;
    for (Tensor& t : cpu_p) cpu_pp.push_back(&t);
    cpu_opt->Init(cpu_pp);
    gpu_opt->Init(cpu_pp);

    // The flat buffers: parameters and slots at their offsets (the gaps zero).
    auto flat = [&](const std::vector<Tensor*>& ts) {
      Tensor f({n});
      for (size_t i = 0; i < ts.size(); ++i) {
        std::copy_n(ts[i]->data(), ts[i]->size(), f.data() + offsets[i]);
      }
      return f;
    };
    std::vector<DeviceTensor> keep;
    float* gp = F32(flat(cpu_pp), &keep);
    float* slots[3] = {nullptr, nullptr, nullptr};
    for (int k = 0; k < gpu_opt->SlotsPerParam(); ++k)
      slots[k] = F32(flat(gpu_opt->Slots(k)), &keep);
    absl::StatusOr<ClipScales> clip =
        ClipScales::Make(ctx_.get(), offsets, {shapes[0][0], shapes[1][0] * shapes[1][1]}, n);
    ASSERT_TRUE(clip.ok()) << clip.status();
    DeviceTensor copy;
    ASSERT_OK(copy.Resize(ctx_.get(), {n}, DType::kBF16));
    for (int step = 0; step < 3; ++step) {
      std::vector<Tensor> g;
      std::vector<Tensor*> gg;
      for (const Shape& sh : shapes) g.push_back(Random(sh, &rng_, -2.0f, 2.0f));
      for (Tensor& t : g) gg.push_back(&t);
      cpu_opt->Step(cpu_pp, gg);
      // The gradient arrives scaled by 8 (loss scale 4, two replicas summed); the factor
      // undoes it.
      Tensor scaled = flat(gg);
      for (float& v : scaled.values()) v *= 8.0f;
      float* dg = F32(scaled, &keep);
      const Optimizer::ExternalStep x = gpu_opt->BeginExternalStep();
      const bool clipping = x.clipnorm > 0 || x.global_clipnorm > 0;
      if (clipping) ASSERT_OK(clip->Compute(ctx_.get(), dg, 0.125f, x.clipnorm, x.global_clipnorm));
      ASSERT_OK(ApplyUpdate(ctx_.get(), x.u,
                            {.params = gp,
                             .grads = dg,
                             .n = n,
                             .grad_factor = 0.125f,
                             .compute_copy = copy.data(),
                             .compute_type = DType::kBF16},
                            slots[0], slots[1], slots[2], clipping ? &*clip : nullptr));
    }
    const Tensor want = flat(cpu_pp);
    EXPECT_LT(RelativeError(Host(gp, {n}), want), 1e-5);
    for (int k = 0; k < gpu_opt->SlotsPerParam(); ++k) {
      EXPECT_LT(RelativeError(Host(slots[k], {n}), flat(cpu_opt->Slots(k))), 1e-5) << "slot " << k;
    }
    Tensor hcopy;
    ASSERT_OK(Download(ctx_.get(), copy, &hcopy));
    EXPECT_LT(RelativeError(hcopy, want), 1e-2) << "the bf16 copy";
  }
}

// A NaN gradient makes the weight NaN, as on the CPU (a clip must not turn it into a number).
TEST_F(CudaOpsTest, UpdateKernelKeepsANanGradientNan) {
  std::vector<DeviceTensor> keep;
  Tensor g({4}, 0.5f);
  g[2] = std::numeric_limits<float>::quiet_NaN();
  float* p = F32(Tensor({4}, 1.0f), &keep);
  UpdateParams u;
  u.rule = UpdateRule::kKerasSgd;
  u.lr = 0.1f;
  u.clip = 0.3f;
  ASSERT_OK(ApplyUpdate(ctx_.get(), u, {.params = p, .grads = F32(g, &keep), .n = 4}, nullptr,
                        nullptr, nullptr, nullptr));
  Tensor cpu({4}, 1.0f);
  ApplyUpdate(u, cpu.data(), g.data(), nullptr, nullptr, nullptr, 4);
  const Tensor got = Host(p, {4});
  EXPECT_TRUE(std::isnan(got[2]) && std::isnan(cpu[2]));
  EXPECT_FLOAT_EQ(got[0], cpu[0]);
}

TEST_F(CudaOpsTest, AllFiniteFindsInfAndNan) {
  std::vector<DeviceTensor> keep;
  Tensor t = Random({5000}, &rng_);
  absl::StatusOr<bool> ok = AllFinite(ctx_.get(), F32(t, &keep), t.size());
  ASSERT_TRUE(ok.ok());
  EXPECT_TRUE(*ok);
  for (float bad :
       {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    Tensor u = t;
    u[4321] = bad;
    absl::StatusOr<bool> found = AllFinite(ctx_.get(), F32(u, &keep), u.size());
    ASSERT_TRUE(found.ok());
    EXPECT_FALSE(*found) << bad;
  }
}

TEST_F(CudaOpsTest, CastRoundTripsAndBiasKernelsMatchCpu) {
  Tensor x = Random({3, 5, 4}, &rng_);
  for (DType t : kDTypes) {
    DeviceTensor d;
    ASSERT_OK(Upload(ctx_.get(), x, t, &d));
    Tensor back;
    ASSERT_OK(Download(ctx_.get(), d, &back));
    EXPECT_LT(RelativeError(back, x), Tolerance(t, false)) << DTypeName(t);
  }
  // Bias over the middle axis: y[o, c, i] += b[c]; db[c] = sum over o, i.
  std::vector<DeviceTensor> keep;
  Tensor b = Random({5}, &rng_);
  DeviceTensor y;
  ASSERT_OK(Upload(ctx_.get(), x, DType::kF32, &y));
  ASSERT_OK(AddBias(ctx_.get(), &y, F32(b, &keep), 3, 5, 4));
  float* db = Poisoned(5, &keep);
  ASSERT_OK(
      BiasGrad(ctx_.get(), DeviceTensor::View(y.data(), x.shape(), DType::kF32), db, 3, 5, 4));
  Tensor hy;
  ASSERT_OK(Download(ctx_.get(), y, &hy));
  Tensor want_db({5});
  for (int64_t o = 0; o < 3; ++o) {
    for (int64_t c = 0; c < 5; ++c) {
      for (int64_t i = 0; i < 4; ++i) {
        const int64_t at = (o * 5 + c) * 4 + i;
        EXPECT_FLOAT_EQ(hy[at], x[at] + b[c]);
        want_db[c] += x[at] + b[c];
      }
    }
  }
  EXPECT_LT(RelativeError(Host(db, {5}), want_db), 1e-6);
}

}  // namespace
}  // namespace lockstep::trainer::cuda

#endif  // LOCKSTEP_HAVE_CUDA
