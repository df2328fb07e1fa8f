#include "trainer/model/builtin_models.h"

#include "common/json_text.h"
#include "trainer/keras/model_loader.h"

namespace lockstep::trainer {

namespace {

const BuiltinConfig* Find(const std::string& name) {
  for (size_t i = 0; i < kBuiltinConfigCount; ++i) {
    if (kBuiltinConfigs[i].name == name) return &kBuiltinConfigs[i];
  }
  return nullptr;
}

bool LooksLikePath(const std::string& s) {
  return s.find('/') != std::string::npos || s.find(".json") != std::string::npos ||
         s.find(".keras") != std::string::npos;
}

}  // namespace

bool IsBuiltinModel(const std::string& name) { return Find(name) != nullptr; }

std::string BuiltinModelNames() {
  std::string out;
  for (size_t i = 0; i < kBuiltinConfigCount; ++i) {
    if (i > 0) out += ", ";
    out += kBuiltinConfigs[i].name;
  }
  return out;
}

absl::StatusOr<nlohmann::json> ReadModelDocument(const std::string& name_or_path) {
  if (const BuiltinConfig* b = Find(name_or_path); b != nullptr) {
    return common::ParseJsonText(std::string(b->json), "the built-in model " + name_or_path);
  }
  if (!LooksLikePath(name_or_path)) {
    return absl::InvalidArgumentError("unknown model \"" + name_or_path + "\" (known: " +
                                      BuiltinModelNames() + ", or a Keras model file)");
  }
  return keras::ReadJsonFile(name_or_path);
}

}  // namespace lockstep::trainer
