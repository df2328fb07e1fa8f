#pragma once
// The data a user brings, made into what a model takes: each source matched to the model's
// input or output (by name, or by position), each input shaped as the model's input, and each
// target checked and shaped for its output's loss:
//   sparse categorical cross-entropy: a class id per output row, in [0, classes); one-hot rows
//     (the output's shape) are taken as their class ids;
//   categorical cross-entropy: one-hot (or soft) rows of the output's shape; class ids are
//     expanded to one-hot rows;
//   binary cross-entropy and the regression losses: values of the output's shape.
// Sample weights, when given, are one finite, non-negative value per example.
// And synthetic data for any model (SyntheticFor).
// Thread-safety: pure functions.

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "trainer/data/dataset.h"
#include "trainer/model/model.h"

namespace lockstep::trainer {

struct DataSources {
  // The model input (output) each of `d.inputs` (`d.targets`) feeds; empty: by position.
  std::vector<std::string> input_names, target_names;
  bool target_is_input = false;  // every output's target is the (one) input
  float input_scale = 1;
  std::string what;  // the source, for messages ("/data/train-*.tfrecord")
};

// Makes `d` the model's examples in place. InvalidArgument names the mismatch (a source for an
// input the model does not have, a shape that does not fit); DataLoss names the example whose
// target is not valid for its loss (a class id out of range, a row that is not one-hot) or
// whose sample weight is negative or not finite.
absl::Status FitToModel(const std::vector<ModelInput>& inputs,
                        const std::vector<ModelOutput>& outputs, const DataSources& sources,
                        Dataset* d);

// The synthetic data signature of a model: each input's shape (token ids where it feeds an
// Embedding), each output's target in the form its loss takes.
SyntheticSignature SyntheticFor(const std::vector<ModelInput>& inputs,
                                const std::vector<ModelOutput>& outputs);

}  // namespace lockstep::trainer
