// Secrets: type Opaque by default, data keys as Kubernetes allows them, values in base64 (a
// Secret's data is bytes), stringData folded into data, and `type` as a field selector.

#include <algorithm>
#include <cctype>

#include "absl/strings/escaping.h"
#include "common/str_util.h"
#include "operator/api/json_reader.h"
#include "operator/local/apiserver/kinds/kind_strategy.h"

namespace lockstep::local {

using nlohmann::json;

namespace {

// What a ConfigMap or Secret key may be: alphanumerics, '-', '_' or '.', at most 253.
std::vector<std::string> KeyProblems(const std::string& key) {
  std::vector<std::string> problems;
  if (key.size() > 253) problems.push_back("must be no more than 253 characters");
  bool ok = !key.empty() && std::all_of(key.begin(), key.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
  });
  if (!ok) {
    problems.push_back(
        "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. "
        "'key.name', or 'KEY_NAME', or 'key-name')");
  }
  if (key == "." || key == "..") problems.push_back("must not be '.' or '..'");
  return problems;
}

class Secrets final : public KindStrategy {
 public:
  absl::Status Normalize(const ResourceType&, json& obj, bool) const override {
    if (!obj.contains("type") || obj["type"] == "") obj["type"] = "Opaque";
    // stringData is write-only: it is merged into data, as the API server's conversion does.
    if (auto string_data = obj.find("stringData"); string_data != obj.end()) {
      if (!string_data->is_object()) {
        return absl::InvalidArgumentError("Secret.stringData must be a map of strings");
      }
      json& data = obj["data"];
      if (!data.is_object()) data = json::object();
      for (auto it = string_data->begin(); it != string_data->end(); ++it) {
        if (!it->is_string()) {
          return absl::InvalidArgumentError(
              StrCat("Secret.stringData[", it.key(), "] must be a string"));
        }
        data[it.key()] = absl::Base64Escape(it->get<std::string>());
      }
      obj.erase("stringData");
    }
    if (auto data = obj.find("data"); data != obj.end() && !data->is_null()) {
      if (!data->is_object()) return absl::InvalidArgumentError("Secret.data must be a map");
      for (auto it = data->begin(); it != data->end(); ++it) {
        std::string bytes;
        if (!it->is_string() || !absl::Base64Unescape(it->get<std::string>(), &bytes)) {
          return absl::InvalidArgumentError(
              StrCat("Secret.data[", it.key(), "]: illegal base64 data"));
        }
      }
    }
    return absl::OkStatus();
  }

  api::FieldErrors Validate(const ResourceType&, const json& obj, const json*) const override {
    api::FieldErrors errors;
    const json* data = api::ObjectAt(obj, "data");
    if (!data) return errors;
    size_t total = 0;
    for (auto it = data->begin(); it != data->end(); ++it) {
      for (std::string& why : KeyProblems(it.key())) {
        errors.push_back(
            api::Invalid(api::FieldPath("data").Key(it.key()), api::QuoteJson(it.key()), why));
      }
      if (it->is_string()) total += it->get<std::string>().size() * 3 / 4;
    }
    if (total > (1 << 20)) {
      errors.push_back({api::FieldErrorType::kTooLong, "data", "",
                        StrCat("must have at most ", 1 << 20, " bytes")});
    }
    return errors;
  }

  api::FieldErrors ValidateUpdate(const ResourceType&, const json& obj,
                                  const json& old) const override {
    if (obj.value("type", json()) == old.value("type", json())) return {};
    return {api::Invalid(api::FieldPath("type"), api::RenderValue(obj.value("type", json())),
                         "field is immutable")};
  }

  std::vector<std::string> FieldLabels() const override { return {"type"}; }
};

}  // namespace

const KindStrategy& SecretStrategy() {
  static const Secrets secrets;
  return secrets;
}

}  // namespace lockstep::local
