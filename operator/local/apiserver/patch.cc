#include "operator/local/apiserver/patch.h"

#include <optional>
#include <string>

#include "common/str_util.h"
#include "operator/api/json_reader.h"

namespace lockstep::local {
namespace {

using nlohmann::json;

// The key that identifies items of a list field in a strategic merge patch.
std::optional<std::string> MergeKey(const std::string& field) {
  static const std::pair<const char*, const char*> kKeys[] = {
      {"containers", "name"},     {"initContainers", "name"},    {"env", "name"},
      {"volumes", "name"},        {"volumeMounts", "mountPath"}, {"ports", "containerPort"},
      {"conditions", "type"},     {"imagePullSecrets", "name"},  {"hostAliases", "ip"},
      {"ownerReferences", "uid"}, {"envFrom", "prefix"},  // close enough for our uses
  };
  for (const auto& [f, key] : kKeys) {
    if (field == f) return key;
  }
  return std::nullopt;
}

json StrategicMerge(const json& original, const json& patch);

json MergeList(const json& original, const json& patch, const std::string& key) {
  json out = original.is_array() ? original : json::array();
  for (const json& item : patch) {
    if (!item.is_object() || !item.contains(key)) {
      out.push_back(item);
      continue;
    }
    auto it = std::find_if(out.begin(), out.end(), [&](const json& o) {
      return o.is_object() && o.contains(key) && o[key] == item[key];
    });
    std::string directive = api::StringAt(item, "$patch");
    if (directive == "delete") {
      if (it != out.end()) out.erase(it);
      continue;
    }
    json clean = item;
    clean.erase("$patch");
    if (it == out.end()) {
      out.push_back(StrategicMerge(json::object(), clean));
    } else {
      *it = StrategicMerge(*it, clean);
    }
  }
  return out;
}

json StrategicMerge(const json& original, const json& patch) {
  if (!patch.is_object()) return patch;
  if (api::StringAt(patch, "$patch") == "replace") {
    json out = patch;
    out.erase("$patch");
    return out;
  }
  json out = original.is_object() ? original : json::object();
  for (auto it = patch.begin(); it != patch.end(); ++it) {
    const std::string& field = it.key();
    if (field.rfind("$setElementOrder/", 0) == 0 || field == "$retainKeys" || field == "$patch") {
      continue;
    }
    if (field.rfind("$deleteFromPrimitiveList/", 0) == 0) {
      std::string target = field.substr(sizeof("$deleteFromPrimitiveList/") - 1);
      if (out.contains(target) && out[target].is_array() && it->is_array()) {
        json kept = json::array();
        for (const json& v : out[target]) {
          if (std::find(it->begin(), it->end(), v) == it->end()) kept.push_back(v);
        }
        out[target] = kept;
      }
      continue;
    }
    if (it->is_null()) {
      out.erase(field);
    } else if (it->is_array()) {
      std::optional<std::string> key = MergeKey(field);
      bool replace = std::any_of(it->begin(), it->end(), [](const json& v) {
        return v.is_object() && api::StringAt(v, "$patch") == "replace";
      });
      if (key && !replace) {
        out[field] = MergeList(out.contains(field) ? out[field] : json::array(), *it, *key);
      } else {
        json list = json::array();
        for (const json& v : *it) {
          if (!(v.is_object() && v.contains("$patch"))) list.push_back(v);
        }
        out[field] = list;
      }
    } else if (it->is_object()) {
      out[field] = StrategicMerge(out.contains(field) ? out[field] : json::object(), *it);
    } else {
      out[field] = *it;
    }
  }
  return out;
}

}  // namespace

std::optional<PatchFormat> PatchFormatOf(std::string_view content_type) {
  std::string_view type = content_type.substr(0, content_type.find(';'));
  if (type == "application/merge-patch+json") return PatchFormat::kMerge;
  if (type == "application/json-patch+json") return PatchFormat::kJson;
  if (type == "application/strategic-merge-patch+json") return PatchFormat::kStrategicMerge;
  return std::nullopt;
}

absl::StatusOr<json> ApplyPatch(PatchFormat format, const json& original, const json& patch) {
  switch (format) {
    case PatchFormat::kMerge: {
      if (!patch.is_object()) {
        return absl::InvalidArgumentError("a merge patch must be a JSON object");
      }
      json out = original;
      out.merge_patch(patch);
      return out;
    }
    case PatchFormat::kStrategicMerge:
      if (!patch.is_object()) {
        return absl::InvalidArgumentError("a strategic merge patch must be a JSON object");
      }
      return StrategicMerge(original, patch);
    case PatchFormat::kJson: {
      if (!patch.is_array()) {
        return absl::InvalidArgumentError("a JSON patch must be an array of operations");
      }
      try {
        return original.patch(patch);
      } catch (const json::other_error& e) {
        // nlohmann reports a failed "test" operation as other_error 501.
        if (e.id == 501) return absl::FailedPreconditionError(StrCat("JSON patch: ", e.what()));
        return absl::InvalidArgumentError(StrCat("JSON patch: ", e.what()));
      } catch (const json::exception& e) {
        return absl::InvalidArgumentError(StrCat("JSON patch: ", e.what()));
      }
    }
  }
  return absl::InvalidArgumentError("unknown patch format");
}

}  // namespace lockstep::local
