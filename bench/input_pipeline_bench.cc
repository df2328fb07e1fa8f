// The input pipeline alone: records (or images) per second that the trainer's loaders decode,
// on one thread and on the machine's decode threads, side by side in one run (run by
// bench/input_pipeline.sh, which writes the files).
//   input_pipeline_bench TFRECORD_GLOB IMAGE_DIR
#include <chrono>
#include <cstdio>
#include <string>

#include "trainer/data/data_spec.h"
#include "trainer/data/images.h"
#include "trainer/data/parallel_for.h"
#include "trainer/data/tfrecord_dataset.h"

namespace {

using lockstep::trainer::Dataset;

double Seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Best of three loads: examples per second.
template <typename Load>
double Rate(Load load) {
  double best = 0;
  for (int i = 0; i < 3; ++i) {
    const double t0 = Seconds();
    absl::StatusOr<Dataset> d = load();
    const double t = Seconds() - t0;
    if (!d.ok()) {
      std::fprintf(stderr, "%s\n", std::string(d.status().message()).c_str());
      std::exit(1);
    }
    best = std::max(best, static_cast<double>(d->size()) / t);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: input_pipeline_bench TFRECORD_GLOB IMAGE_DIR\n");
    return 2;
  }
  using namespace lockstep::trainer;
  absl::StatusOr<DataSpec> spec = ParseDataSpec(nlohmann::json::parse(
      R"({"format": "tfrecord", "files": "unused",
          "features": {"image": {"dtype": "int64", "shape": [784]}, "label": {"dtype": "int64"}},
          "input": "image", "label": "label"})"));
  if (!spec.ok()) {
    std::fprintf(stderr, "%s\n", std::string(spec.status().message()).c_str());
    return 1;
  }
  const int n = DecodeThreads();
  std::printf("%-34s %14s %14s %8s\n", "loader", "1 thread /s", "threads /s", "ratio");
  const double t1 = Rate([&] { return LoadTfRecords(argv[1], *spec, nullptr, 1); });
  const double tn = Rate([&] { return LoadTfRecords(argv[1], *spec, nullptr, n); });
  std::printf("%-34s %14.0f %14.0f %7.2fx  (%d threads)\n", "TFRecord tf.train.Example records", t1,
              tn, tn / t1, n);
  std::vector<std::string> classes;
  const double i1 = Rate([&] { return LoadImageFolder(argv[2], 28, 28, 1, &classes, 1); });
  const double in = Rate([&] { return LoadImageFolder(argv[2], 28, 28, 1, &classes, n); });
  std::printf("%-34s %14.0f %14.0f %7.2fx  (%d threads)\n", "images (PNG and JPEG, resized)", i1,
              in, in / i1, n);
  return 0;
}
