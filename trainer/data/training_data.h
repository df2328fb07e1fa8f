#pragma once
// The examples a run trains and evaluates on, fitted to the model's inputs and outputs
// (model/fit_data.h): Fashion-MNIST from --data-dir, the synthetic set, or the data spec's
// (TFRecord, CSV, NumPy arrays or an image folder; its validation files, or the last
// validation_split of the training examples held out, as Keras takes it). --batch-size is
// checked against the training examples.
// It reads the model's signature, so it is built with the strategies (lockstep_trainer_program),
// above the format readers of this folder.
// Thread-safety: plain functions.

#include <vector>

#include "absl/status/statusor.h"
#include "trainer/config/trainer_config.h"
#include "trainer/data/dataset.h"
#include "trainer/data/files.h"
#include "trainer/model/model.h"

namespace lockstep::trainer {

struct Datasets {
  Dataset train;
  Dataset test;
  int64_t corrupt_records_skipped = 0;   // TFRecord records skipped under skip_corrupt
  int64_t corrupt_bytes_unreadable = 0;  // past a corrupt TFRecord length (the rest of a file)
  // `train` is this worker's files only (FileShard): its batches are all its own, and the
  // workers agree on the steps of an epoch.
  bool train_sharded = false;
};

// `shard`: this worker of a multi-worker group, whose TFRecord and CSV training files are split
// by file when there are at least as many as workers and no validation_split (the validation
// files are read whole: the chief evaluates them).
absl::StatusOr<Datasets> LoadTrainingData(const TrainerConfig& c,
                                          const std::vector<ModelInput>& inputs,
                                          const std::vector<ModelOutput>& outputs,
                                          FileShard shard = {});

}  // namespace lockstep::trainer
