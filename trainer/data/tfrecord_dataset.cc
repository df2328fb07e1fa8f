#include "trainer/data/tfrecord_dataset.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "trainer/data/parallel_for.h"
#include "trainer/data/tfrecord.h"
#include "trainer/proto/example.pb.h"

namespace lockstep::trainer {
namespace {

// Where a record is, for messages.
struct At {
  const std::string& file;
  int64_t record;
  int64_t offset;
  std::string str() const {
    return absl::StrCat(file, ": record ", record, " (offset ", offset, ")");
  }
};

const char* TypeName(const tfexample::Feature& f) {
  switch (f.kind_case()) {
    case tfexample::Feature::kBytesList:
      return "bytes_list";
    case tfexample::Feature::kFloatList:
      return "float_list";
    case tfexample::Feature::kInt64List:
      return "int64_list";
    default:
      return "empty feature";
  }
}

// Appends the feature's values (as floats) to `out`, shaped as the spec says.
absl::Status Extract(const tfexample::Example& e, const FeatureSpec& spec, const At& at,
                     float* out) {
  const int64_t n = spec.size();
  const auto& map = e.features().feature();
  auto it = map.find(spec.name);
  if (it == map.end()) {
    if (!spec.default_value && !spec.var_len) {
      return absl::DataLossError(at.str() + ": feature '" + spec.name + "' is missing");
    }
    std::fill_n(out, n, spec.default_value.value_or(0.0f));
    return absl::OkStatus();
  }
  const tfexample::Feature& f = it->second;
  const bool want_float = spec.type == FeatureType::kFloat32;
  if ((want_float && !f.has_float_list()) || (!want_float && !f.has_int64_list())) {
    return absl::DataLossError(at.str() + ": feature '" + spec.name + "' is a " + TypeName(f) +
                               "; the spec says " + (want_float ? "float32" : "int64"));
  }
  const int64_t have = want_float ? f.float_list().value_size() : f.int64_list().value_size();
  if (!spec.var_len && have != n) {
    return absl::DataLossError(absl::StrCat(at.str(), ": feature '", spec.name, "' has ", have,
                                            " values; its shape ", ShapeString(spec.shape),
                                            " takes ", n));
  }
  const int64_t take = std::min(have, n);
  for (int64_t i = 0; i < take; ++i) {
    out[i] = want_float ? f.float_list().value(static_cast<int>(i))
                        : static_cast<float>(f.int64_list().value(static_cast<int>(i)));
  }
  std::fill(out + take, out + n, spec.default_value.value_or(0.0f));
  return absl::OkStatus();
}

}  // namespace

namespace {

// One file's examples: each feature's values (the inputs', then the labels'), the examples
// read, and the corrupt records skipped.
struct FileRows {
  std::vector<std::vector<float>> values;
  int64_t rows = 0;
  int64_t skipped = 0;
  int64_t unreadable_bytes = 0;
  std::string first_problem;
};

// The input features, then the label features.
std::vector<const FeatureSpec*> Features(const DataSpec& spec) {
  std::vector<const FeatureSpec*> out;
  for (const auto& f : spec.input_features) out.push_back(&f.what);
  for (const auto& f : spec.label_features) out.push_back(&f.what);
  if (spec.weight_feature) out.push_back(&*spec.weight_feature);
  return out;
}

// The records of `file` read in order (the framing and its CRCs are sequential), then parsed and
// converted on `threads` threads, each into its own rows.
absl::Status ReadFile(const std::string& file, const DataSpec& spec, int threads, FileRows* out) {
  struct Raw {
    std::string record;
    At at;
  };
  std::vector<Raw> raw;
  absl::StatusOr<std::unique_ptr<RecordReader>> reader = RecordReader::Open(file);
  if (!reader.ok()) return reader.status();
  for (int64_t index = 0;; ++index) {
    const int64_t offset = (*reader)->offset();
    std::string record;
    absl::StatusOr<bool> more = (*reader)->Next(&record);
    if (!more.ok()) {
      if (!spec.skip_corrupt || !absl::IsDataLoss(more.status())) return more.status();
      if (out->first_problem.empty()) out->first_problem = std::string(more.status().message());
      ++out->skipped;
      continue;  // past a bad data CRC the next record follows; else Next ends the file
    }
    if (!*more) break;
    raw.push_back({std::move(record), At{file, index, offset}});
  }
  absl::StatusOr<int64_t> lost = (*reader)->UnreadableBytes();
  if (!lost.ok()) return lost.status();
  out->unreadable_bytes = *lost;
  const std::vector<const FeatureSpec*> features = Features(spec);
  out->rows = static_cast<int64_t>(raw.size());
  out->values.resize(features.size());
  for (size_t k = 0; k < features.size(); ++k) {
    out->values[k].resize(raw.size() * static_cast<size_t>(features[k]->size()));
  }
  return ParallelFor(static_cast<int64_t>(raw.size()), threads, [&](int64_t begin, int64_t end) {
    tfexample::Example e;
    for (int64_t i = begin; i < end; ++i) {
      const At& at = raw[static_cast<size_t>(i)].at;
      if (!e.ParseFromString(raw[static_cast<size_t>(i)].record)) {
        return absl::DataLossError(at.str() + ": not a tf.train.Example");
      }
      for (size_t k = 0; k < features.size(); ++k) {
        const int64_t width = features[k]->size();
        if (absl::Status s = Extract(e, *features[k], at, out->values[k].data() + i * width);
            !s.ok()) {
          return s;
        }
      }
    }
    return absl::OkStatus();
  });
}

}  // namespace

absl::StatusOr<Dataset> LoadTfRecords(const std::string& glob, const DataSpec& spec,
                                      TfRecordReport* report, int threads, FileShard shard) {
  absl::StatusOr<FileSet> set = ShardedFiles(glob, shard);
  if (!set.ok()) return set.status();
  TfRecordReport local;
  TfRecordReport& r = report != nullptr ? *report : local;
  r.matched = set->matched;
  r.sharded = set->sharded;
  r.files = set->files;
  const std::vector<std::string>* files = &r.files;
  if (threads <= 0) threads = DecodeThreads();
  // Files read side by side (each file's reading is sequential), the threads left over decoding
  // within each; the rows then joined in file order.
  const int per_file_threads =
      std::max(1, threads / static_cast<int>(std::min<size_t>(files->size(), threads)));
  std::vector<FileRows> rows(files->size());
  absl::Status read =
      ParallelFor(static_cast<int64_t>(files->size()), threads, [&](int64_t begin, int64_t end) {
        for (int64_t f = begin; f < end; ++f) {
          const auto k = static_cast<size_t>(f);
          if (absl::Status s = ReadFile((*files)[k], spec, per_file_threads, &rows[k]); !s.ok()) {
            return s;
          }
        }
        return absl::OkStatus();
      });
  if (!read.ok()) return read;
  const std::vector<const FeatureSpec*> features = Features(spec);
  int64_t n = 0;
  for (const FileRows& f : rows) n += f.rows;
  std::vector<std::vector<float>> values(features.size());
  for (size_t k = 0; k < features.size(); ++k) {
    values[k].reserve(static_cast<size_t>(n * features[k]->size()));
  }
  r.skipped = 0;
  r.unreadable_bytes = 0;
  r.corrupt.clear();
  for (size_t i = 0; i < rows.size(); ++i) {
    FileRows& f = rows[i];
    for (size_t k = 0; k < features.size(); ++k) {
      values[k].insert(values[k].end(), f.values[k].begin(), f.values[k].end());
    }
    r.skipped += f.skipped;
    r.unreadable_bytes += f.unreadable_bytes;
    if (f.skipped > 0 || f.unreadable_bytes > 0) {
      r.corrupt.push_back({(*files)[i], f.skipped, f.unreadable_bytes, f.first_problem});
    }
    f = FileRows();
  }
  r.records = n;
  Dataset d;
  for (size_t k = 0; k < features.size(); ++k) {
    Shape shape{n};
    shape.insert(shape.end(), features[k]->shape.begin(), features[k]->shape.end());
    if (k < spec.input_features.size()) {
      d.inputs.emplace_back(shape, std::move(values[k]));
    } else if (k < spec.input_features.size() + spec.label_features.size()) {
      d.targets.emplace_back(shape, std::move(values[k]));
    } else {
      d.sample_weights = Tensor({n}, std::move(values[k]));
    }
  }
  return d;
}

}  // namespace lockstep::trainer
