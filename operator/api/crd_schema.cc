#include "operator/api/crd_schema.h"

#include <algorithm>

#include <cmath>
#include <regex>
#include <set>

#include "common/str_util.h"
#include "operator/api/cel_rules.h"
#include "operator/api/json_reader.h"

namespace lockstep::api {
namespace {

using nlohmann::json;

const std::set<std::string, std::less<>> kKeywords = {"type",
                                                      "format",
                                                      "title",
                                                      "description",
                                                      "properties",
                                                      "additionalProperties",
                                                      "items",
                                                      "required",
                                                      "enum",
                                                      "default",
                                                      "minimum",
                                                      "maximum",
                                                      "exclusiveMinimum",
                                                      "exclusiveMaximum",
                                                      "multipleOf",
                                                      "minLength",
                                                      "maxLength",
                                                      "pattern",
                                                      "minItems",
                                                      "maxItems",
                                                      "uniqueItems",
                                                      "minProperties",
                                                      "maxProperties",
                                                      "nullable",
                                                      "example",
                                                      "externalDocs",
                                                      "allOf",
                                                      "anyOf",
                                                      "oneOf",
                                                      "not",
                                                      "x-kubernetes-preserve-unknown-fields",
                                                      "x-kubernetes-int-or-string",
                                                      "x-kubernetes-embedded-resource",
                                                      "x-kubernetes-list-type",
                                                      "x-kubernetes-list-map-keys",
                                                      "x-kubernetes-map-type",
                                                      "x-kubernetes-validations"};
const std::set<std::string, std::less<>> kTypes = {"object",  "array",  "string",
                                                   "integer", "number", "boolean"};
// Inside logical junctors a structural schema may only constrain values, never shape them.
const std::vector<std::string_view> kForbiddenInJunctors = {
    "type", "default", "additionalProperties", "nullable", "description"};

bool Flag(const json& schema, std::string_view key) {
  auto it = schema.find(key);
  return it != schema.end() && it->is_boolean() && it->get<bool>();
}

std::string TypeOf(const json& schema) {
  auto it = schema.find("type");
  return it != schema.end() && it->is_string() ? it->get<std::string>() : std::string();
}

bool PreservesUnknown(const json& schema) {
  return Flag(schema, "x-kubernetes-preserve-unknown-fields");
}

// x-kubernetes-int-or-string's own form, which structural schemas allow:
// anyOf: [{type: integer}, {type: string}].
bool IsIntOrStringAnyOf(const json& branches) {
  if (!branches.is_array() || branches.size() != 2) return false;
  std::vector<std::string> types;
  for (const json& b : branches) {
    if (!b.is_object() || b.size() != 1) return false;
    types.push_back(TypeOf(b));
  }
  std::sort(types.begin(), types.end());
  return types == std::vector<std::string>{"integer", "string"};
}

void CheckJunctors(const json& schema, const FieldPath& path, FieldErrors* errors) {
  for (std::string_view junctor : {"allOf", "anyOf", "oneOf", "not"}) {
    auto it = schema.find(junctor);
    if (it == schema.end()) continue;
    if (junctor == "anyOf" && Flag(schema, "x-kubernetes-int-or-string") &&
        IsIntOrStringAnyOf(*it)) {
      continue;
    }
    std::vector<std::pair<const json*, FieldPath>> branches;
    if (it->is_array()) {
      for (size_t i = 0; i < it->size(); ++i)
        branches.emplace_back(&(*it)[i], path.Child(junctor).Index(i));
    } else {
      branches.emplace_back(&*it, path.Child(junctor));
    }
    for (const auto& [branch, bpath] : branches) {
      if (!branch->is_object()) continue;
      for (std::string_view key : kForbiddenInJunctors) {
        if (branch->contains(key)) {
          errors->push_back(
              Forbidden(bpath.Child(key), "must not be used inside " + std::string(junctor)));
        }
      }
    }
  }
}

void CheckNode(const json& schema, const FieldPath& path, bool is_root, bool in_metadata,
               FieldErrors* errors) {
  if (!schema.is_object()) {
    errors->push_back(Invalid(path, RenderValue(schema), "a schema must be an object"));
    return;
  }
  for (const auto& [key, value] : schema.items()) {
    if (!kKeywords.contains(key)) {
      errors->push_back({FieldErrorType::kUnknownField, path.Child(key).str(), "",
                         "not an OpenAPI v3 schema keyword"});
    }
  }
  const std::string type = TypeOf(schema);
  const bool exempt = PreservesUnknown(schema) || Flag(schema, "x-kubernetes-int-or-string");
  if (type.empty() && !exempt) {
    errors->push_back(Required(path.Child("type"), is_root
                                                       ? "must not be empty at the root"
                                                       : "must not be empty for specified fields"));
  } else if (!type.empty() && !kTypes.contains(type)) {
    errors->push_back(Invalid(path.Child("type"), QuoteJson(type), "not an OpenAPI type"));
  }
  if (is_root && type != "object") {
    errors->push_back(Invalid(path.Child("type"), QuoteJson(type), "the root must be an object"));
  }
  if (auto it = schema.find("x-kubernetes-preserve-unknown-fields");
      it != schema.end() && !Flag(schema, "x-kubernetes-preserve-unknown-fields")) {
    errors->push_back(Invalid(path.Child("x-kubernetes-preserve-unknown-fields"), RenderValue(*it),
                              "must be true or undefined"));
  }
  if (schema.contains("properties") && schema.contains("additionalProperties")) {
    errors->push_back(Forbidden(path.Child("additionalProperties"),
                                "additionalProperties and properties are mutually exclusive"));
  }
  if (type == "array" && !schema.contains("items")) {
    errors->push_back(Required(path.Child("items"), "must be specified for arrays"));
  }
  CheckJunctors(schema, path, errors);
  if (auto it = schema.find("enum"); it != schema.end()) {
    if (!it->is_array() || it->empty()) {
      errors->push_back(Invalid(path.Child("enum"), RenderValue(*it), "must be a non-empty list"));
    } else {
      json without_enum = schema;
      without_enum.erase("enum");
      without_enum.erase("default");
      for (size_t i = 0; i < it->size(); ++i) {
        FieldErrors e = ValidateAgainstSchema(without_enum, (*it)[i], path.Child("enum").Index(i));
        errors->insert(errors->end(), e.begin(), e.end());
      }
    }
  }
  if (auto it = schema.find("default"); it != schema.end()) {
    if (in_metadata) {
      errors->push_back(Forbidden(path.Child("default"), "defaults are not allowed in metadata"));
    }
    json defaulted = *it;
    std::vector<std::string> pruned = PruneUnknownFields(schema, &defaulted, false);
    for (const std::string& p : pruned) {
      errors->push_back(Invalid(path.Child("default").Child(p), "",
                                "a default must not contain fields the schema prunes"));
    }
    FieldErrors e = ValidateAgainstSchema(schema, *it, path.Child("default"));
    errors->insert(errors->end(), e.begin(), e.end());
  }
  if (auto it = schema.find("properties"); it != schema.end()) {
    if (!it->is_object()) {
      errors->push_back(
          Invalid(path.Child("properties"), RenderValue(*it), "must be a map of schemas"));
    } else {
      for (const auto& [name, sub] : it->items()) {
        bool metadata = in_metadata || (is_root && name == "metadata");
        if (is_root && name == "metadata" && sub.is_object() && sub.contains("properties")) {
          for (const auto& [field, unused] : sub["properties"].items()) {
            if (field != "name" && field != "generateName") {
              errors->push_back(
                  Forbidden(path.Child("properties").Key(name).Child("properties").Key(field),
                            "only name and generateName may be specified in metadata"));
            }
          }
        }
        CheckNode(sub, path.Child("properties").Key(name), false, metadata, errors);
      }
    }
  }
  if (auto it = schema.find("additionalProperties"); it != schema.end() && !it->is_boolean()) {
    CheckNode(*it, path.Child("additionalProperties"), false, in_metadata, errors);
  }
  if (auto it = schema.find("items"); it != schema.end()) {
    if (it->is_array()) {
      errors->push_back(Forbidden(path.Child("items"), "must be a schema, not a list of schemas"));
    } else {
      CheckNode(*it, path.Child("items"), false, in_metadata, errors);
    }
  }
  if (auto it = schema.find("required"); it != schema.end()) {
    if (!it->is_array())
      errors->push_back(
          Invalid(path.Child("required"), RenderValue(*it), "must be a list of field names"));
  }
}

bool MatchesType(const json& schema, const json& value) {
  if (Flag(schema, "x-kubernetes-int-or-string"))
    return value.is_number_integer() || value.is_string();
  const std::string type = TypeOf(schema);
  if (type.empty()) return true;
  if (type == "object") return value.is_object();
  if (type == "array") return value.is_array();
  if (type == "string") return value.is_string();
  if (type == "boolean") return value.is_boolean();
  if (type == "number") return value.is_number();
  if (type == "integer") {
    if (value.is_number_integer()) return true;
    if (!value.is_number_float()) return false;
    double d = value.get<double>();
    return std::isfinite(d) && std::trunc(d) == d;
  }
  return false;
}

std::optional<double> NumberAt(const json& schema, std::string_view key) {
  auto it = schema.find(key);
  if (it == schema.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}

std::string Num(double d) { return RenderValue(json(d)); }

}  // namespace

FieldErrors CheckStructuralSchema(const json& schema, const FieldPath& path) {
  FieldErrors errors;
  CheckNode(schema, path, true, false, &errors);
  return errors;
}

void ApplySchemaDefaults(const json& schema, json* value) {
  if (!schema.is_object()) return;
  if (value->is_object()) {
    auto props = schema.find("properties");
    if (props != schema.end() && props->is_object()) {
      for (const auto& [name, sub] : props->items()) {
        auto def = sub.find("default");
        if (def == sub.end()) continue;
        auto it = value->find(name);
        if (it == value->end() || (it->is_null() && !Flag(sub, "nullable"))) (*value)[name] = *def;
      }
      for (auto& [name, v] : value->items()) {
        auto sub = props->find(name);
        if (sub != props->end()) ApplySchemaDefaults(*sub, &v);
      }
    }
    auto additional = schema.find("additionalProperties");
    if (additional != schema.end() && additional->is_object()) {
      for (auto& [name, v] : value->items()) ApplySchemaDefaults(*additional, &v);
    }
  } else if (value->is_array()) {
    auto items = schema.find("items");
    if (items != schema.end()) {
      for (json& v : *value) ApplySchemaDefaults(*items, &v);
    }
  }
}

std::vector<std::string> PruneUnknownFields(const json& schema, json* value, bool is_root) {
  std::vector<std::string> pruned;
  if (!schema.is_object()) return pruned;
  if (value->is_object()) {
    auto props = schema.find("properties");
    auto additional = schema.find("additionalProperties");
    const bool has_additional =
        additional != schema.end() &&
        (additional->is_object() || (additional->is_boolean() && additional->get<bool>()));
    std::vector<std::string> remove;
    for (auto& [name, v] : value->items()) {
      if (is_root && (name == "apiVersion" || name == "kind" || name == "metadata")) continue;
      if (props != schema.end() && props->contains(name)) {
        for (std::string& p : PruneUnknownFields((*props)[name], &v, false))
          pruned.push_back(name + "." + p);
      } else if (has_additional) {
        if (additional->is_object()) {
          for (std::string& p : PruneUnknownFields(*additional, &v, false))
            pruned.push_back(name + "." + p);
        }
      } else if (!PreservesUnknown(schema)) {
        remove.push_back(name);
      }
    }
    for (const std::string& name : remove) {
      value->erase(name);
      pruned.push_back(name);
    }
  } else if (value->is_array()) {
    auto items = schema.find("items");
    if (items != schema.end()) {
      for (size_t i = 0; i < value->size(); ++i) {
        for (std::string& p : PruneUnknownFields(*items, &(*value)[i], false)) {
          pruned.push_back(StrCat("[", i, "].", p));
        }
      }
    }
  }
  return pruned;
}

FieldErrors ValidateAgainstSchema(const json& schema, const json& value, const FieldPath& path,
                                  const json* old) {
  FieldErrors errors;
  if (!schema.is_object()) return errors;
  if (value.is_null()) {
    if (!Flag(schema, "nullable") && !TypeOf(schema).empty()) {
      errors.push_back({FieldErrorType::kTypeInvalid, path.str(), "null",
                        StrCat("must be of type ", TypeOf(schema))});
    }
    return errors;
  }
  if (!MatchesType(schema, value)) {
    errors.push_back({FieldErrorType::kTypeInvalid, path.str(), RenderValue(value),
                      StrCat("must be of type ", TypeOf(schema))});
    return errors;
  }
  if (auto it = schema.find("enum"); it != schema.end() && it->is_array()) {
    bool found = false;
    std::vector<std::string> names;
    for (const json& e : *it) {
      found = found || e == value;
      names.push_back(e.is_string() ? e.get<std::string>() : e.dump());
    }
    if (!found) {
      std::vector<std::string_view> views(names.begin(), names.end());
      errors.push_back(NotSupported(path, RenderValue(value), views));
    }
  }
  if (value.is_number()) {
    double d = value.get<double>();
    if (auto min = NumberAt(schema, "minimum");
        min && (d < *min || (Flag(schema, "exclusiveMinimum") && d == *min))) {
      errors.push_back(Invalid(path, RenderValue(value),
                               StrCat("must be greater than or equal to ", Num(*min))));
    }
    if (auto max = NumberAt(schema, "maximum");
        max && (d > *max || (Flag(schema, "exclusiveMaximum") && d == *max))) {
      errors.push_back(
          Invalid(path, RenderValue(value), StrCat("must be less than or equal to ", Num(*max))));
    }
  }
  if (value.is_string()) {
    const std::string& s = value.get_ref<const std::string&>();
    if (auto min = NumberAt(schema, "minLength"); min && static_cast<double>(s.size()) < *min) {
      errors.push_back(Invalid(path, RenderValue(value),
                               StrCat("must be at least ", Num(*min), " characters long")));
    }
    if (auto max = NumberAt(schema, "maxLength"); max && static_cast<double>(s.size()) > *max) {
      errors.push_back(
          {FieldErrorType::kTooLong, path.str(), "", StrCat("may not be longer than ", Num(*max))});
    }
    if (auto it = schema.find("pattern"); it != schema.end() && it->is_string()) {
      try {
        if (!std::regex_search(s, std::regex(it->get<std::string>()))) {
          errors.push_back(Invalid(path, RenderValue(value),
                                   StrCat("must match the pattern ", it->get<std::string>())));
        }
      } catch (const std::regex_error&) {
        errors.push_back(Invalid(path, RenderValue(value),
                                 "the schema's pattern is not a valid regular expression"));
      }
    }
  }
  if (value.is_array()) {
    if (auto min = NumberAt(schema, "minItems"); min && static_cast<double>(value.size()) < *min) {
      errors.push_back(
          Invalid(path, RenderValue(value), StrCat("must have at least ", Num(*min), " items")));
    }
    if (auto max = NumberAt(schema, "maxItems"); max && static_cast<double>(value.size()) > *max) {
      errors.push_back({FieldErrorType::kTooMany, path.str(), std::to_string(value.size()),
                        StrCat("must have at most ", Num(*max), " items")});
    }
    if (auto items = schema.find("items"); items != schema.end()) {
      for (size_t i = 0; i < value.size(); ++i) {
        FieldErrors e = ValidateAgainstSchema(*items, value[i], path.Index(i));
        errors.insert(errors.end(), e.begin(), e.end());
      }
    }
  }
  if (value.is_object()) {
    if (auto min = NumberAt(schema, "minProperties");
        min && static_cast<double>(value.size()) < *min) {
      errors.push_back(Invalid(path, "", StrCat("must have at least ", Num(*min), " properties")));
    }
    if (auto max = NumberAt(schema, "maxProperties");
        max && static_cast<double>(value.size()) > *max) {
      errors.push_back({FieldErrorType::kTooMany, path.str(), std::to_string(value.size()),
                        StrCat("must have at most ", Num(*max), " properties")});
    }
    if (auto req = schema.find("required"); req != schema.end() && req->is_array()) {
      for (const json& name : *req) {
        if (name.is_string() && (!value.contains(name.get<std::string>()) ||
                                 value[name.get<std::string>()].is_null())) {
          errors.push_back(Required(path.Child(name.get<std::string>()), ""));
        }
      }
    }
    if (auto rules = schema.find("x-kubernetes-validations");
        rules != schema.end() && rules->is_array()) {
      for (const json& rule : *rules) {
        if (!rule.is_object() || !rule.contains("rule") || !rule["rule"].is_string()) continue;
        const std::string text = rule["rule"].get<std::string>();
        if (EvaluateKnownRule(text, value, old) == false) {
          const std::string message = rule.value("message", "");
          // As an API server reports a failed rule.
          errors.push_back(
              Invalid(path, "\"object\"", message.empty() ? "failed rule: " + text : message));
        }
      }
    }
    auto props = schema.find("properties");
    auto additional = schema.find("additionalProperties");
    for (const auto& [name, v] : value.items()) {
      const json* sub = nullptr;
      if (props != schema.end() && props->contains(name)) {
        sub = &(*props)[name];
      } else if (additional != schema.end() && additional->is_object()) {
        sub = &*additional;
      }
      if (sub == nullptr) continue;
      FieldPath child =
          props != schema.end() && props->contains(name) ? path.Child(name) : path.Key(name);
      const json* old_v =
          old != nullptr && old->is_object() && old->contains(name) ? &(*old)[name] : nullptr;
      FieldErrors e = ValidateAgainstSchema(*sub, v, child, old_v);
      errors.insert(errors.end(), e.begin(), e.end());
    }
  }
  return errors;
}

}  // namespace lockstep::api
