#pragma once
// The built-in models: --model=mlp, cnn and mlp-large name Keras model configs embedded in the
// binary (the files examples/models/<name>.json, built into it), which load and train as any
// model file does.
//   mlp:       Flatten, Dense 256 relu, Dense 256 relu, Dense 10 (logits)
//   cnn:       Conv2D 32 3x3 relu, MaxPooling2D 2, Conv2D 64 3x3 relu, MaxPooling2D 2, Flatten,
//              Dense 128 relu, Dense 10 (logits)
//   mlp-large: Flatten, Dense 8192 relu x3, Dense 10 (141M parameters; the GPU benchmark's
//              GEMM-bound model)
// Each takes 28x28x1 images (Fashion-MNIST's) and is trained with sparse categorical
// cross-entropy from logits unless --loss says otherwise.
// Thread-safety: pure functions.

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace lockstep::trainer {

bool IsBuiltinModel(const std::string& name);
// "mlp, cnn, mlp-large".
std::string BuiltinModelNames();
// The model document --model names: a built-in model's embedded config, or the Keras model
// file at `name_or_path` (keras::ReadJsonFile: JSON, a .keras archive or TF.js). A name that is
// neither a built-in model nor a path (no '/', no ".json" or ".keras") is InvalidArgument
// naming the built-in models.
absl::StatusOr<nlohmann::json> ReadModelDocument(const std::string& name_or_path);

// The embedded configs, generated into builtin_configs.cc by trainer/CMakeLists.txt.
struct BuiltinConfig {
  std::string_view name;
  std::string_view json;
};
extern const BuiltinConfig kBuiltinConfigs[];
extern const size_t kBuiltinConfigCount;

}  // namespace lockstep::trainer
