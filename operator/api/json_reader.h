#pragma once
// ObjectReader decodes the fields of one JSON object into typed values without throwing. Every
// problem (wrong type, integer out of range, unsupported enum value, unknown field) becomes a
// FieldError with the field's path, so a user sees all mistakes in a manifest at once.
// JSON null counts as absent, as in Kubernetes. Thread-safety: one reader per thread.

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/time/time.h"
#include "operator/api/enum_names.h"
#include "operator/api/field_errors.h"

namespace lockstep::api {

// RFC 3339 with second precision in UTC ("2026-11-21T17:05:00Z"), as metav1.Time.
std::string FormatKubeTime(absl::Time t);
std::optional<absl::Time> ParseKubeTime(std::string_view text);

// A JSON value rendered for an error message, shortened when long.
std::string RenderValue(const nlohmann::json& v);

class ObjectReader {
 public:
  // A non-object `j` records one type error; then every getter returns nothing.
  ObjectReader(const nlohmann::json& j, FieldPath path, FieldErrors* errors);

  bool ok() const { return object_ != nullptr; }
  FieldPath Path(std::string_view key) const { return path_.Child(key); }

  // The raw value of `key`, nullptr when absent or null. Marks the key as known.
  const nlohmann::json* Get(std::string_view key);
  // Like Get, but records a type error unless the value is an object (or an array).
  const nlohmann::json* Object(std::string_view key);
  const nlohmann::json* Array(std::string_view key);

  std::optional<std::string> String(std::string_view key);
  std::optional<bool> Bool(std::string_view key);
  // Integers outside [min, max] (the C++ type's range) are errors; so are fractions.
  std::optional<int64_t> Int(std::string_view key, int64_t min, int64_t max);
  std::optional<int32_t> Int32(std::string_view key);
  std::optional<double> Number(std::string_view key);
  std::optional<absl::Time> Time(std::string_view key);
  std::optional<std::vector<std::string>> StringList(std::string_view key);
  std::optional<std::map<std::string, std::string>> StringMap(std::string_view key);

  template <typename E>
  std::optional<E> Enum(std::string_view key, std::span<const EnumName<E>> table) {
    std::optional<std::string> s = String(key);
    if (!s) return std::nullopt;
    if (std::optional<E> v = ParseEnum(table, *s)) return v;
    errors_->push_back(NotSupported(Path(key), QuoteJson(*s), EnumNames(table)));
    return std::nullopt;
  }

  // Records an Unknown field error for every key that no getter asked for.
  void RejectUnknownFields();
  // Copies every key that no getter asked for into `out` (to preserve fields we do not model).
  void CollectUnknownFields(nlohmann::json* out) const;

 private:
  void TypeError(std::string_view key, const nlohmann::json& v, std::string_view want);

  const nlohmann::json* object_ = nullptr;
  FieldPath path_;
  FieldErrors* errors_;
  std::set<std::string, std::less<>> seen_;
};

// Lenient lookups for data from a server, where a missing or mistyped field simply reads as
// empty: the string at `key` of `obj` ("" unless both are what they should be), and the object
// at `key` (nullptr otherwise), and the strings of the array at `key` (others skipped).
std::string StringAt(const nlohmann::json& obj, std::string_view key);
const nlohmann::json* ObjectAt(const nlohmann::json& obj, std::string_view key);
std::vector<std::string> StringsAt(const nlohmann::json& obj, std::string_view key);

// Decodes a standalone value with the same rules, for list items.
std::optional<std::string> DecodeString(const nlohmann::json& v, const FieldPath& path,
                                        FieldErrors* errors);
std::optional<int64_t> DecodeInt(const nlohmann::json& v, const FieldPath& path, int64_t min,
                                 int64_t max, FieldErrors* errors);

}  // namespace lockstep::api
