// keras_models_bench: the training throughput of a Keras model file on the CPU, one step as
// lockstep-trainer takes it (GraphModel::TrainStep, then the trainer's SGD with momentum 0.9,
// lr 0.01) on batches of 64 gathered from a shuffled in-memory dataset, but on data it makes
// itself: integer token ids in [0, input_dim) when the input feeds an Embedding (the trainer's
// synthetic dataset has floats, which an Embedding refuses), normal floats otherwise, and
// uniform class labels. Prints two figures after the warm-up steps: samples/s by the wall
// clock, and per second of the process's CPU time (run by bench/keras_vs_torch.sh).
//
// --profile also prints where one step's time goes: the forward and backward pass and the
// optimizer step, each the median of the measured steps in wall time and in this thread's CPU
// time (which a busy machine's other processes do not inflate).
//
// Usage: keras_models_bench MODEL.json [--threads=1] [--steps=120] [--warmup=20]
//        [--examples=2048] [--batch=64] [--profile]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "trainer/kernels/cpu/threads.h"
#include "trainer/layers/convolutional/convolutional.h"
#include "trainer/model/graph_model.h"
#include "trainer/optim/optimizer.h"

namespace {

using lockstep::trainer::GraphModel;
using lockstep::trainer::Shape;
using lockstep::trainer::Tensor;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

int64_t Flag(int argc, char** argv, const char* name, int64_t def) {
  const std::string prefix = std::string("--") + name + "=";
  for (int i = 2; i < argc; ++i) {
    if (std::strncmp(argv[i], prefix.c_str(), prefix.size()) == 0) {
      return std::atoll(argv[i] + prefix.size());
    }
  }
  return def;
}

bool Has(int argc, char** argv, const char* flag) {
  for (int i = 2; i < argc; ++i) {
    if (std::strcmp(argv[i], flag) == 0) return true;
  }
  return false;
}

double ThreadCpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

double ProcessCpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argv[1][0] == '-') {
    std::fprintf(
        stderr,
        "usage: keras_models_bench MODEL.json [--threads=1] [--steps=120] "
        "[--warmup=20] [--examples=2048] [--batch=64] [--profile] [--conv=onednn|loops]\n");
    return 2;
  }
  const int64_t threads = Flag(argc, argv, "threads", 1);
  const int64_t steps = Flag(argc, argv, "steps", 120);
  const int64_t warmup = Flag(argc, argv, "warmup", 20);
  const int64_t examples = Flag(argc, argv, "examples", 2048);
  const int64_t batch = Flag(argc, argv, "batch", 64);
  const bool profile = Has(argc, argv, "--profile");
  if (steps <= warmup || examples < batch) {
    std::fprintf(stderr, "--steps must exceed --warmup and --examples must be >= --batch\n");
    return 2;
  }
  lockstep::trainer::cpu::SetCpuThreads(static_cast<int>(threads));
  if (Has(argc, argv, "--conv=loops")) {
    lockstep::trainer::graph::SetConvBackend(lockstep::trainer::graph::ConvBackend::kLoops);
  }
  auto loaded = GraphModel::Load(argv[1], 1);
  if (!loaded.ok()) {
    std::fprintf(stderr, "%s\n", std::string(loaded.status().message()).c_str());
    return 2;
  }
  GraphModel& model = **loaded;
  auto opt = lockstep::trainer::MakeOptimizer("sgd", 0.01f, 0.9f);
  if (!opt.ok()) return 2;

  // The dataset: ids for an Embedding input, else standard normal floats; uniform labels.
  auto& g = model.graph();
  int64_t vocab = 0;
  for (const auto* l : g.Consumers(g.inputs()[0])) {
    if (l->class_name() == "Embedding") vocab = l->weights()[0].value.dim(0);
  }
  const Shape example = model.example_shape();
  const int64_t size = lockstep::trainer::NumElements(example);
  std::mt19937_64 rng(1);
  std::vector<float> data(static_cast<size_t>(examples * size));
  if (vocab > 0) {
    std::uniform_int_distribution<int64_t> id(0, vocab - 1);
    for (float& v : data) v = static_cast<float>(id(rng));
  } else {
    std::normal_distribution<float> normal;
    for (float& v : data) v = normal(rng);
  }
  std::uniform_int_distribution<int32_t> label(0, static_cast<int32_t>(model.classes()) - 1);
  std::vector<int32_t> labels(static_cast<size_t>(examples));
  for (int32_t& l : labels) l = label(rng);

  Shape batch_shape{batch};
  batch_shape.insert(batch_shape.end(), example.begin(), example.end());
  lockstep::trainer::Dataset b{.inputs = {Tensor(batch_shape)}, .targets = {Tensor()}};
  Tensor& x = b.inputs[0];
  std::vector<int32_t> y(static_cast<size_t>(batch));
  std::vector<int64_t> perm(static_cast<size_t>(examples));
  std::iota(perm.begin(), perm.end(), 0);
  int64_t pos = examples;
  std::vector<double> fwd_bwd, update, fwd_bwd_cpu, update_cpu;
  Clock::time_point start;
  double cpu_start = 0;
  for (int64_t step = 0; step < steps; ++step) {
    if (step == warmup) {
      start = Clock::now();
      cpu_start = ProcessCpuSeconds();
    }
    if (pos + batch > examples) {
      std::shuffle(perm.begin(), perm.end(), rng);
      pos = 0;
    }
    for (int64_t i = 0; i < batch; ++i, ++pos) {
      const int64_t e = perm[static_cast<size_t>(pos)];
      std::copy_n(data.data() + e * size, size, x.data() + i * size);
      y[static_cast<size_t>(i)] = labels[static_cast<size_t>(e)];
    }
    const Clock::time_point t0 = Clock::now();
    const double c0 = ThreadCpuSeconds();
    model.Targets(y, &b.targets[0]);
    model.TrainStep(b);
    if (std::string bad = model.TakeInputError(); !bad.empty()) {
      std::fprintf(stderr, "%s\n", bad.c_str());
      return 3;
    }
    const Clock::time_point t1 = Clock::now();
    const double c1 = ThreadCpuSeconds();
    (*opt)->Step(model.Params(), model.Grads());
    if (profile && step >= warmup) {
      fwd_bwd.push_back(Seconds(t0, t1));
      update.push_back(Seconds(t1, Clock::now()));
      fwd_bwd_cpu.push_back(c1 - c0);
      update_cpu.push_back(ThreadCpuSeconds() - c1);
    }
  }
  const double elapsed = Seconds(start, Clock::now());
  const double cpu = ProcessCpuSeconds() - cpu_start;
  if (profile) {
    std::printf(
        "forward+backward %.2f ms (CPU %.2f ms), optimizer step %.3f ms (CPU %.3f ms); medians "
        "of %zu steps\n",
        Median(fwd_bwd) * 1e3, Median(fwd_bwd_cpu) * 1e3, Median(update) * 1e3,
        Median(update_cpu) * 1e3, fwd_bwd.size());
  }
  const auto samples = static_cast<double>((steps - warmup) * batch);
  std::printf("%.1f %.1f\n", samples / elapsed, samples / cpu);
  return 0;
}
