#include "trainer/data/dataset.h"
#include "trainer/tensor/random.h"

#include <zlib.h>

#include <algorithm>
#include <random>

namespace lockstep::trainer {
namespace {

constexpr float kMean = 0.2860f;
constexpr float kStd = 0.3530f;

// Reads `path`, then `path`.gz; gzread passes uncompressed files through.
absl::StatusOr<std::string> ReadMaybeGz(const std::string& path) {
  std::string chosen = path;
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) {
    chosen = path + ".gz";
    f = gzopen(chosen.c_str(), "rb");
  }
  if (f == nullptr) return absl::NotFoundError("data file not found: " + path + "[.gz]");
  std::string out;
  char buf[1 << 16];
  int n = 0;
  while ((n = gzread(f, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  int err = 0;
  const char* msg = gzerror(f, &err);
  gzclose(f);
  if (n < 0 || (err != Z_OK && err != Z_STREAM_END)) {
    return absl::DataLossError(chosen + ": " + (msg ? msg : "read error"));
  }
  return out;
}

uint32_t BigEndian(const std::string& s, size_t at) {
  auto b = [&](size_t i) { return static_cast<uint32_t>(static_cast<unsigned char>(s[at + i])); };
  return b(0) << 24 | b(1) << 16 | b(2) << 8 | b(3);
}

}  // namespace

absl::StatusOr<Dataset> LoadFashionMnist(const std::string& dir, const std::string& split) {
  const std::string images_path = dir + "/" + split + "-images-idx3-ubyte";
  const std::string labels_path = dir + "/" + split + "-labels-idx1-ubyte";
  absl::StatusOr<std::string> images = ReadMaybeGz(images_path);
  if (!images.ok()) return images.status();
  absl::StatusOr<std::string> labels = ReadMaybeGz(labels_path);
  if (!labels.ok()) return labels.status();
  if (images->size() < 16 || BigEndian(*images, 0) != 0x803) {
    return absl::DataLossError(images_path + ": not an IDX3 image file (bad magic)");
  }
  if (labels->size() < 8 || BigEndian(*labels, 0) != 0x801) {
    return absl::DataLossError(labels_path + ": not an IDX1 label file (bad magic)");
  }
  const int64_t n = BigEndian(*images, 4);
  const int64_t rows = BigEndian(*images, 8);
  const int64_t cols = BigEndian(*images, 12);
  if (rows != 28 || cols != 28) {
    return absl::DataLossError(images_path + ": images are " + std::to_string(rows) + "x" +
                               std::to_string(cols) + ", not 28x28");
  }
  if (static_cast<int64_t>(images->size()) != 16 + n * 784) {
    return absl::DataLossError(images_path + ": " + std::to_string(images->size()) + " bytes for " +
                               std::to_string(n) + " images (truncated?)");
  }
  if (BigEndian(*labels, 4) != n || static_cast<int64_t>(labels->size()) != 8 + n) {
    return absl::DataLossError(labels_path + ": label count does not match the " +
                               std::to_string(n) + " images");
  }
  Dataset d;
  Tensor x({n, 1, 28, 28}), y({n});
  for (int64_t i = 0; i < n * 784; ++i) {
    float v = static_cast<float>(static_cast<unsigned char>((*images)[16 + i])) / 255.0f;
    x[i] = (v - kMean) / kStd;
  }
  for (int64_t i = 0; i < n; ++i) {
    int32_t l = static_cast<unsigned char>((*labels)[8 + i]);
    if (l > 9) {
      return absl::DataLossError(labels_path + ": label " + std::to_string(l) + " at " +
                                 std::to_string(i) + " is not in 0..9");
    }
    y[i] = static_cast<float>(l);
  }
  d.inputs.push_back(std::move(x));
  d.targets.push_back(std::move(y));
  return d;
}

Shape ExampleShape(const Tensor& t) {
  return t.shape().empty() ? Shape{} : Shape(t.shape().begin() + 1, t.shape().end());
}

int64_t ExampleSize(const Tensor& t) {
  return t.shape().empty() || t.dim(0) == 0 ? 0 : t.size() / t.dim(0);
}

namespace {

// Rows [first, first + n) of `t`.
Tensor RowsOf(const Tensor& t, int64_t first, int64_t n) {
  Shape shape = t.shape();
  shape[0] = n;
  const int64_t each = ExampleSize(t);
  return Tensor(shape, std::vector<float>(t.data() + first * each, t.data() + (first + n) * each));
}

// The rows `index[0..n)` of `t` into `out`.
void GatherOf(const Tensor& t, const int64_t* index, int64_t n, Tensor* out) {
  Shape shape = t.shape();
  shape[0] = n;
  out->Resize(shape);
  const int64_t each = ExampleSize(t);
  for (int64_t i = 0; i < n; ++i) {
    std::copy_n(t.data() + index[i] * each, each, out->data() + i * each);
  }
}

}  // namespace

Dataset Rows(const Dataset& d, int64_t first, int64_t n) {
  Dataset out;
  for (const Tensor& t : d.inputs) out.inputs.push_back(RowsOf(t, first, n));
  for (const Tensor& t : d.targets) out.targets.push_back(RowsOf(t, first, n));
  if (d.sample_weights.size() > 0) out.sample_weights = RowsOf(d.sample_weights, first, n);
  return out;
}

void GatherRows(const Dataset& d, const int64_t* index, int64_t n, Dataset* out) {
  out->inputs.resize(d.inputs.size());
  out->targets.resize(d.targets.size());
  for (size_t k = 0; k < d.inputs.size(); ++k) GatherOf(d.inputs[k], index, n, &out->inputs[k]);
  for (size_t k = 0; k < d.targets.size(); ++k) GatherOf(d.targets[k], index, n, &out->targets[k]);
  if (d.sample_weights.size() > 0) GatherOf(d.sample_weights, index, n, &out->sample_weights);
}

std::vector<int32_t> ClassIds(const Tensor& t) {
  std::vector<int32_t> ids(static_cast<size_t>(t.size()));
  for (int64_t i = 0; i < t.size(); ++i) ids[static_cast<size_t>(i)] = static_cast<int32_t>(t[i]);
  return ids;
}

Tensor ClassTargets(const std::vector<int32_t>& ids) {
  Tensor t({static_cast<int64_t>(ids.size())});
  for (size_t i = 0; i < ids.size(); ++i) t[static_cast<int64_t>(i)] = static_cast<float>(ids[i]);
  return t;
}

namespace {

// Input `k` of every example: its class's prototype plus noise, or its class's token ids with
// a quarter redrawn and a padded tail. `rng` is the examples' stream: input 0 shares it with
// the class draws (so a one-input set is what it always was), the others have their own.
// With `draw`, each example's class is drawn into `label` first.
void SyntheticInputs(const SyntheticInput& in, uint64_t proto_seed, int32_t classes, float sigma,
                     bool draw, std::mt19937_64& rng, std::vector<int32_t>* label, Tensor* x) {
  const int64_t size = NumElements(in.shape);
  const auto n = static_cast<int64_t>(label->size());
  Shape shape{n};
  shape.insert(shape.end(), in.shape.begin(), in.shape.end());
  *x = Tensor(shape);
  std::mt19937_64 proto_rng(proto_seed);
  std::uniform_int_distribution<int32_t> pick(0, classes - 1);
  if (in.vocabulary > 0) {
    const int64_t vocab = std::max<int64_t>(in.vocabulary, 2);
    std::uniform_int_distribution<int64_t> id(1, vocab - 1);
    std::vector<int64_t> prototypes(static_cast<size_t>(classes * size));
    for (int64_t& v : prototypes) v = id(proto_rng);
    std::uniform_int_distribution<int64_t> length(std::max<int64_t>(size / 2, 1), size);
    std::bernoulli_distribution redraw(0.25);
    for (int64_t i = 0; i < n; ++i) {
      int32_t& l = (*label)[static_cast<size_t>(i)];
      if (draw) l = pick(rng);
      const int64_t len = length(rng);
      for (int64_t j = 0; j < size; ++j) {
        const int64_t v = j >= len      ? 0
                          : redraw(rng) ? id(rng)
                                        : prototypes[static_cast<size_t>(l * size + j)];
        (*x)[i * size + j] = static_cast<float>(v);
      }
    }
    return;
  }
  // The classes' prototypes, in class order from one stream; past kEagerPrototypes values (a
  // thousand classes of 224x224x3 images would be 150 M draws and 600 MB) each class's comes
  // from a stream of its own, drawn when its first example is.
  constexpr int64_t kEagerPrototypes = int64_t{1} << 22;
  NormalDraw<float> noise(0.0f, 1.0f);
  const bool eager = static_cast<int64_t>(classes) * size <= kEagerPrototypes;
  std::vector<std::vector<float>> prototypes(static_cast<size_t>(classes));
  auto prototype = [&](int32_t l) -> const float* {
    std::vector<float>& p = prototypes[static_cast<size_t>(l)];
    if (p.empty()) {
      p.resize(static_cast<size_t>(size));
      std::mt19937_64 own(proto_seed + 0x9E3779B97F4A7C15ull * (static_cast<uint64_t>(l) + 1));
      NormalDraw<float> draw_one(0.0f, 1.0f);
      for (float& v : p) v = draw_one(own);
    }
    return p.data();
  };
  if (eager) {
    for (std::vector<float>& p : prototypes) {
      p.resize(static_cast<size_t>(size));
      for (float& v : p) v = noise(proto_rng);
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    int32_t& l = (*label)[static_cast<size_t>(i)];
    if (draw) l = pick(rng);
    const float* p = prototype(l);
    float* out = x->data() + i * size;
    for (int64_t j = 0; j < size; ++j) out[j] = 0.5f * p[j] + sigma * noise(rng);
  }
}

// Target `t` of every example: the class id, or the class's fixed random target.
Tensor SyntheticTargets(const SyntheticTarget& t, uint64_t proto_seed, int32_t classes,
                        const std::vector<int32_t>& label) {
  const auto n = static_cast<int64_t>(label.size());
  const int64_t size = NumElements(t.shape);
  const int64_t c = std::max<int64_t>(t.classes, 1);
  Shape shape{n};
  shape.insert(shape.end(), t.shape.begin(), t.shape.end());
  Tensor y(shape);
  if ((t.form == TargetForm::kClassIds || t.form == TargetForm::kBinary) && size == 1) {
    const int64_t k = t.form == TargetForm::kBinary ? 2 : c;
    for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(label[static_cast<size_t>(i)] % k);
    return y;
  }
  if (t.form == TargetForm::kOneHot && size == c) {
    y.Fill(0.0f);
    for (int64_t i = 0; i < n; ++i) y[i * c + label[static_cast<size_t>(i)] % c] = 1.0f;
    return y;
  }
  std::mt19937_64 rng(proto_seed);
  Tensor prototypes({classes, size});
  NormalDraw<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int64_t> id(0, c - 1);
  std::bernoulli_distribution coin(0.5);
  for (int32_t l = 0; l < classes; ++l) {
    float* p = prototypes.data() + static_cast<int64_t>(l) * size;
    switch (t.form) {
      case TargetForm::kClassIds:
        for (int64_t j = 0; j < size; ++j) p[j] = static_cast<float>(id(rng));
        break;
      case TargetForm::kOneHot:
        std::fill_n(p, size, 0.0f);
        for (int64_t r = 0; r < size / c; ++r) p[r * c + id(rng)] = 1.0f;
        break;
      case TargetForm::kBinary:
        for (int64_t j = 0; j < size; ++j) p[j] = coin(rng) ? 1.0f : 0.0f;
        break;
      case TargetForm::kReal:
        for (int64_t j = 0; j < size; ++j) p[j] = normal(rng);
        break;
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    std::copy_n(prototypes.data() + label[static_cast<size_t>(i)] * size, size,
                y.data() + i * size);
  }
  return y;
}

}  // namespace

Dataset SyntheticDataset(int64_t n, uint64_t seed, uint64_t split, const SyntheticSignature& sig) {
  const int32_t classes = std::max<int32_t>(sig.classes, 1);
  std::mt19937_64 rng(seed * 1000003 + split + 1);
  std::vector<int32_t> label(static_cast<size_t>(n));
  Dataset d;
  d.inputs.resize(sig.inputs.size());
  for (size_t k = 0; k < sig.inputs.size(); ++k) {
    // Input 0 draws the classes as it goes (the order a one-input set always had).
    std::mt19937_64 own(seed * 1000003 + split + 1 + 7919 * k);
    SyntheticInputs(sig.inputs[k], seed + 104729 * k, classes, sig.noise, k == 0,
                    k == 0 ? rng : own, &label, &d.inputs[k]);
  }
  for (size_t k = 0; k < sig.targets.size(); ++k) {
    d.targets.push_back(SyntheticTargets(sig.targets[k], seed + 7 + 15485863 * k, classes, label));
  }
  return d;
}

Dataset SyntheticDataset(int64_t n, uint64_t seed, uint64_t split, const Shape& example,
                         int32_t classes) {
  SyntheticSignature sig;
  sig.inputs = {{example}};
  sig.targets = {{.shape = {}, .form = TargetForm::kClassIds, .classes = classes}};
  sig.classes = classes;
  return SyntheticDataset(n, seed, split, sig);
}

Dataset SyntheticTokens(int64_t n, uint64_t seed, uint64_t split, const Shape& example,
                        int32_t classes, int64_t vocabulary) {
  SyntheticSignature sig;
  sig.inputs = {{example, std::max<int64_t>(vocabulary, 2)}};
  sig.targets = {{.shape = {}, .form = TargetForm::kClassIds, .classes = classes}};
  sig.classes = classes;
  return SyntheticDataset(n, seed, split, sig);
}

}  // namespace lockstep::trainer
