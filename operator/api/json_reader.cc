#include "operator/api/json_reader.h"

#include <cmath>
#include <limits>

#include "common/str_util.h"

namespace lockstep::api {
namespace {

using nlohmann::json;

constexpr size_t kMaxRenderedValue = 80;

FieldError TypeInvalid(const FieldPath& path, const json& v, std::string_view want) {
  return {FieldErrorType::kTypeInvalid, path.str(), RenderValue(v),
          StrCat("must be of type ", want)};
}

}  // namespace

std::string FormatKubeTime(absl::Time t) {
  return absl::FormatTime("%Y-%m-%d%ET%H:%M:%SZ", t, absl::UTCTimeZone());
}

std::optional<absl::Time> ParseKubeTime(std::string_view text) {
  absl::Time t;
  std::string err;
  if (!absl::ParseTime(absl::RFC3339_full, std::string(text), absl::UTCTimeZone(), &t, &err)) {
    return std::nullopt;
  }
  return absl::FromUnixSeconds(absl::ToUnixSeconds(t));
}

std::string RenderValue(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > kMaxRenderedValue) s = StrCat(s.substr(0, kMaxRenderedValue), "...");
  return s;
}

std::optional<std::string> DecodeString(const json& v, const FieldPath& path, FieldErrors* errors) {
  if (v.is_string()) return v.get<std::string>();
  errors->push_back(TypeInvalid(path, v, "string"));
  return std::nullopt;
}

std::optional<int64_t> DecodeInt(const json& v, const FieldPath& path, int64_t min, int64_t max,
                                 FieldErrors* errors) {
  if (v.is_number_integer()) {
    // Unsigned values above INT64_MAX are out of every range we accept.
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(max)) {
      errors->push_back(Invalid(path, RenderValue(v), StrCat("must be at most ", max)));
      return std::nullopt;
    }
    int64_t i = v.get<int64_t>();
    if (i < min) {
      errors->push_back(Invalid(path, RenderValue(v), StrCat("must be at least ", min)));
      return std::nullopt;
    }
    if (i > max) {
      errors->push_back(Invalid(path, RenderValue(v), StrCat("must be at most ", max)));
      return std::nullopt;
    }
    return i;
  }
  if (v.is_number_float()) {
    // A JSON number written as 2.0 is still an integer; 2.5, 1e400 and NaN are not.
    double d = v.get<double>();
    if (!std::isfinite(d) || std::trunc(d) != d) {
      errors->push_back(TypeInvalid(path, v, "integer"));
      return std::nullopt;
    }
    if (d < static_cast<double>(min)) {
      errors->push_back(Invalid(path, RenderValue(v), StrCat("must be at least ", min)));
      return std::nullopt;
    }
    if (d > static_cast<double>(max)) {
      errors->push_back(Invalid(path, RenderValue(v), StrCat("must be at most ", max)));
      return std::nullopt;
    }
    return static_cast<int64_t>(d);
  }
  errors->push_back(TypeInvalid(path, v, "integer"));
  return std::nullopt;
}

ObjectReader::ObjectReader(const json& j, FieldPath path, FieldErrors* errors)
    : path_(std::move(path)), errors_(errors) {
  if (j.is_object()) {
    object_ = &j;
  } else {
    errors_->push_back(TypeInvalid(path_, j, "object"));
  }
}

const json* ObjectReader::Get(std::string_view key) {
  if (object_ == nullptr) return nullptr;
  seen_.emplace(key);
  auto it = object_->find(key);
  if (it == object_->end() || it->is_null()) return nullptr;
  return &*it;
}

void ObjectReader::TypeError(std::string_view key, const json& v, std::string_view want) {
  errors_->push_back(TypeInvalid(Path(key), v, want));
}

const json* ObjectReader::Object(std::string_view key) {
  const json* v = Get(key);
  if (v != nullptr && !v->is_object()) {
    TypeError(key, *v, "object");
    return nullptr;
  }
  return v;
}

const json* ObjectReader::Array(std::string_view key) {
  const json* v = Get(key);
  if (v != nullptr && !v->is_array()) {
    TypeError(key, *v, "array");
    return nullptr;
  }
  return v;
}

std::optional<std::string> ObjectReader::String(std::string_view key) {
  const json* v = Get(key);
  if (v == nullptr) return std::nullopt;
  return DecodeString(*v, Path(key), errors_);
}

std::optional<bool> ObjectReader::Bool(std::string_view key) {
  const json* v = Get(key);
  if (v == nullptr) return std::nullopt;
  if (v->is_boolean()) return v->get<bool>();
  TypeError(key, *v, "boolean");
  return std::nullopt;
}

std::optional<int64_t> ObjectReader::Int(std::string_view key, int64_t min, int64_t max) {
  const json* v = Get(key);
  if (v == nullptr) return std::nullopt;
  return DecodeInt(*v, Path(key), min, max, errors_);
}

std::optional<int32_t> ObjectReader::Int32(std::string_view key) {
  std::optional<int64_t> v =
      Int(key, std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max());
  if (!v) return std::nullopt;
  return static_cast<int32_t>(*v);
}

std::optional<double> ObjectReader::Number(std::string_view key) {
  const json* v = Get(key);
  if (v == nullptr) return std::nullopt;
  if (v->is_number() && std::isfinite(v->get<double>())) return v->get<double>();
  TypeError(key, *v, "number");
  return std::nullopt;
}

std::optional<absl::Time> ObjectReader::Time(std::string_view key) {
  std::optional<std::string> s = String(key);
  if (!s) return std::nullopt;
  if (std::optional<absl::Time> t = ParseKubeTime(*s)) return t;
  errors_->push_back(
      Invalid(Path(key), QuoteJson(*s), "must be an RFC 3339 time such as 2026-01-02T15:04:05Z"));
  return std::nullopt;
}

std::optional<std::vector<std::string>> ObjectReader::StringList(std::string_view key) {
  const json* v = Array(key);
  if (v == nullptr) return std::nullopt;
  std::vector<std::string> out;
  for (size_t i = 0; i < v->size(); ++i) {
    if (auto s = DecodeString((*v)[i], Path(key).Index(i), errors_)) out.push_back(*s);
  }
  return out;
}

std::optional<std::map<std::string, std::string>> ObjectReader::StringMap(std::string_view key) {
  const json* v = Object(key);
  if (v == nullptr) return std::nullopt;
  std::map<std::string, std::string> out;
  for (const auto& [k, item] : v->items()) {
    if (auto s = DecodeString(item, Path(key).Key(k), errors_)) out.emplace(k, *s);
  }
  return out;
}

void ObjectReader::RejectUnknownFields() {
  if (object_ == nullptr) return;
  for (const auto& [k, v] : object_->items()) {
    if (!seen_.contains(k)) {
      errors_->push_back({FieldErrorType::kUnknownField, path_.Child(k).str(), "", ""});
    }
  }
}

void ObjectReader::CollectUnknownFields(json* out) const {
  if (object_ == nullptr) return;
  for (const auto& [k, v] : object_->items()) {
    if (!seen_.contains(k)) (*out)[k] = v;
  }
}

std::string StringAt(const nlohmann::json& obj, std::string_view key) {
  if (!obj.is_object()) return "";
  auto it = obj.find(key);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : std::string();
}

std::vector<std::string> StringsAt(const nlohmann::json& obj, std::string_view key) {
  std::vector<std::string> out;
  if (!obj.is_object()) return out;
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_array()) return out;
  for (const nlohmann::json& v : *it) {
    if (v.is_string()) out.push_back(v.get<std::string>());
  }
  return out;
}

const nlohmann::json* ObjectAt(const nlohmann::json& obj, std::string_view key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  return it != obj.end() && it->is_object() ? &*it : nullptr;
}

}  // namespace lockstep::api
