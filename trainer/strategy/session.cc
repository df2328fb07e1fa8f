#include "trainer/strategy/session.h"

#include <chrono>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/log.h"
#include "trainer/graph/memory.h"
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
  std::vector<ModelInput> inputs;
  std::vector<ModelOutput> outputs;
  if (absl::Status s = ModelSignature(c, &inputs, &outputs); !s.ok()) return s;
  return LoadTrainingData(c, inputs, outputs, shard);
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
