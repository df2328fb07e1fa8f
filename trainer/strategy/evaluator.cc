#include "trainer/strategy/evaluator.h"

#include <cmath>
#include <thread>

#include "common/log.h"
#include "trainer/data/batcher.h"
#include "trainer/strategy/parameter_server.h"
#include "trainer/summary/event_writer.h"

namespace lockstep::trainer {

absl::StatusOr<TrainResult> RunEvaluator(const TrainerConfig& c, ProgressTracker* progress,
                                         const std::atomic<bool>* stop, absl::Duration poll) {
  if (c.checkpoint_dir.empty()) {
    return absl::InvalidArgumentError(
        "the evaluator needs --checkpoint-dir (the one the "
        "training tasks write)");
  }
  absl::StatusOr<Datasets> data = LoadDatasets(c);
  if (!data.ok()) return data.status();
  if (data->test.size() == 0) {
    return absl::InvalidArgumentError(
        "the evaluator needs validation data (the data spec's validation_files or "
        "validation_split)");
  }
  absl::StatusOr<std::unique_ptr<Model>> model = BuildConfiguredModel(c);
  if (!model.ok()) return model.status();
  // The last step of the run being evaluated.
  int64_t total = 0;
  if (c.strategy == Strategy::kParameterServer) {
    total = PsTotalSteps(c, data->train.size(), std::max(TrainingTasks(c), 1));
  } else {
    const int64_t per_epoch = data->train.size() / c.batch_size;
    total = c.steps ? *c.steps : c.epochs * per_epoch;
  }
  if (progress) progress->SetTotalSteps(total);
  common::LogInfo("evaluator", "watching ", c.checkpoint_dir, " until step ", total);
  // Its own TensorBoard run: each checkpoint's scores at the checkpoint's step.
  std::unique_ptr<EventWriter> events;
  if (!c.tensorboard_dir.empty()) {
    absl::StatusOr<std::unique_ptr<EventWriter>> w =
        EventWriter::Create(c.tensorboard_dir + "/evaluator");
    if (!w.ok()) return w.status();
    events = std::move(*w);
  }
  TrainResult result;
  int64_t last = -1;
  while (!stop->load()) {
    std::vector<std::string> skipped;
    absl::StatusOr<std::optional<CheckpointState>> ck =
        LoadLatestCheckpoint(c.checkpoint_dir, &skipped, last);
    if (ck.ok() && ck->has_value() && (*ck)->step > last) {
      const CheckpointState& s = **ck;
      // The parameters, and the kept state (moving statistics) when the checkpoint has it.
      std::vector<Tensor*> params = (*model)->Params();
      const size_t trained = params.size();
      for (Tensor* t : (*model)->State()) params.push_back(t);
      if (s.model != c.model || (s.params.size() != trained && s.params.size() != params.size())) {
        return absl::InvalidArgumentError("checkpoint for --model=" + s.model + ", evaluating " +
                                          c.model);
      }
      for (size_t i = 0; i < s.params.size(); ++i) *params[i] = s.params[i];
      Evaluation e = Evaluate(model->get(), data->test, EvalBatchSize(c));
      std::cout << "evaluation: step " << s.step << " test accuracy " << e.accuracy << " loss "
                << e.loss << std::endl;
      if (progress) {
        progress->Step(s.step, s.epoch, e.loss, e.accuracy, 0, MonotonicSeconds());
        progress->Checkpointed(s.step);
      }
      if (events != nullptr) {
        absl::Status w = events->Scalars(
            s.step,
            std::isnan(e.accuracy)
                ? std::vector<std::pair<std::string, double>>{{"evaluation_loss_vs_iterations",
                                                               e.loss}}
                : std::vector<std::pair<std::string, double>>{
                      {"evaluation_loss_vs_iterations", e.loss},
                      {"evaluation_accuracy_vs_iterations", e.accuracy}});
        if (w.ok()) w = events->Flush();
        if (!w.ok()) {
          common::LogWarning("tensorboard", "no more TensorBoard events: ", w.message());
          events.reset();
        }
      }
      last = s.step;
      result = {
          .steps = s.step, .evaluated = true, .test_accuracy = e.accuracy, .test_loss = e.loss};
      if (s.step >= total) return result;
    }
    for (absl::Time until = absl::Now() + poll; absl::Now() < until && !stop->load();) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  return absl::CancelledError("evaluator stopped by SIGTERM");
}

}  // namespace lockstep::trainer
