#include "operator/api/object_meta.h"

#include <algorithm>
#include <limits>

#include "operator/api/json_reader.h"

namespace lockstep::api {
namespace {

using nlohmann::json;

bool IsLowerAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

OwnerReference DecodeOwnerReference(const json& j, const FieldPath& path, FieldErrors* errors) {
  ObjectReader r(j, path, errors);
  OwnerReference o;
  o.api_version = r.String("apiVersion").value_or("");
  o.kind = r.String("kind").value_or("");
  o.name = r.String("name").value_or("");
  o.uid = r.String("uid").value_or("");
  o.controller = r.Bool("controller");
  o.block_owner_deletion = r.Bool("blockOwnerDeletion");
  return o;
}

}  // namespace

ObjectMeta DecodeObjectMeta(const json& j, const FieldPath& path, FieldErrors* errors) {
  ObjectReader r(j, path, errors);
  ObjectMeta m;
  m.name = r.String("name").value_or("");
  m.generate_name = r.String("generateName").value_or("");
  m.namespace_ = r.String("namespace").value_or("");
  m.uid = r.String("uid").value_or("");
  m.resource_version = r.String("resourceVersion").value_or("");
  m.generation = r.Int("generation", 0, std::numeric_limits<int64_t>::max()).value_or(0);
  m.creation_timestamp = r.Time("creationTimestamp");
  m.deletion_timestamp = r.Time("deletionTimestamp");
  m.deletion_grace_period_seconds =
      r.Int("deletionGracePeriodSeconds", 0, std::numeric_limits<int64_t>::max());
  m.labels = r.StringMap("labels").value_or(std::map<std::string, std::string>{});
  m.annotations = r.StringMap("annotations").value_or(std::map<std::string, std::string>{});
  if (const json* refs = r.Array("ownerReferences")) {
    for (size_t i = 0; i < refs->size(); ++i) {
      m.owner_references.push_back(
          DecodeOwnerReference((*refs)[i], r.Path("ownerReferences").Index(i), errors));
    }
  }
  m.finalizers = r.StringList("finalizers").value_or(std::vector<std::string>{});
  r.CollectUnknownFields(&m.other);
  return m;
}

json EncodeObjectMeta(const ObjectMeta& m) {
  json j = m.other.is_object() ? m.other : json::object();
  auto set_string = [&j](const char* key, const std::string& v) {
    if (!v.empty()) j[key] = v;
  };
  set_string("name", m.name);
  set_string("generateName", m.generate_name);
  set_string("namespace", m.namespace_);
  set_string("uid", m.uid);
  set_string("resourceVersion", m.resource_version);
  if (m.generation != 0) j["generation"] = m.generation;
  if (m.creation_timestamp) j["creationTimestamp"] = FormatKubeTime(*m.creation_timestamp);
  if (m.deletion_timestamp) j["deletionTimestamp"] = FormatKubeTime(*m.deletion_timestamp);
  if (m.deletion_grace_period_seconds) {
    j["deletionGracePeriodSeconds"] = *m.deletion_grace_period_seconds;
  }
  if (!m.labels.empty()) j["labels"] = m.labels;
  if (!m.annotations.empty()) j["annotations"] = m.annotations;
  if (!m.owner_references.empty()) {
    json refs = json::array();
    for (const OwnerReference& o : m.owner_references) {
      json r = {{"apiVersion", o.api_version}, {"kind", o.kind}, {"name", o.name}, {"uid", o.uid}};
      if (o.controller) r["controller"] = *o.controller;
      if (o.block_owner_deletion) r["blockOwnerDeletion"] = *o.block_owner_deletion;
      refs.push_back(std::move(r));
    }
    j["ownerReferences"] = std::move(refs);
  }
  if (!m.finalizers.empty()) j["finalizers"] = m.finalizers;
  return j;
}

std::vector<std::string> CheckDns1035Label(std::string_view value) {
  std::vector<std::string> problems;
  if (value.size() > 63) problems.push_back("must be no more than 63 characters");
  bool chars_ok =
      !value.empty() && value.front() >= 'a' && value.front() <= 'z' && IsLowerAlnum(value.back());
  for (char c : value) chars_ok = chars_ok && (IsLowerAlnum(c) || c == '-');
  if (!chars_ok) {
    problems.push_back(
        "must consist of lower case alphanumeric characters or '-', start with an alphabetic "
        "character, and end with an alphanumeric character (e.g. 'my-name', or 'abc-123')");
  }
  return problems;
}

std::vector<std::string> CheckDns1123Subdomain(std::string_view value) {
  std::vector<std::string> problems;
  if (value.size() > 253) problems.push_back("must be no more than 253 characters");
  bool chars_ok = !value.empty() && IsLowerAlnum(value.front()) && IsLowerAlnum(value.back());
  for (size_t i = 0; i < value.size(); ++i) {
    char c = value[i];
    bool ok = IsLowerAlnum(c) || c == '-' || c == '.';
    // Each dot-separated label must start and end with an alphanumeric.
    if (c == '.' && i + 1 < value.size() && !IsLowerAlnum(value[i + 1])) ok = false;
    if (c == '.' && i > 0 && !IsLowerAlnum(value[i - 1])) ok = false;
    chars_ok = chars_ok && ok;
  }
  if (!chars_ok) {
    problems.push_back(
        "must consist of lower case alphanumeric characters, '-' or '.', and must start and end "
        "with an alphanumeric character (e.g. 'example.com')");
  }
  return problems;
}

std::vector<std::string> CheckDns1123Label(std::string_view value) {
  std::vector<std::string> problems;
  if (value.size() > 63) problems.push_back("must be no more than 63 characters");
  bool chars_ok = !value.empty() && IsLowerAlnum(value.front()) && IsLowerAlnum(value.back());
  for (char c : value) chars_ok = chars_ok && (IsLowerAlnum(c) || c == '-');
  if (!chars_ok) {
    problems.push_back(
        "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
        "and must start and end with an alphanumeric character (e.g. 'my-name', or '123-abc')");
  }
  return problems;
}

namespace {

bool IsAlnum(char c) { return IsLowerAlnum(c) || (c >= 'A' && c <= 'Z'); }

// [A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?
bool IsNamePart(std::string_view v) {
  if (v.empty() || !IsAlnum(v.front()) || !IsAlnum(v.back())) return false;
  return std::all_of(v.begin(), v.end(),
                     [](char c) { return IsAlnum(c) || c == '-' || c == '_' || c == '.'; });
}

}  // namespace

std::vector<std::string> CheckQualifiedName(std::string_view value) {
  std::vector<std::string> problems;
  std::string_view name = value;
  size_t slash = value.find('/');
  if (slash != std::string_view::npos) {
    std::string_view prefix = value.substr(0, slash);
    name = value.substr(slash + 1);
    if (prefix.empty()) {
      problems.push_back("prefix part must be non-empty");
    } else {
      for (const std::string& p : CheckDns1123Subdomain(prefix)) {
        problems.push_back("prefix part " + p);
      }
    }
    if (name.find('/') != std::string_view::npos) {
      problems.push_back(
          "a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must "
          "start and end with an alphanumeric character, with an optional DNS subdomain prefix "
          "and '/' (e.g. 'example.com/MyName')");
      return problems;
    }
  }
  if (name.empty()) {
    problems.push_back("name part must be non-empty");
    return problems;
  }
  if (name.size() > 63) problems.push_back("name part must be no more than 63 characters");
  if (!IsNamePart(name)) {
    problems.push_back(
        "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and "
        "end with an alphanumeric character (e.g. 'MyName', or 'my.name', or '123-abc')");
  }
  return problems;
}

std::vector<std::string> CheckLabelValue(std::string_view value) {
  std::vector<std::string> problems;
  if (value.empty()) return problems;
  if (value.size() > 63) problems.push_back("must be no more than 63 characters");
  if (!IsNamePart(value)) {
    problems.push_back(
        "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' "
        "or '.', and must start and end with an alphanumeric character (e.g. 'MyValue', or "
        "'my_value', or '12345')");
  }
  return problems;
}

std::vector<std::string> CheckPathSegmentName(std::string_view value) {
  if (value == "." || value == "..") return {"may not be '" + std::string(value) + "'"};
  for (const char* bad : {"/", "%"}) {
    if (value.find(bad) != std::string_view::npos) {
      return {"may not contain '" + std::string(bad) + "'"};
    }
  }
  return {};
}

}  // namespace lockstep::api
