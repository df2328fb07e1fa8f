#pragma once
// ObjectMeta: the Kubernetes metadata every object carries, typed for what the operator reads.
// Fields the operator does not model (managedFields, selfLink, ...) are kept verbatim in
// `other`, so a decode/encode round trip never drops what the API server sent.
// Thread-safety: plain values.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/time/time.h"
#include "operator/api/field_errors.h"

namespace lockstep::api {

struct OwnerReference {
  std::string api_version;
  std::string kind;
  std::string name;
  std::string uid;
  std::optional<bool> controller;
  std::optional<bool> block_owner_deletion;

  bool operator==(const OwnerReference&) const = default;
};

struct ObjectMeta {
  std::string name;
  std::string generate_name;
  std::string namespace_;
  std::string uid;
  std::string resource_version;
  int64_t generation = 0;
  std::optional<absl::Time> creation_timestamp;
  std::optional<absl::Time> deletion_timestamp;
  std::optional<int64_t> deletion_grace_period_seconds;
  std::map<std::string, std::string> labels;
  std::map<std::string, std::string> annotations;
  std::vector<OwnerReference> owner_references;
  std::vector<std::string> finalizers;
  nlohmann::json other = nlohmann::json::object();  // unmodelled fields, preserved

  bool operator==(const ObjectMeta&) const = default;
};

// "namespace/name", or "name" for cluster-scoped objects: how caches and work queues key an
// object.
inline std::string ObjectKey(std::string_view ns, std::string_view name) {
  if (ns.empty()) return std::string(name);
  std::string key;
  key.reserve(ns.size() + 1 + name.size());
  key.append(ns).append("/").append(name);
  return key;
}

ObjectMeta DecodeObjectMeta(const nlohmann::json& j, const FieldPath& path, FieldErrors* errors);
nlohmann::json EncodeObjectMeta(const ObjectMeta& m);

// Kubernetes name rules, each returning the reasons a value fails (empty when it is valid).
// RFC 1035 label: what Service names need (lower-case alphanumerics and '-', starting with a
// letter, ending with an alphanumeric, at most 63 characters).
std::vector<std::string> CheckDns1035Label(std::string_view value);
// RFC 1123 subdomain: what most object names need (at most 253 characters).
std::vector<std::string> CheckDns1123Subdomain(std::string_view value);
// RFC 1123 label: Namespace names (a subdomain of one label, at most 63 characters).
std::vector<std::string> CheckDns1123Label(std::string_view value);
// A qualified name, "[prefix/]name": label and annotation keys. The prefix is a DNS subdomain;
// the name at most 63 alphanumerics, '-', '_' or '.', starting and ending alphanumeric.
std::vector<std::string> CheckQualifiedName(std::string_view value);
// A label value: empty, or at most 63 alphanumerics, '-', '_' or '.', starting and ending
// alphanumeric.
std::vector<std::string> CheckLabelValue(std::string_view value);
// A path segment: what RBAC object names need (anything but ".", ".." or a '/' or '%').
std::vector<std::string> CheckPathSegmentName(std::string_view value);

}  // namespace lockstep::api
