// The cost of one optimizer Step() for each optimizer the trainer has: the legacy ones of
// --optimizer (MakeOptimizer "sgd" with momentum 0.9, "adam") and the Keras ones of a model
// file's compile config (ParseKerasOptimizer/MakeKerasOptimizer: SGD with momentum, Nesterov,
// Adam, AdamW, RMSprop, Adagrad), each with and without clipnorm. Two parameter sets: the
// built-in mlp's (784x256, 256, 256x256, 256, 256x10, 10: 269k floats, which stay in the
// caches) and about 10M floats (memory-bound). After the Google Benchmark table it prints
// each optimizer's time as a ratio to the legacy SGD's on the same parameters.
// Run by hand: build/release/bench/optimizer_bench [--benchmark_repetitions=5]
#include <benchmark/benchmark.h>

#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "trainer/optim/keras_optimizer.h"
#include "trainer/optim/optimizer.h"

namespace {

using lockstep::trainer::MakeKerasOptimizer;
using lockstep::trainer::Optimizer;
using lockstep::trainer::ParseKerasOptimizer;
using lockstep::trainer::Shape;
using lockstep::trainer::Tensor;

struct ParamSet {
  const char* name;
  std::vector<Shape> shapes;
};

const std::vector<ParamSet>& ParamSets() {
  static const std::vector<ParamSet> sets = {
      {"mlp", {{784, 256}, {256}, {256, 256}, {256}, {256, 10}, {10}}},
      // 10.0M floats: 2560x2560 + 2560x1280 + 1280x128 and their biases.
      {"10M", {{2560, 2560}, {2560}, {2560, 1280}, {1280}, {1280, 128}, {128}}},
  };
  return sets;
}

using Factory = std::function<std::unique_ptr<Optimizer>()>;

std::unique_ptr<Optimizer> Keras(const std::string& config) {
  auto o = ParseKerasOptimizer(nlohmann::json::parse(config));
  if (!o.ok()) {
    std::fprintf(stderr, "%s\n", std::string(o.status().message()).c_str());
    std::abort();
  }
  return MakeKerasOptimizer(*o);
}

std::vector<std::pair<std::string, Factory>> Optimizers() {
  std::vector<std::pair<std::string, Factory>> out = {
      {"sgd", [] { return std::move(*lockstep::trainer::MakeOptimizer("sgd", 0.01f, 0.9f)); }},
      {"adam", [] { return std::move(*lockstep::trainer::MakeOptimizer("adam", 0.001f, 0.9f)); }},
  };
  const std::vector<std::pair<std::string, std::string>> keras = {
      {"keras_sgd_momentum", R"("class_name": "SGD", "config": {"momentum": 0.9)"},
      {"keras_sgd_nesterov",
       R"("class_name": "SGD", "config": {"momentum": 0.9, "nesterov": true)"},
      {"keras_adam", R"("class_name": "Adam", "config": {)"},
      {"keras_adamw", R"("class_name": "AdamW", "config": {)"},
      {"keras_rmsprop", R"("class_name": "RMSprop", "config": {)"},
      {"keras_adagrad", R"("class_name": "Adagrad", "config": {)"},
  };
  for (const auto& [name, head] : keras) {
    const bool empty = head.back() == '{';
    out.emplace_back(name, [head] { return Keras("{" + head + "}}"); });
    out.emplace_back(name + "_clipnorm", [head, empty] {
      return Keras("{" + head + (empty ? "" : ", ") + R"("clipnorm": 1.0}})");
    });
  }
  return out;
}

void Step(benchmark::State& state, const Factory& make, const ParamSet& set) {
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 0.01f);
  std::vector<Tensor> params, grads;
  int64_t n = 0;
  for (const Shape& s : set.shapes) {
    params.emplace_back(s);
    grads.emplace_back(s);
    for (float& v : params.back().values()) v = normal(rng);
    for (float& v : grads.back().values()) v = normal(rng);
    n += params.back().size();
  }
  std::vector<Tensor*> p, g;
  for (size_t i = 0; i < params.size(); ++i) {
    p.push_back(&params[i]);
    g.push_back(&grads[i]);
  }
  std::unique_ptr<Optimizer> opt = make();
  opt->Step(p, g);  // sizes the state
  for (auto _ : state) {
    opt->Step(p, g);
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * n);
}

// The console table, then each optimizer's time over the legacy SGD's on the same parameters.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs) {
      // With repetitions, the median stands for the benchmark.
      if (r.run_type == Run::RT_Aggregate && r.aggregate_name != "median") continue;
      const std::string name = r.run_name.function_name;
      const double ms = r.GetAdjustedRealTime() * Scale(r.time_unit);
      if (!times_.count(name)) order_.push_back(name);
      times_[name] = ms;
    }
  }
  void Finalize() override {
    ConsoleReporter::Finalize();
    std::printf("\n%-34s %12s %8s\n", "optimizer/params", "ms/step", "vs sgd");
    for (const std::string& name : order_) {
      const std::string set = name.substr(name.rfind('/') + 1);
      auto sgd = times_.find("sgd/" + set);
      const double ratio = sgd == times_.end() ? 0 : times_[name] / sgd->second;
      std::printf("%-34s %12.4f %8.2f\n", name.c_str(), times_[name], ratio);
    }
  }

 private:
  static double Scale(benchmark::TimeUnit u) {
    switch (u) {
      case benchmark::kNanosecond:
        return 1e-6;
      case benchmark::kMicrosecond:
        return 1e-3;
      case benchmark::kMillisecond:
        return 1;
      default:
        return 1e3;
    }
  }
  std::map<std::string, double> times_;
  std::vector<std::string> order_;
};

}  // namespace

int main(int argc, char** argv) {
  for (const ParamSet& set : ParamSets()) {
    for (const auto& [name, make] : Optimizers()) {
      benchmark::RegisterBenchmark((name + "/" + set.name).c_str(), Step, make, set)
          ->Unit(benchmark::kMicrosecond)
          ->UseRealTime();
    }
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
