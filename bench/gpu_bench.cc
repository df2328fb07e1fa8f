// The GPU benchmark (run by hand on a GPU machine: bench/gpu.sh). Prints, for the GPU it runs
// on:
//   - the measured ceilings: device-to-device copy bandwidth, and the datasheet peaks it is
//     compared with (dense tensor-core TFLOP/s, HBM bandwidth) where the model is known;
//   - GEMM TFLOP/s (8192^3 through cuBLAS) in fp32, TF32, bf16 and fp16;
//   - achieved bandwidth of the elementwise kernels (ReLU forward in fp32 and bf16, the fused
//     Adam update, the fp32-to-bf16 cast) over 2^28-element tensors;
//   - training samples/s of the GPU engine for mlp, cnn and mlp-large in float32, TF32,
//     mixed_bfloat16 and mixed_float16, and the share of each step's wall time outside the
//     span of the stream's work (host work, launches and the loss read-back between spans).
// Without a GPU it says why and exits 0. Times are medians of repeated runs after warm-up,
// taken with CUDA events (kernels) or the host clock around a synchronised step (training).
// --json=FILE also appends every figure to FILE, one JSON object a line (bench/gpu.sh's
// summary reads them beside PyTorch's, from bench/gpu_torch.py).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "trainer/kernels/cuda/gpu_available.h"

#ifndef LOCKSTEP_HAVE_CUDA
int main(int, char**) {
  std::printf("gpu_bench: %s\n", lockstep::trainer::cuda::GpuCount().why_none.c_str());
  return 0;
}
#else

#include "trainer/data/batcher.h"
#include "trainer/kernels/cuda/activation.h"
#include "trainer/kernels/cuda/check.h"
#include "trainer/kernels/cuda/device.h"
#include "trainer/kernels/cuda/elementwise.h"
#include "trainer/kernels/cuda/gemm.h"
#include "trainer/kernels/cuda/optimizer_kernels.h"
#include "trainer/strategy/engine.h"

namespace lt = lockstep::trainer;
using lt::cuda::DType;

namespace {

#define CHECK_OK(expr)                                                \
  do {                                                                \
    absl::Status s_ = (expr);                                         \
    if (!s_.ok()) {                                                   \
      std::fprintf(stderr, "gpu_bench: %s\n", s_.ToString().c_str()); \
      std::exit(1);                                                   \
    }                                                                 \
  } while (0)

struct Peak {
  double dense_tflops;  // bf16/fp16 dense tensor cores
  double hbm_gbs;
};

// Datasheet figures (SXM parts); measured ceilings are printed beside them.
Peak PeakFor(const std::string& name) {
  if (name.find("H200") != std::string::npos) return {989, 4800};
  if (name.find("H100") != std::string::npos) return {989, 3350};
  if (name.find("A100") != std::string::npos) return {312, 2039};
  return {0, 0};
}

// Median milliseconds of `reps` runs of `f` on the context's stream, timed with events.
template <typename F>
double MedianMs(lt::cuda::GpuContext* ctx, int reps, F f) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  for (int i = 0; i < 3; ++i) f();  // warm-up
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    cudaEventRecord(a, ctx->stream());
    f();
    cudaEventRecord(b, ctx->stream());
    cudaEventSynchronize(b);
    float t = 0;
    cudaEventElapsedTime(&t, a, b);
    ms.push_back(t);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

lt::cuda::DeviceTensor RandomTensor(lt::cuda::GpuContext* ctx, int64_t n, DType t) {
  lt::Tensor h({n});
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1, 1);
  for (float& v : h.values()) v = u(rng);
  lt::cuda::DeviceTensor d;
  CHECK_OK(lt::cuda::Upload(ctx, h, t, &d));
  return d;
}

// One model and precision trained for 30 steps (5 of them warm-up) on the GPU engine: the
// median wall time of a synchronised step, and the median share of it outside the span of
// the device's work.
struct TrainFigures {
  double ms = 0;
  double outside = 0;
};

absl::StatusOr<TrainFigures> TrainCase(const std::string& model, const std::string& precision,
                                       bool tf32, int batch) {
  lt::TrainerConfig c;
  c.model = model;
  c.device = lt::Device::kGpu;
  absl::StatusOr<lt::Precision> p = lt::ParsePrecision(precision);
  if (!p.ok()) return p.status();
  c.precision = *p;
  c.tf32 = tf32;
  c.optimizer = "adam";
  c.dataset = "synthetic";
  c.synthetic_size = batch * 4;
  c.batch_size = batch;
  auto data = lt::LoadDatasets(c);
  if (!data.ok()) return data.status();
  auto engine = lt::MakeEngine(c, {.gpu = true, .gpus = 1}, 0, nullptr);
  if (!engine.ok()) return engine.status();
  lt::Batcher batches(&data->train, {.global_batch = batch, .seed = 1});
  std::vector<lt::Batch> pool;
  for (int i = 0; i < 4; ++i) pool.push_back(batches.Next());
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  std::vector<double> wall, outside;
  absl::Status failed;
  for (int i = 0; i < 30 && failed.ok(); ++i) {
    const lt::Batch& bt = pool[static_cast<size_t>(i) % pool.size()];
    cudaDeviceSynchronize();
    const auto t0 = std::chrono::steady_clock::now();
    cudaEventRecord(a, cudaStreamLegacy);
    failed = (*engine)->TrainStep(bt).status();
    if (failed.ok()) failed = (*engine)->Apply(1e-3f).status();
    if (failed.ok()) failed = LOCKSTEP_GPU_STATUS(cudaDeviceSynchronize());
    cudaEventRecord(b, cudaStreamLegacy);
    cudaEventSynchronize(b);
    const auto t1 = std::chrono::steady_clock::now();
    if (i < 5) continue;  // warm-up: algorithm search, allocator growth
    const double ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
    float span = 0;
    cudaEventElapsedTime(&span, a, b);
    wall.push_back(ms);
    outside.push_back(std::max(0.0, 1.0 - span / ms));
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  if (!failed.ok()) return failed;
  std::sort(wall.begin(), wall.end());
  std::sort(outside.begin(), outside.end());
  return TrainFigures{.ms = wall[wall.size() / 2], .outside = outside[outside.size() / 2]};
}

// One JSON object a line in the --json file, when one was named (nlohmann escapes the GPU's
// name and error messages).
class JsonLines {
 public:
  explicit JsonLines(const char* path) {
    if (path != nullptr) out_.open(path, std::ios::app);
  }
  void Emit(const nlohmann::json& record) {
    if (out_.is_open()) out_ << record.dump() << "\n" << std::flush;
  }

 private:
  std::ofstream out_;
};

}  // namespace

int main(int argc, char** argv) {
  const char* json_path = nullptr;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--json=", 7) == 0) {
      json_path = argv[i] + 7;
    } else {
      std::fprintf(stderr, "usage: gpu_bench [--json=FILE]\n");
      return 2;
    }
  }
  JsonLines json(json_path);
  lt::cuda::GpuCountResult n = lt::cuda::GpuCount();
  if (n.count == 0) {
    std::printf("gpu_bench: %s\n", n.why_none.c_str());
    return 0;
  }
  auto made = lt::cuda::GpuContext::Create(0, {.tf32 = false});
  CHECK_OK(made.status());
  auto made_tf32 = lt::cuda::GpuContext::Create(0, {.tf32 = true});
  CHECK_OK(made_tf32.status());
  auto ctx = std::move(*made);
  auto ctx_tf32 = std::move(*made_tf32);
  const lt::cuda::DeviceInfo& info = ctx->info();
  const Peak peak = PeakFor(info.name);
  std::printf("GPU: %s, %d SMs, %.1f GiB, compute %d.%d\n", info.name.c_str(), info.multiprocessors,
              static_cast<double>(info.memory_bytes) / (1 << 30), info.compute_major,
              info.compute_minor);

  // Copy ceiling: 1 GiB device to device (bytes read + written).
  const size_t copy_bytes = size_t{1} << 30;
  void *src = nullptr, *dst = nullptr;
  cudaMalloc(&src, copy_bytes);
  cudaMalloc(&dst, copy_bytes);
  cudaMemset(src, 1, copy_bytes);
  const double copy_ms = MedianMs(ctx.get(), 20, [&] {
    cudaMemcpyAsync(dst, src, copy_bytes, cudaMemcpyDeviceToDevice, ctx->stream());
  });
  const double copy_gbs = 2.0 * copy_bytes / (copy_ms * 1e6);
  cudaFree(src);
  cudaFree(dst);
  std::printf(
      "peaks (datasheet): dense bf16 %.0f TFLOP/s, HBM %.0f GB/s; measured copy %.0f GB/s\n",
      peak.dense_tflops, peak.hbm_gbs, copy_gbs);
  json.Emit({{"kind", "ceiling"}, {"gpu", info.name}, {"copy_gbs", copy_gbs}});

  // GEMM.
  const int64_t g = 8192;
  std::printf("\nGEMM %ldx%ldx%ld            TFLOP/s  of dense peak\n", g, g, g);
  for (auto [label, t, tf32] :
       {std::tuple{"fp32", DType::kF32, false}, std::tuple{"tf32", DType::kF32, true},
        std::tuple{"bf16", DType::kBF16, false}, std::tuple{"fp16", DType::kF16, false}}) {
    lt::cuda::GpuContext* c = tf32 ? ctx_tf32.get() : ctx.get();
    auto a = RandomTensor(c, g * g, t), b = RandomTensor(c, g * g, t);
    lt::cuda::DeviceTensor out;
    CHECK_OK(out.Resize(c, {g, g}, DType::kF32));
    const double ms = MedianMs(c, 20, [&] {
      CHECK_OK(lt::cuda::Gemm(c, false, true, g, g, g, 1.0f, a.data(), b.data(), t, 0.0f,
                              out.data(), DType::kF32));
    });
    const double tflops = 2.0 * g * g * g / (ms * 1e9);
    std::printf("  %-24s %8.1f  %5.1f%%\n", label, tflops,
                peak.dense_tflops > 0 ? 100 * tflops / peak.dense_tflops : 0.0);
    json.Emit({{"kind", "gemm"}, {"dtype", label}, {"tflops", tflops}});
  }

  // Elementwise bandwidth.
  const int64_t e = int64_t{1} << 28;
  std::printf("\nelementwise (2^28 elements)       GB/s  of HBM peak  of copy\n");
  auto report = [&](const char* label, double ms, double bytes) {
    const double gbs = bytes / (ms * 1e6);
    std::printf("  %-30s %7.0f  %5.1f%%  %5.1f%%\n", label, gbs,
                peak.hbm_gbs > 0 ? 100 * gbs / peak.hbm_gbs : 0.0, 100 * gbs / copy_gbs);
    json.Emit({{"kind", "elementwise"}, {"op", label}, {"gbs", gbs}, {"of_copy", gbs / copy_gbs}});
  };
  for (auto [label, t] : {std::pair{"relu forward fp32", DType::kF32},
                          std::pair{"relu forward bf16", DType::kBF16}}) {
    auto x = RandomTensor(ctx.get(), e, t);
    lt::cuda::DeviceTensor y;
    CHECK_OK(y.Resize(ctx.get(), {e}, t));
    const double ms = MedianMs(ctx.get(), 20, [&] {
      CHECK_OK(lt::cuda::ActivationForward(ctx.get(), {lt::Act::kRelu, 0}, x, &y));
    });
    report(label, ms, 2.0 * static_cast<double>(e * static_cast<int64_t>(lt::cuda::DTypeSize(t))));
  }
  {
    auto x = RandomTensor(ctx.get(), e, DType::kF32);
    lt::cuda::DeviceTensor y;
    CHECK_OK(y.Resize(ctx.get(), {e}, DType::kBF16));
    const double ms = MedianMs(ctx.get(), 20, [&] {
      CHECK_OK(lt::cuda::Cast(ctx.get(), x.data(), DType::kF32, y.data(), DType::kBF16, e));
    });
    report("cast fp32 -> bf16", ms, 6.0 * static_cast<double>(e));
  }
  {
    const int64_t m = int64_t{1} << 26;
    auto p = RandomTensor(ctx.get(), m, DType::kF32), gr = RandomTensor(ctx.get(), m, DType::kF32);
    auto m1 = RandomTensor(ctx.get(), m, DType::kF32), v1 = RandomTensor(ctx.get(), m, DType::kF32);
    for (float* s : {m1.as<float>(), v1.as<float>()}) cudaMemset(s, 0, m * sizeof(float));
    lt::cuda::UpdateArgs a{.params = p.as<float>(), .grads = gr.as<float>(), .n = m};
    const double ms = MedianMs(ctx.get(), 20, [&] {
      lt::UpdateParams u;
      u.rule = lt::UpdateRule::kTorchAdam;
      u.alpha = 1e-3f;
      u.eps = 1e-7f;
      u.beta1 = 0.9f;
      u.beta2 = 0.999f;
      u.a1 = 0.1f;
      u.a2 = 0.001f;
      CHECK_OK(
          lt::cuda::ApplyUpdate(ctx.get(), u, a, m1.as<float>(), v1.as<float>(), nullptr, nullptr));
    });
    report("adam update (2^26, 28 B/elem)", ms, 28.0 * static_cast<double>(m));
  }

  // Training throughput.
  // The built-in models and example model files, all on the device graph (run from the
  // repository root, as bench/gpu.sh does).
  std::printf("\ntraining (synthetic data)   batch  samples/s   ms/step  outside stream span\n");
  for (auto [model, batch] :
       {std::pair{"mlp", 256}, std::pair{"cnn", 256}, std::pair{"mlp-large", 2048},
        std::pair{"examples/models/lstm.json", 256},
        std::pair{"examples/models/attention.json", 256}}) {
    for (auto [precision, tf32] :
         {std::pair{"float32", false}, std::pair{"float32", true},
          std::pair{"mixed_bfloat16", true}, std::pair{"mixed_float16", true}}) {
      absl::StatusOr<TrainFigures> f = TrainCase(model, precision, tf32, batch);
      if (!f.ok()) {  // reported; the other cases still run
        std::printf("  %-9s %-15s %s %5d FAILED %s\n", model, precision, tf32 ? "tf32" : "    ",
                    batch, std::string(f.status().ToString()).c_str());
        json.Emit({{"kind", "train"},
                   {"model", model},
                   {"precision", precision},
                   {"tf32", tf32},
                   {"batch", batch},
                   {"error", std::string(f.status().message())}});
        continue;
      }
      std::printf("  %-9s %-15s %s %5d %10.0f %9.3f %8.1f%%\n", model, precision,
                  tf32 ? "tf32" : "    ", batch, batch / (f->ms / 1e3), f->ms, 100 * f->outside);
      json.Emit({{"kind", "train"},
                 {"model", model},
                 {"precision", precision},
                 {"tf32", tf32},
                 {"batch", batch},
                 {"samples_per_s", batch / (f->ms / 1e3)},
                 {"ms_per_step", f->ms},
                 {"outside_stream", f->outside}});
    }
  }
  return 0;
}
#endif
