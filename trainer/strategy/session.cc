#include "trainer/strategy/session.h"

#include <chrono>

#include "absl/strings/str_join.h"
#include "common/log.h"
#include "trainer/data/csv.h"
#include "trainer/data/images.h"
#include "trainer/data/numpy.h"
#include "trainer/data/tfrecord_dataset.h"
#include "trainer/model/keras_io.h"

namespace lockstep::trainer {

double MonotonicSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::vector<float> PackTensors(const std::vector<Tensor*>& ts) {
  int64_t n = 0;
  for (Tensor* t : ts) n += t->size();
  std::vector<float> flat;
  flat.reserve(static_cast<size_t>(n));
  for (Tensor* t : ts) flat.insert(flat.end(), t->data(), t->data() + t->size());
  return flat;
}

void UnpackTensors(const std::vector<float>& flat, const std::vector<Tensor*>& ts) {
  const float* src = flat.data();
  for (Tensor* t : ts) {
    std::copy_n(src, t->size(), t->data());
    src += t->size();
  }
}

absl::Status PeerLost(const absl::Status& s) {
  if (s.ok()) return s;
  return absl::AbortedError("peer lost: " + std::string(s.message()));
}

namespace {

// The data spec's examples: the training data, and the validation data or the last fraction
// of the training examples held out; each shaped as the model's input, its labels checked
// against the model's classes, its inputs scaled.
absl::StatusOr<Datasets> LoadSpecDatasets(const TrainerConfig& c, const Shape& example,
                                          int64_t classes, FileShard shard) {
  absl::StatusOr<DataSpec> spec = LoadDataSpec(c.data_spec);
  if (!spec.ok()) return spec.status();
  if (spec->format == DataFormat::kTfRecord && spec->input.size() != NumElements(example)) {
    return absl::InvalidArgumentError(
        "data spec " + c.data_spec + ": feature '" + spec->input.name + "' of shape " +
        ShapeString(spec->input.shape) + " has " + std::to_string(spec->input.size()) +
        " values per example; --model " + c.model + " takes " + ShapeString(example) + " (" +
        std::to_string(NumElements(example)) + ")");
  }
  int64_t skipped = 0;   // corrupt TFRecord records (skip_corrupt)
  bool sharded = false;  // the training files split by file (FileShard)
  // Shapes the examples as the model's input and checks the labels; `what` names the source.
  auto fit = [&](Dataset& d, const std::string& what) -> absl::Status {
    if (d.size() > 0 && d.example_size() != NumElements(example)) {
      Shape per(d.images.shape().begin() + 1, d.images.shape().end());
      return absl::InvalidArgumentError(what + ": examples of shape " + ShapeString(per) + " (" +
                                        std::to_string(d.example_size()) + " values); --model " +
                                        c.model + " takes " + ShapeString(example) + " (" +
                                        std::to_string(NumElements(example)) + ")");
    }
    Shape shape{d.size()};
    shape.insert(shape.end(), example.begin(), example.end());
    d.images = d.images.Reshaped(std::move(shape));
    for (size_t i = 0; i < d.labels.size(); ++i) {
      if (d.labels[i] >= classes) {
        return absl::DataLossError(what + ": example " + std::to_string(i) + " has label " +
                                   std::to_string(d.labels[i]) + "; --model " + c.model + " has " +
                                   std::to_string(classes) + " classes");
      }
    }
    if (spec->input_scale != 1.0f) {
      for (float& v : d.images.values()) v *= spec->input_scale;
    }
    return absl::OkStatus();
  };
  auto records = [&](const std::string& glob, Dataset* out, FileShard part) -> absl::Status {
    TfRecordReport report;
    absl::StatusOr<Dataset> loaded = LoadTfRecords(glob, *spec, &report, 0, part);
    if (!loaded.ok()) return loaded.status();
    skipped += report.skipped;
    sharded = sharded || report.sharded;
    common::LogInfo(
        "data", report.records, " records from ", report.files.size(), " file(s) of ", glob,
        report.sharded ? absl::StrCat(" (worker ", part.index, " of ", part.count, "'s ",
                                      report.files.size(), " of ", report.matched, " files)")
                       : "",
        report.skipped > 0 ? ", " + std::to_string(report.skipped) + " corrupt record(s) skipped"
                           : "");
    *out = std::move(*loaded);
    return fit(*out, glob);
  };
  auto arrays = [&](const std::string& x, const std::string& y, Dataset* out) -> absl::Status {
    absl::StatusOr<Dataset> loaded = LoadNumpyDataset(x, y);
    if (!loaded.ok()) return loaded.status();
    common::LogInfo("data", loaded->size(), " examples from ", x, " and ", y);
    *out = std::move(*loaded);
    return fit(*out, x);
  };
  auto rows = [&](const std::string& glob, Dataset* out, FileShard part) -> absl::Status {
    FileSet files;
    absl::StatusOr<Dataset> loaded = LoadCsv(glob, *spec, &files, part);
    if (!loaded.ok()) return loaded.status();
    sharded = sharded || files.sharded;
    common::LogInfo("data", loaded->size(), " rows from ", files.files.size(), " file(s) of ", glob,
                    files.sharded
                        ? absl::StrCat(" (worker ", part.index, " of ", part.count, "'s ",
                                       files.files.size(), " of ", files.matched, " files)")
                        : "");
    *out = std::move(*loaded);
    return fit(*out, glob);
  };
  auto images = [&](const std::string& dir, Dataset* out,
                    std::vector<std::string>* names) -> absl::Status {
    // [height, width, channels], or a built-in model's [1, height, width].
    const bool hwc = example.size() == 3 && (example[2] == 1 || example[2] == 3);
    const bool chw = example.size() == 3 && example[0] == 1;
    if (!hwc && !chw) {
      return absl::InvalidArgumentError("--model " + c.model + " takes " + ShapeString(example) +
                                        "; images need [height, width, 1 or 3 channels]");
    }
    const int64_t h = hwc ? example[0] : example[1], w = hwc ? example[1] : example[2];
    absl::StatusOr<Dataset> loaded = LoadImageFolder(dir, h, w, hwc ? example[2] : 1, names);
    if (!loaded.ok()) return loaded.status();
    common::LogInfo("data", loaded->size(), " images of ", names->size(), " classes (",
                    absl::StrJoin(*names, ", "), ") from ", dir);
    *out = std::move(*loaded);
    return fit(*out, dir);
  };
  Datasets d;
  if (spec->format == DataFormat::kImages) {
    std::vector<std::string> class_names, validation_names;
    if (absl::Status s = images(spec->directory, &d.train, &class_names); !s.ok()) return s;
    if (!spec->validation_directory.empty()) {
      if (absl::Status s = images(spec->validation_directory, &d.test, &validation_names);
          !s.ok()) {
        return s;
      }
      if (validation_names != class_names) {
        return absl::DataLossError(spec->validation_directory + " has the classes " +
                                   absl::StrJoin(validation_names, ", ") + "; " + spec->directory +
                                   " has " + absl::StrJoin(class_names, ", "));
      }
    }
  } else if (spec->format == DataFormat::kCsv) {
    const FileShard part = spec->validation_split > 0 ? FileShard{} : shard;
    if (absl::Status s = rows(spec->files, &d.train, part); !s.ok()) return s;
    if (!spec->validation_files.empty()) {
      if (absl::Status s = rows(spec->validation_files, &d.test, {}); !s.ok()) return s;
    }
  } else if (spec->format == DataFormat::kTfRecord) {
    const FileShard part = spec->validation_split > 0 ? FileShard{} : shard;
    if (absl::Status s = records(spec->files, &d.train, part); !s.ok()) return s;
    if (!spec->validation_files.empty()) {
      if (absl::Status s = records(spec->validation_files, &d.test, {}); !s.ok()) return s;
    }
  } else {
    if (absl::Status s = arrays(spec->x, spec->y, &d.train); !s.ok()) return s;
    if (!spec->validation_x.empty()) {
      if (absl::Status s = arrays(spec->validation_x, spec->validation_y, &d.test); !s.ok()) {
        return s;
      }
    }
  }
  if (spec->validation_split > 0) {
    // The last fraction of the examples, as Keras's validation_split takes it.
    const int64_t n = d.train.size();
    const auto held = static_cast<int64_t>(static_cast<double>(n) * spec->validation_split);
    const int64_t keep = n - held, width = d.train.example_size();
    Shape ts = d.train.images.shape(), vs = ts;
    ts[0] = keep;
    vs[0] = held;
    const float* p = d.train.images.data();
    d.test.images = Tensor(vs, std::vector<float>(p + keep * width, p + n * width));
    d.test.labels.assign(d.train.labels.begin() + keep, d.train.labels.end());
    d.train.images = Tensor(ts, std::vector<float>(p, p + keep * width));
    d.train.labels.resize(static_cast<size_t>(keep));
  }
  d.corrupt_records_skipped = skipped;
  d.train_sharded = sharded;
  return d;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> MakeModel(const TrainerConfig& c) {
  absl::StatusOr<std::unique_ptr<Model>> m = BuildModel(c.model, c.seed);
  if (!m.ok() || c.initial_weights.empty()) return m;
  if (absl::Status s = LoadInitialWeights(**m, c.initial_weights); !s.ok()) {
    return absl::InvalidArgumentError("--initial-weights: " + std::string(s.message()));
  }
  return m;
}

absl::Status ExportTrainedModel(const TrainerConfig& c, Model& model) {
  if (c.model_dir.empty()) return absl::OkStatus();
  absl::StatusOr<ExportedModel> out = ExportModel(model, c.model_dir);
  if (absl::IsFailedPrecondition(out.status())) {
    common::LogWarning("export", "nothing written to ", c.model_dir, ": ", out.status().message());
    return absl::OkStatus();
  }
  if (!out.ok()) return out.status();
  common::LogInfo("export", "the trained model: ", absl::StrJoin(out->files, ", "));
  if (!out->onnx_skipped.empty()) {
    common::LogWarning("export", "no model.onnx: ", out->onnx_skipped);
  }
  return absl::OkStatus();
}

absl::StatusOr<Datasets> LoadDatasets(const TrainerConfig& c, FileShard shard) {
  Datasets d;
  // What one example looks like to the model: a Keras model file says; the built-in models
  // take Fashion-MNIST's images.
  Shape example{1, 28, 28};
  int64_t classes = 10, vocabulary = 0;
  if (!IsBuiltinModel(c.model)) {
    absl::StatusOr<std::unique_ptr<Model>> m = BuildModel(c.model, c.seed);
    if (!m.ok()) return m.status();
    example = (*m)->example_shape();
    classes = (*m)->classes();
    vocabulary = (*m)->vocabulary();
  }
  if (c.dataset == "spec") {
    absl::StatusOr<Datasets> loaded = LoadSpecDatasets(c, example, classes, shard);
    if (!loaded.ok()) return loaded.status();
    d = std::move(*loaded);
  } else if (c.dataset == "synthetic") {
    const auto k = static_cast<int32_t>(classes);
    const int64_t test_size = std::max<int64_t>(c.synthetic_size / 5, 1);
    if (vocabulary > 0) {  // token ids for a model that embeds them
      d.train = SyntheticTokens(c.synthetic_size, c.seed, 0, example, k, vocabulary);
      d.test = SyntheticTokens(test_size, c.seed, 1, example, k, vocabulary);
    } else {
      d.train = SyntheticDataset(c.synthetic_size, c.seed, 0, example, k);
      d.test = SyntheticDataset(test_size, c.seed, 1, example, k);
    }
  } else {
    if (NumElements(example) != 28 * 28 || classes < 10) {
      return absl::InvalidArgumentError(
          "--model " + c.model + " takes examples of shape " + ShapeString(example) + " and " +
          std::to_string(classes) +
          " classes; Fashion-MNIST has 28x28 images of 10 classes (use --dataset synthetic to "
          "train it on data of its own shape)");
    }
    absl::StatusOr<Dataset> tr = LoadFashionMnist(c.data_dir, "train");
    if (!tr.ok()) return tr.status();
    absl::StatusOr<Dataset> te = LoadFashionMnist(c.data_dir, "t10k");
    if (!te.ok()) return te.status();
    d.train = std::move(*tr);
    d.test = std::move(*te);
  }
  if (c.batch_size > d.train.size()) {
    return absl::InvalidArgumentError("--batch-size " + std::to_string(c.batch_size) +
                                      " is larger than the " + std::to_string(d.train.size()) +
                                      " training examples");
  }
  return d;
}

absl::Status RestoreCheckpoint(const CheckpointState& s, const TrainerConfig& c, Model* model,
                               Optimizer* opt) {
  if (s.model != c.model || s.optimizer != c.optimizer) {
    return absl::InvalidArgumentError("the newest checkpoint in " + c.checkpoint_dir +
                                      " is for --model=" + s.model + " --optimizer=" + s.optimizer +
                                      ", not --model=" + c.model + " --optimizer=" + c.optimizer +
                                      "; use another --checkpoint-dir");
  }
  // The parameters, then the model's kept state (moving statistics).
  std::vector<Tensor*> params = model->Params();
  for (Tensor* t : model->State()) params.push_back(t);
  std::vector<Tensor*> state = opt->State();
  if (s.params.size() != params.size() || s.optimizer_state.size() != state.size()) {
    return absl::InvalidArgumentError("the checkpoint's tensors do not match the model");
  }
  for (size_t i = 0; i < params.size(); ++i) {
    if (s.params[i].shape() != params[i]->shape()) {
      return absl::InvalidArgumentError("checkpoint tensor " + std::to_string(i) + " has shape " +
                                        ShapeString(s.params[i].shape()) + ", the model needs " +
                                        ShapeString(params[i]->shape()));
    }
    *params[i] = s.params[i];
  }
  for (size_t i = 0; i < state.size(); ++i) *state[i] = s.optimizer_state[i];
  return absl::OkStatus();
}

absl::StatusOr<std::string> SaveCheckpoint(const TrainerConfig& c, Model* model, Optimizer* opt,
                                           Position at) {
  CheckpointState s{.step = at.step,
                    .epoch = at.epoch,
                    .epoch_step = at.epoch_step,
                    .model = c.model,
                    .optimizer = c.optimizer};
  for (Tensor* t : model->Params()) s.params.push_back(*t);
  for (Tensor* t : model->State()) s.params.push_back(*t);
  for (Tensor* t : opt->State()) s.optimizer_state.push_back(*t);
  return WriteCheckpoint(c.checkpoint_dir, s, c.keep_checkpoints);
}

absl::StatusOr<std::optional<CheckpointState>> NewestCheckpoint(const TrainerConfig& c) {
  if (c.checkpoint_dir.empty()) return std::optional<CheckpointState>();
  std::vector<std::string> skipped;
  absl::StatusOr<std::optional<CheckpointState>> latest =
      LoadLatestCheckpoint(c.checkpoint_dir, &skipped);
  for (const std::string& why : skipped) {
    common::LogWarning("checkpoint", "skipping checkpoint: ", why);
  }
  return latest;
}

Evaluation Evaluate(Model* model, const Dataset& test) {
  int64_t correct = 0;
  double loss = 0;
  const int64_t ex = test.example_size();
  for (int64_t at = 0; at < test.size(); at += 1000) {
    const int64_t n = std::min<int64_t>(1000, test.size() - at);
    Shape shape = test.images.shape();
    shape[0] = n;
    Tensor x(shape);
    std::copy_n(test.images.data() + at * ex, n * ex, x.data());
    std::vector<int32_t> y(test.labels.begin() + at, test.labels.begin() + at + n);
    cpu::XentResult r = model->Evaluate(x, y);
    correct += r.correct;
    loss += r.loss * static_cast<double>(n);
  }
  const double total = static_cast<double>(std::max<int64_t>(test.size(), 1));
  return {static_cast<double>(correct) / total, loss / total};
}

}  // namespace lockstep::trainer
