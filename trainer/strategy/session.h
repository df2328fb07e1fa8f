#pragma once
// What every strategy's training loop shares: the data sets (loaded by data/training_data.h),
// checkpoint save/restore against a model and optimizer, and the test-set evaluation.
// Thread-safety: plain functions; one model per thread.

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "trainer/checkpoint/checkpoint.h"
#include "trainer/config/trainer_config.h"
#include "trainer/data/dataset.h"
#include "trainer/data/training_data.h"
#include "trainer/model/model.h"
#include "trainer/optim/optimizer.h"

namespace lockstep::trainer {

// The model's data (data/training_data.h), fitted to --model's signature, whose training step
// is checked against this machine's memory first.
absl::StatusOr<Datasets> LoadDatasets(const TrainerConfig& c, FileShard shard = {});

// --model built as the config says (--loss, --open-axis-size), with the seed's weights.
absl::StatusOr<std::unique_ptr<Model>> BuildConfiguredModel(const TrainerConfig& c);
// The model a replica trains: --model with the seed's weights, then --initial-weights' when
// given (a checkpoint to resume from still wins: it is restored over them).
absl::StatusOr<std::unique_ptr<Model>> MakeModel(const TrainerConfig& c);
// The chief's export of the trained model to --model-dir (nothing without one). A built-in
// model, which has no Keras form, is a warning; a failed write is the run's error.
absl::Status ExportTrainedModel(const TrainerConfig& c, Model& model);

// The data position and step a run starts or resumes at.
struct Position {
  int64_t step = 0;
  int64_t epoch = 0;
  int64_t epoch_step = 0;
};

// Copies a checkpoint into the model and optimizer; InvalidArgument when it is for another
// model or optimizer.
absl::Status RestoreCheckpoint(const CheckpointState& s, const TrainerConfig& c, Model* model,
                               Optimizer* opt);
absl::StatusOr<std::string> SaveCheckpoint(const TrainerConfig& c, Model* model, Optimizer* opt,
                                           Position at);
// The newest valid checkpoint of --checkpoint-dir (nullopt when none, or no directory); warns
// on stderr about every newer file it skipped.
absl::StatusOr<std::optional<CheckpointState>> NewestCheckpoint(const TrainerConfig& c);

// A test set's mean loss over its examples, and accuracy over the predictions judged (NaN when
// the model judges none: every output a regression).
struct Evaluation {
  double accuracy = 0;
  double loss = 0;
};
// The batch evaluation runs at: --eval-batch-size, else --batch-size (so evaluating never needs
// more memory than a training step of one replica on the whole batch).
int64_t EvalBatchSize(const TrainerConfig& c);
// `test` evaluated `batch` examples at a time.
Evaluation Evaluate(Model* model, const Dataset& test, int64_t batch);
// Predictions right of those judged: NaN when none was (every output a regression).
double Accuracy(double correct, double judged);
// Evaluation batches' results summed, for engines that evaluate batch by batch.
struct EvaluationSum {
  double loss = 0;
  int64_t correct = 0, judged = 0, examples = 0;
  void Add(const StepResult& r, int64_t n);
  Evaluation Result() const;
};

double MonotonicSeconds();

// The tensors' values end to end, for a broadcast, and back into the same tensors.
std::vector<float> PackTensors(const std::vector<Tensor*>& ts);
void UnpackTensors(const std::vector<float>& flat, const std::vector<Tensor*>& ts);

}  // namespace lockstep::trainer
