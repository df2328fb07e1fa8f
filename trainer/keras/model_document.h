#pragma once
// A Keras model document before it is built: reading it (a JSON file, or a .keras archive's
// config.json), its compile settings and dtype policy, and the normal form the loader
// (model_loader.h) builds from.
// Thread-safety: pure functions.

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"

namespace lockstep::trainer::keras {

// The compile settings a model document carries (TF.js's training_config, Keras 3's
// compile_config), or null.
nlohmann::json TrainingConfigOf(const nlohmann::json& doc);
// The mixed dtype policy the model's layers declare ("mixed_float16" or "mixed_bfloat16", as a
// string, or a DTypePolicy / Policy object), the first one found; "float32" when none does.
std::string DTypePolicyOf(const nlohmann::json& doc);
// Reads a JSON file, or the config.json of a .keras archive (a zip file); NotFound or
// InvalidArgument naming the path.
absl::StatusOr<nlohmann::json> ReadJsonFile(const std::string& path);
// The metrics of a compile config (`metrics`, `weighted_metrics`; strings or serialized metric
// objects, per output as lists or objects) that the trainer does not report, by name: it
// reports the loss and the accuracy (Keras's accuracy, sparse_categorical_accuracy,
// categorical_accuracy, binary_accuracy), whichever the loss makes meaningful.
std::vector<std::string> UnreportedMetrics(const nlohmann::json& training_config);
// Every layer entry ({"class_name", "config"}) of `j`, nested ones too, in the spelling the
// loader reads: Keras 2's cuDNN recurrent layers as the layers they equal, and, for a TF.js
// file (`tfjs`), camelCase config keys in Keras's snake_case.
void NormalizeModel(nlohmann::json& j, bool tfjs);
// InvalidArgument naming the layer when a declared input shape has an axis of size 0 (no
// example can have it).
absl::Status CheckDeclaredShapes(const nlohmann::json& j);

}  // namespace lockstep::trainer::keras
