#include "trainer/summary/training_summaries.h"

#include <cmath>
#include <filesystem>

namespace lockstep::trainer {

absl::StatusOr<std::unique_ptr<TrainingSummaries>> TrainingSummaries::Create(const std::string& dir,
                                                                             int64_t every) {
  const std::filesystem::path root(dir);
  absl::StatusOr<std::unique_ptr<EventWriter>> train =
      EventWriter::Create((root / "train").string());
  if (!train.ok()) return train.status();
  absl::StatusOr<std::unique_ptr<EventWriter>> validation =
      EventWriter::Create((root / "validation").string());
  if (!validation.ok()) return validation.status();
  return std::unique_ptr<TrainingSummaries>(
      new TrainingSummaries(std::move(*train), std::move(*validation), every > 0 ? every : 1));
}

absl::Status TrainingSummaries::Step(int64_t step, double loss, double accuracy, double lr,
                                     int64_t samples, double seconds) {
  epoch_loss_ += loss * static_cast<double>(samples);
  if (!std::isnan(accuracy)) epoch_correct_ += accuracy * static_cast<double>(samples);
  judged_ = judged_ || !std::isnan(accuracy);
  epoch_samples_ += samples;
  samples_since_ += samples;
  if (!last_seconds_) {
    // The first step's own duration is unknown (it includes start-up): the rate starts after it.
    last_seconds_ = seconds;
    samples_since_ = 0;
  }
  // The first multiple of every_ at or after the first step seen (a resumed run's too).
  if (next_record_ == 0) next_record_ = (step + every_ - 1) / every_ * every_;
  if (step < next_record_) return absl::OkStatus();
  next_record_ = (step / every_ + 1) * every_;
  std::vector<std::pair<std::string, double>> values = {{"batch_loss", loss},
                                                        {"learning_rate", lr}};
  if (!std::isnan(accuracy)) values.emplace_back("batch_accuracy", accuracy);
  if (seconds > *last_seconds_) {
    values.emplace_back("samples_per_second",
                        static_cast<double>(samples_since_) / (seconds - *last_seconds_));
  }
  last_seconds_ = seconds;
  samples_since_ = 0;
  return train_->Scalars(step, values);
}

absl::Status TrainingSummaries::Epoch(int64_t epoch, std::optional<Scores> validation) {
  if (epoch_samples_ > 0) {
    const auto n = static_cast<double>(epoch_samples_);
    std::vector<std::pair<std::string, double>> values = {{"epoch_loss", epoch_loss_ / n}};
    if (judged_) values.emplace_back("epoch_accuracy", epoch_correct_ / n);
    if (absl::Status s = train_->Scalars(epoch, values); !s.ok()) return s;
  }
  epoch_loss_ = epoch_correct_ = 0;
  epoch_samples_ = 0;
  if (validation) {
    std::vector<std::pair<std::string, double>> values = {{"epoch_loss", validation->loss}};
    if (!std::isnan(validation->accuracy)) {
      values.emplace_back("epoch_accuracy", validation->accuracy);
    }
    if (absl::Status s = validation_->Scalars(epoch, values); !s.ok()) return s;
  }
  if (absl::Status s = train_->Flush(); !s.ok()) return s;
  return validation_->Flush();
}

absl::Status TrainingSummaries::Close() {
  absl::Status s = train_->Close();
  absl::Status v = validation_->Close();
  return s.ok() ? v : s;
}

}  // namespace lockstep::trainer
