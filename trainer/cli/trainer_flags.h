#pragma once
// The lockstep-trainer command line and environment, parsed into one TrainerConfig
// (trainer/config/trainer_config.h): the edge where every spelling becomes a typed value. Pure,
// so every flag, default and error is tested without training. Errors name the flag or
// variable.
// Thread-safety: pure functions.

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/config/trainer_config.h"

namespace lockstep::trainer {

// LOCKSTEP_TERMINATION_LOG, else /dev/termination-log (known even when the flags are bad).
std::string TerminationLogPath(const std::map<std::string, std::string>& env);

absl::StatusOr<TrainerConfig> ParseTrainerConfig(const std::vector<std::string>& args,
                                                 const std::map<std::string, std::string>& env);
std::string TrainerUsage();

// For a Keras model file: takes the optimizer, learning rate and schedule it was compiled
// with (TrainerConfig::keras_optimizer), except where flags said otherwise. Reads the file;
// InvalidArgument names an optimizer or option the trainer does not support. `warnings` (may
// be null) gets a line per compile setting the trainer reads but does not carry out (a metric
// it does not report).
absl::Status ApplyModelCompileConfig(TrainerConfig* c,
                                     std::vector<std::string>* warnings = nullptr);

}  // namespace lockstep::trainer
