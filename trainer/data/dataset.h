#pragma once
// Datasets: Fashion-MNIST from IDX files (as Debian's dataset-fashion-mnist installs them,
// gzip-compressed or not) and synthetic datasets of any size and signature. Fashion-MNIST's
// images are [N, 1, 28, 28], scaled to [0, 1] and standardised with its mean and deviation; its
// target is the class id.
// Thread-safety: plain values.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/tensor/tensor.h"

namespace lockstep::trainer {

inline constexpr char kDefaultFashionMnistDir[] = "/usr/share/datasets/fashion-mnist";

// Examples: the model's inputs and the targets of its outputs, each a tensor with the examples
// on its first axis, in the model's order of inputs and outputs. A target is whatever the
// output's loss compares against: class ids (as floats, one per output row), one-hot or
// multi-hot rows, or real values of the output's shape (regression, images, sequences).
// A Batch is a Dataset too: a few rows of one.
struct Dataset {
  std::vector<Tensor> inputs;
  std::vector<Tensor> targets;
  // Each example's weight in the loss ([N], Keras's sample_weight), or empty: every example 1.
  Tensor sample_weights;
  int64_t size() const {
    return inputs.empty() || inputs[0].shape().empty() ? 0 : inputs[0].dim(0);
  }
};

// One example's shape in `t` (its shape without the first axis) and its number of values.
Shape ExampleShape(const Tensor& t);
int64_t ExampleSize(const Tensor& t);
// Rows [first, first + n) of every tensor of `d`.
Dataset Rows(const Dataset& d, int64_t first, int64_t n);
// The rows `index[0..n)` of every tensor of `d` into `out` (resized to n rows).
void GatherRows(const Dataset& d, const int64_t* index, int64_t n, Dataset* out);
// Class ids held as floats, as integers (truncated; the loss checks them).
std::vector<int32_t> ClassIds(const Tensor& t);
// Class ids as a target tensor [n].
Tensor ClassTargets(const std::vector<int32_t>& ids);

// `split` is "train" or "t10k". NotFound names the missing file; DataLoss names a malformed
// one (bad magic, sizes that disagree, a label out of range, a short file).
absl::StatusOr<Dataset> LoadFashionMnist(const std::string& dir, const std::string& split);

// Synthetic data for a model of any signature: every example belongs to one of `classes`
// hidden classes; each input is its class's fixed random prototype plus noise (or, for an input
// of token ids, its class's id sequence with a quarter of the ids redrawn and a random tail of
// padding id 0, as a text classifier's data looks), and each target is its class's: the class
// id itself for a one-id-per-example target, else a fixed random target of the class (ids,
// one-hot rows, 0/1 values or real values, by the target's form). Learnable, so a test can
// train on it, and reproducible from `seed`: the prototypes come from `seed` alone, so a
// training split (0) and a test split (1) of one seed are the same task.
enum class TargetForm { kClassIds, kOneHot, kBinary, kReal };
struct SyntheticInput {
  Shape shape;             // per example
  int64_t vocabulary = 0;  // > 0: token ids in [0, vocabulary)
};
struct SyntheticTarget {
  Shape shape;  // per example: [] for one class id per example
  TargetForm form = TargetForm::kClassIds;
  int64_t classes = 10;  // ids in [0, classes); one-hot rows of the last axis
};
struct SyntheticSignature {
  std::vector<SyntheticInput> inputs{{{1, 28, 28}}};
  std::vector<SyntheticTarget> targets{{}};
  int32_t classes = 10;
  float noise = 1;  // the deviation of the noise on the inputs' prototypes (scaled 0.5)
};
Dataset SyntheticDataset(int64_t n, uint64_t seed, uint64_t split, const SyntheticSignature& sig);
// One input of `example`'s shape and one class id of `classes` per example.
Dataset SyntheticDataset(int64_t n, uint64_t seed, uint64_t split = 0,
                         const Shape& example = {1, 28, 28}, int32_t classes = 10);
// The same with token ids in [1, vocabulary) (0 is padding).
Dataset SyntheticTokens(int64_t n, uint64_t seed, uint64_t split, const Shape& example,
                        int32_t classes, int64_t vocabulary);

}  // namespace lockstep::trainer
