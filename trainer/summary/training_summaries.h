#pragma once
// What a training run records for TensorBoard, laid out as Keras's TensorBoard callback lays
// it out: <dir>/train gets each recorded step's batch_loss, batch_accuracy, learning_rate and
// samples_per_second (x axis: the step) and each epoch's epoch_loss and epoch_accuracy (x axis:
// the epoch, as Keras writes them); <dir>/validation gets each epoch's evaluation under the same
// epoch_ tags, so TensorBoard draws training and validation on one chart.
// Thread-safety: one thread (the chief's training loop).

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "trainer/summary/event_writer.h"

namespace lockstep::trainer {

struct Scores {
  double loss = 0;
  double accuracy = 0;
};

class TrainingSummaries {
 public:
  // Creates the train and validation runs under `dir`. A step is recorded each time the step
  // count reaches a multiple of `every` (or passes one: ParameterServer's global steps jump).
  static absl::StatusOr<std::unique_ptr<TrainingSummaries>> Create(const std::string& dir,
                                                                   int64_t every);

  // Step `step` (counted from 1) trained `samples` examples with this batch loss and accuracy,
  // at `seconds` (monotonic) and learning rate `lr`. The epoch's averages accumulate.
  absl::Status Step(int64_t step, double loss, double accuracy, double lr, int64_t samples,
                    double seconds);
  // Epoch `epoch` (counted from 0) ended: its training averages, and its evaluation when given.
  // Flushes both runs.
  absl::Status Epoch(int64_t epoch, std::optional<Scores> validation);
  // Flushes and closes both runs (the end of training).
  absl::Status Close();

  const EventWriter& train() const { return *train_; }
  const EventWriter& validation() const { return *validation_; }

 private:
  TrainingSummaries(std::unique_ptr<EventWriter> train, std::unique_ptr<EventWriter> validation,
                    int64_t every)
      : train_(std::move(train)), validation_(std::move(validation)), every_(every) {}
  std::unique_ptr<EventWriter> train_, validation_;
  int64_t every_;
  // The epoch so far: sums weighted by samples.
  double epoch_loss_ = 0, epoch_correct_ = 0;
  int64_t epoch_samples_ = 0;
  bool judged_ = false;      // a step had an accuracy (not every output a regression)
  int64_t next_record_ = 0;  // the next step recorded: the next multiple of every_
  // The rate since the last recorded step.
  std::optional<double> last_seconds_;
  int64_t samples_since_ = 0;
};

}  // namespace lockstep::trainer
