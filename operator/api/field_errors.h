#pragma once
// Field-level errors in the Kubernetes style: every problem found in an object names the field
// path (`spec.replicaSpecs.PS.replicas`), what kind of problem it is and, for people, why.
// Decoding and validation append to a FieldErrors list and never throw; ToStatus() turns a list
// into one InvalidArgument status whose message lists every error.
// Thread-safety: plain values.

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

namespace lockstep::api {

enum class FieldErrorType {
  kRequired,      // "Required value"
  kInvalid,       // "Invalid value: <value>"
  kTypeInvalid,   // "Invalid value: <value>: must be of type ..."
  kNotSupported,  // "Unsupported value: <value>: supported values: ..."
  kDuplicate,     // "Duplicate value: <value>"
  kTooMany,       // "Too many: <n>: must have at most <m> items"
  kTooLong,       // "Too long: ..."
  kForbidden,     // "Forbidden: ..."
  kUnknownField,  // "Unknown field"
  kNotFound,      // "Not found: <value>" (a reference to nothing)
};

struct FieldError {
  FieldErrorType type;
  std::string path;    // dotted path from the object root; list items as [i]
  std::string value;   // the offending value as JSON text, empty when not applicable
  std::string detail;  // why, for people

  // "spec.replicaSpecs.PS.replicas: Invalid value: -1: must be greater than or equal to 0"
  std::string ToString() const;
};

using FieldErrors = std::vector<FieldError>;

// Builds field paths: FieldPath("spec").Child("replicaSpecs").Child("PS").Index(0).
class FieldPath {
 public:
  FieldPath() = default;
  explicit FieldPath(std::string root) : path_(std::move(root)) {}

  FieldPath Child(std::string_view name) const;
  FieldPath Index(size_t i) const;
  FieldPath Key(std::string_view key) const;  // map entries: metrics[accuracy]
  const std::string& str() const { return path_; }

 private:
  std::string path_;
};

// Convenience constructors that render the offending value.
FieldError Required(const FieldPath& path, std::string detail);
FieldError Invalid(const FieldPath& path, std::string value_json, std::string detail);
FieldError NotSupported(const FieldPath& path, std::string value_json,
                        const std::vector<std::string_view>& supported);
FieldError Forbidden(const FieldPath& path, std::string detail);
FieldError Duplicate(const FieldPath& path, std::string value_json);
FieldError NotFound(const FieldPath& path, std::string value_json);

// OK when `errors` is empty; otherwise InvalidArgument "<what> is invalid: <e1>; <e2>; ...".
absl::Status ToStatus(std::string_view what, const FieldErrors& errors);

// Quotes and escapes a string as JSON text, for error values.
std::string QuoteJson(std::string_view s);

}  // namespace lockstep::api
