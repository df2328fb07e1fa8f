#include "trainer/strategy/session.h"

#include <chrono>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/log.h"
#include "trainer/data/csv.h"
#include "trainer/data/images.h"
#include "trainer/data/numpy.h"
#include "trainer/data/tfrecord_dataset.h"
#include "trainer/graph/memory.h"
#include "trainer/model/fit_data.h"
#include "trainer/model/graph_model.h"
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
// of the training examples held out; each fitted to the model's inputs and outputs (FitToModel).
absl::StatusOr<Datasets> LoadSpecDatasets(const TrainerConfig& c,
                                          const std::vector<ModelInput>& model_inputs,
                                          const std::vector<ModelOutput>& model_outputs,
                                          FileShard shard) {
  absl::StatusOr<DataSpec> spec = LoadDataSpec(c.data_spec);
  if (!spec.ok()) return spec.status();
  const Shape example = model_inputs[0].shape;
  int64_t skipped = 0;   // corrupt TFRecord records (skip_corrupt)
  bool sharded = false;  // the training files split by file (FileShard)
  DataSources sources{.target_is_input = spec->target_is_input, .input_scale = spec->input_scale};
  auto feeds_of = [](const auto& feeds, std::vector<std::string>* out) {
    out->clear();
    for (const auto& f : feeds) out->push_back(f.feeds);
  };
  // Fits the examples to the model; `what` names the source.
  auto fit = [&](Dataset& d, const std::string& what) -> absl::Status {
    sources.what = what;
    if (absl::Status s = FitToModel(model_inputs, model_outputs, sources, &d); !s.ok()) {
      return absl::Status(s.code(), "--data-spec " + c.data_spec + ": " + std::string(s.message()));
    }
    return absl::OkStatus();
  };
  if (spec->format == DataFormat::kTfRecord) {
    feeds_of(spec->input_features, &sources.input_names);
    feeds_of(spec->label_features, &sources.target_names);
  } else if (spec->format == DataFormat::kCsv) {
    feeds_of(spec->input_columns, &sources.input_names);
    feeds_of(spec->label_columns, &sources.target_names);
  } else if (spec->format == DataFormat::kNumpy) {
    feeds_of(spec->x, &sources.input_names);
    feeds_of(spec->y, &sources.target_names);
  }
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
  auto arrays = [&](const std::vector<Feeds<std::string>>& x,
                    const std::vector<Feeds<std::string>>& y, const std::string& w,
                    Dataset* out) -> absl::Status {
    std::vector<std::string> xs, ys;
    for (const auto& f : x) xs.push_back(f.what);
    for (const auto& f : y) ys.push_back(f.what);
    absl::StatusOr<Dataset> loaded = LoadNumpyDataset(xs, ys, w);
    if (!loaded.ok()) return loaded.status();
    common::LogInfo("data", loaded->size(), " examples from ", absl::StrJoin(xs, ", "),
                    ys.empty() ? "" : " and " + absl::StrJoin(ys, ", "));
    *out = std::move(*loaded);
    return fit(*out, xs[0]);
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
    if (model_inputs.size() != 1 || (!hwc && !chw)) {
      return absl::InvalidArgumentError("--model " + c.model + " takes " + ShapeString(example) +
                                        (model_inputs.size() != 1 ? " and more inputs" : "") +
                                        "; images need one input [height, width, 1 or 3 channels]");
    }
    const int64_t h = hwc ? example[0] : example[1], w = hwc ? example[1] : example[2];
    absl::StatusOr<Dataset> loaded = LoadImageFolder(dir, h, w, hwc ? example[2] : 1, names);
    if (!loaded.ok()) return loaded.status();
    common::LogInfo("data", loaded->size(), " images of ", names->size(), " classes (",
                    absl::StrJoin(*names, ", "), ") from ", dir);
    *out = std::move(*loaded);
    if (spec->target_is_input) out->targets.clear();
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
    if (absl::Status s = arrays(spec->x, spec->y, spec->sample_weight, &d.train); !s.ok()) return s;
    if (!spec->validation_x.empty()) {
      if (absl::Status s = arrays(spec->validation_x, spec->validation_y,
                                  spec->validation_sample_weight, &d.test);
          !s.ok()) {
        return s;
      }
    }
  }
  if (spec->validation_split > 0) {
    // The last fraction of the examples, as Keras's validation_split takes it.
    const int64_t n = d.train.size();
    const auto held = static_cast<int64_t>(static_cast<double>(n) * spec->validation_split);
    d.test = Rows(d.train, n - held, held);
    d.train = Rows(d.train, 0, n - held);
  }
  d.corrupt_records_skipped = skipped;
  d.train_sharded = sharded;
  return d;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> BuildConfiguredModel(const TrainerConfig& c) {
  // Synthetic data can take any length: an open axis gets 32 unless told.
  const int64_t open = c.open_axis_size > 0 ? c.open_axis_size : c.dataset == "synthetic" ? 32 : 0;
  return BuildModel(c.model, c.seed, c.loss, open);
}

absl::StatusOr<std::unique_ptr<Model>> MakeModel(const TrainerConfig& c) {
  absl::StatusOr<std::unique_ptr<Model>> m = BuildConfiguredModel(c);
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

namespace {

// A model file's training step against the memory this machine has: the weights with their
// gradients and optimizer slots for each replica of this process, and the activations of the
// batch. A model or batch that cannot fit is refused here, by size, not killed later.
absl::Status CheckStepMemory(const TrainerConfig& c, GraphModel& g) {
  const int64_t replicas =
      c.strategy == Strategy::kMirrored || c.strategy == Strategy::kCentralStorage
          ? std::max(c.replicas, 1)
          : 1;
  const GraphModel::StepMemory need = g.TrainingStepMemory(c.batch_size);
  const double total = need.weights * static_cast<double>(replicas) + need.activations;
  const int64_t available = graph::AvailableMemoryBytes();
  if (available >= 0 && total > static_cast<double>(available)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--model ", c.model, " at --batch-size ", c.batch_size, " needs about ",
        graph::Bytes(total), " for a training step (weights with their gradients and ",
        "optimizer slots ", graph::Bytes(need.weights), replicas > 1 ? " per replica" : "",
        ", activations ", graph::Bytes(need.activations), "); this machine has ",
        graph::Bytes(static_cast<double>(available)), " available: lower --batch-size"));
  }
  common::LogInfo("model", "a training step at batch ", c.batch_size, " needs about ",
                  graph::Bytes(total), " (", graph::Bytes(static_cast<double>(available)),
                  " available)");
  return absl::OkStatus();
}

// What --model takes and gives, read from the model built from it, whose step is checked
// against memory and whose losses are logged with their reasons.
absl::Status ModelSignature(const TrainerConfig& c, std::vector<ModelInput>* inputs,
                            std::vector<ModelOutput>* outputs) {
  absl::StatusOr<std::unique_ptr<Model>> m = BuildConfiguredModel(c);
  if (!m.ok()) return m.status();
  *inputs = (*m)->inputs();
  *outputs = (*m)->outputs();
  auto* g = dynamic_cast<GraphModel*>(m->get());
  if (g == nullptr) return absl::OkStatus();
  if (absl::Status s = CheckStepMemory(c, *g); !s.ok()) return s;
  for (size_t k = 0; k < outputs->size(); ++k) {
    const ModelOutput& o = (*outputs)[k];
    common::LogInfo("model", "output '", o.name, "' ", ShapeString(o.shape), " trains with ",
                    graph::LossName(o.loss), o.loss.from_logits ? " (from logits)" : "",
                    o.loss_weight != 1.0f ? absl::StrCat(", weight ", o.loss_weight) : "", ": ",
                    g->loss_reasons()[k]);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Datasets> LoadDatasets(const TrainerConfig& c, FileShard shard) {
  Datasets d;
  std::vector<ModelInput> inputs;
  std::vector<ModelOutput> outputs;
  if (absl::Status s = ModelSignature(c, &inputs, &outputs); !s.ok()) return s;
  if (c.dataset == "spec") {
    absl::StatusOr<Datasets> loaded = LoadSpecDatasets(c, inputs, outputs, shard);
    if (!loaded.ok()) return loaded.status();
    d = std::move(*loaded);
  } else if (c.dataset == "synthetic") {
    const SyntheticSignature sig = SyntheticFor(inputs, outputs);
    const int64_t test_size = std::max<int64_t>(c.synthetic_size / 5, 1);
    d.train = SyntheticDataset(c.synthetic_size, c.seed, 0, sig);
    d.test = SyntheticDataset(test_size, c.seed, 1, sig);
  } else {
    const Shape example = inputs[0].shape;
    const int64_t classes = Classes(outputs[0]);
    if (inputs.size() != 1 || outputs.size() != 1 || NumElements(example) != 28 * 28 ||
        classes < 10 || outputs[0].shape.size() != 1) {
      return absl::InvalidArgumentError(
          "--model " + c.model + " takes " + std::to_string(inputs.size()) +
          " input(s), the first of shape " + ShapeString(example) + ", and gives " +
          std::to_string(outputs.size()) + " output(s), the first of shape " +
          ShapeString(outputs[0].shape) +
          "; Fashion-MNIST has 28x28 images of 10 classes (use --dataset synthetic to "
          "train it on data of its own shape, or --data-spec for your data)");
    }
    absl::StatusOr<Dataset> tr = LoadFashionMnist(c.data_dir, "train");
    if (!tr.ok()) return tr.status();
    absl::StatusOr<Dataset> te = LoadFashionMnist(c.data_dir, "t10k");
    if (!te.ok()) return te.status();
    d.train = std::move(*tr);
    d.test = std::move(*te);
    for (Dataset* s : {&d.train, &d.test}) {
      if (absl::Status st = FitToModel(inputs, outputs, {.what = c.data_dir}, s); !st.ok()) {
        return st;
      }
    }
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

int64_t EvalBatchSize(const TrainerConfig& c) {
  return c.eval_batch_size > 0 ? c.eval_batch_size : c.batch_size;
}

Evaluation Evaluate(Model* model, const Dataset& test, int64_t batch) {
  EvaluationSum sum;
  batch = std::max<int64_t>(batch, 1);
  for (int64_t at = 0; at < test.size(); at += batch) {
    const int64_t n = std::min<int64_t>(batch, test.size() - at);
    sum.Add(model->Evaluate(Rows(test, at, n)), n);
  }
  return sum.Result();
}

double Accuracy(double correct, double judged) {
  return judged > 0 ? correct / judged : std::numeric_limits<double>::quiet_NaN();
}

void EvaluationSum::Add(const StepResult& r, int64_t n) {
  loss += r.loss * static_cast<double>(n);
  correct += r.correct;
  judged += r.judged;
  examples += n;
}

Evaluation EvaluationSum::Result() const {
  return {.accuracy = Accuracy(static_cast<double>(correct), static_cast<double>(judged)),
          .loss = examples > 0 ? loss / static_cast<double>(examples) : 0.0};
}

}  // namespace lockstep::trainer
