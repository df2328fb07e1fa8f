#pragma once
// The model's files for Keras and for serving: the chief's export at the end of a run (--model-dir,
// AIP_MODEL_DIR) and the weights a run starts from (--initial-weights).
//
// The export writes, into the directory (created when missing):
//   model.keras  Keras 3's archive: config.json (the model file as given), metadata.json,
//                model.weights.h5 — `keras.saving.load_model("model.keras")`;
//   model.h5     tf.keras 2's weights layout — `model.load_weights("model.h5")` on the model
//                built from the same config;
//   model.onnx   the inference graph for serving (model/onnx_export.h), unless the model holds a
//                layer without an ONNX form (a mask): then it is skipped, and says why.
// Each file is written under a temporary name in the directory and renamed into place, so a
// reader sees the previous file or the whole new one, never a part.
// Only a model built from a Keras model file has a Keras form: a built-in model (mlp, cnn) is
// FailedPrecondition, naming the example model file to train instead.
// Thread-safety: the model must not be in use.

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/model/model.h"

namespace lockstep::trainer {

struct ExportedModel {
  std::vector<std::string> files;  // the paths written
  std::string onnx_skipped;        // why model.onnx was not written ("" when it was)
};
absl::StatusOr<ExportedModel> ExportModel(Model& model, const std::string& dir);

// Loads `path` (a .keras archive, a Keras 3 .weights.h5, a Keras 2 .h5) into the model;
// InvalidArgument naming the file, layer and weight on any mismatch (nothing is loaded then).
absl::Status LoadInitialWeights(Model& model, const std::string& path);

}  // namespace lockstep::trainer
