#include "trainer/data/dataset.h"

#include <zlib.h>

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
  d.images = Tensor({n, 1, 28, 28});
  d.labels.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n * 784; ++i) {
    float v = static_cast<float>(static_cast<unsigned char>((*images)[16 + i])) / 255.0f;
    d.images[i] = (v - kMean) / kStd;
  }
  for (int64_t i = 0; i < n; ++i) {
    int32_t l = static_cast<unsigned char>((*labels)[8 + i]);
    if (l > 9) {
      return absl::DataLossError(labels_path + ": label " + std::to_string(l) + " at " +
                                 std::to_string(i) + " is not in 0..9");
    }
    d.labels[static_cast<size_t>(i)] = l;
  }
  return d;
}

Dataset SyntheticTokens(int64_t n, uint64_t seed, uint64_t split, const Shape& example,
                        int32_t classes, int64_t vocabulary) {
  const int64_t size = NumElements(example);
  const int64_t vocab = std::max<int64_t>(vocabulary, 2);
  std::mt19937_64 proto_rng(seed);
  std::uniform_int_distribution<int64_t> id(1, vocab - 1);
  std::vector<int64_t> prototypes(static_cast<size_t>(classes * size));
  for (int64_t& v : prototypes) v = id(proto_rng);
  std::mt19937_64 rng(seed * 1000003 + split + 1);
  Dataset d;
  Shape shape{n};
  shape.insert(shape.end(), example.begin(), example.end());
  d.images = Tensor(shape);
  d.labels.resize(static_cast<size_t>(n));
  std::uniform_int_distribution<int32_t> label(0, classes - 1);
  std::uniform_int_distribution<int64_t> length(std::max<int64_t>(size / 2, 1), size);
  std::bernoulli_distribution redraw(0.25);
  for (int64_t i = 0; i < n; ++i) {
    const int32_t l = label(rng);
    d.labels[static_cast<size_t>(i)] = l;
    const int64_t len = length(rng);
    for (int64_t j = 0; j < size; ++j) {
      const int64_t v = j >= len      ? 0
                        : redraw(rng) ? id(rng)
                                      : prototypes[static_cast<size_t>(l * size + j)];
      d.images[i * size + j] = static_cast<float>(v);
    }
  }
  return d;
}

Dataset SyntheticDataset(int64_t n, uint64_t seed, uint64_t split, const Shape& example,
                         int32_t classes) {
  const int64_t size = NumElements(example);
  std::mt19937_64 proto_rng(seed);
  std::normal_distribution<float> noise(0.0f, 1.0f);
  Tensor prototypes({classes, size});
  for (int64_t i = 0; i < prototypes.size(); ++i) prototypes[i] = noise(proto_rng);
  std::mt19937_64 rng(seed * 1000003 + split + 1);
  Dataset d;
  Shape shape{n};
  shape.insert(shape.end(), example.begin(), example.end());
  d.images = Tensor(shape);
  d.labels.resize(static_cast<size_t>(n));
  std::uniform_int_distribution<int32_t> label(0, classes - 1);
  for (int64_t i = 0; i < n; ++i) {
    int32_t l = label(rng);
    d.labels[static_cast<size_t>(i)] = l;
    for (int64_t j = 0; j < size; ++j) {
      d.images[i * size + j] = 0.5f * prototypes[l * size + j] + noise(rng);
    }
  }
  return d;
}

}  // namespace lockstep::trainer
