#pragma once
// Datasets: Fashion-MNIST from IDX files (as Debian's dataset-fashion-mnist installs them,
// gzip-compressed or not) and a synthetic dataset of any size. Images are [N, 1, 28, 28],
// scaled to [0, 1] and standardised with Fashion-MNIST's mean and deviation.
// Thread-safety: plain values.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/tensor/tensor.h"

namespace lockstep::trainer {

inline constexpr char kDefaultFashionMnistDir[] = "/usr/share/datasets/fashion-mnist";

struct Dataset {
  Tensor images;                // [N, 1, 28, 28] (or [N, example...] when synthetic)
  std::vector<int32_t> labels;  // N values in [0, classes)
  int64_t size() const { return static_cast<int64_t>(labels.size()); }
  int64_t example_size() const { return size() == 0 ? 0 : images.size() / size(); }
};

// `split` is "train" or "t10k". NotFound names the missing file; DataLoss names a malformed
// one (bad magic, sizes that disagree, a label out of range, a short file).
absl::StatusOr<Dataset> LoadFashionMnist(const std::string& dir, const std::string& split);

// `n` examples of `classes` classes, each class a fixed random prototype plus noise:
// learnable, so a test can train on it, and reproducible from `seed`. The prototypes come from
// `seed` alone, so a training split (0) and a test split (1) of one seed are the same task.
// Examples are `example`-shaped (Fashion-MNIST's [1, 28, 28] by default, or a model's input).
Dataset SyntheticDataset(int64_t n, uint64_t seed, uint64_t split = 0,
                         const Shape& example = {1, 28, 28}, int32_t classes = 10);
// The same for a model that reads token ids: each class a fixed random sequence of ids in
// [1, vocabulary), each example its class's sequence with a quarter of the ids redrawn and a
// random tail of padding (id 0), as a text classifier's data looks.
Dataset SyntheticTokens(int64_t n, uint64_t seed, uint64_t split, const Shape& example,
                        int32_t classes, int64_t vocabulary);

}  // namespace lockstep::trainer
