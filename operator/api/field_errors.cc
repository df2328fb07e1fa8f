#include "operator/api/field_errors.h"

#include <nlohmann/json.hpp>

#include "common/str_util.h"

namespace lockstep::api {

std::string FieldError::ToString() const {
  std::string out = path.empty() ? std::string("<root>") : path;
  switch (type) {
    case FieldErrorType::kRequired:
      absl::StrAppend(&out, ": Required value");
      break;
    case FieldErrorType::kInvalid:
    case FieldErrorType::kTypeInvalid:
      absl::StrAppend(&out, ": Invalid value");
      if (!value.empty()) absl::StrAppend(&out, ": ", value);
      break;
    case FieldErrorType::kNotSupported:
      absl::StrAppend(&out, ": Unsupported value: ", value);
      break;
    case FieldErrorType::kDuplicate:
      absl::StrAppend(&out, ": Duplicate value: ", value);
      break;
    case FieldErrorType::kTooMany:
      absl::StrAppend(&out, ": Too many: ", value);
      break;
    case FieldErrorType::kTooLong:
      absl::StrAppend(&out, ": Too long");
      break;
    case FieldErrorType::kForbidden:
      absl::StrAppend(&out, ": Forbidden");
      break;
    case FieldErrorType::kUnknownField:
      absl::StrAppend(&out, ": Unknown field");
      break;
    case FieldErrorType::kNotFound:
      absl::StrAppend(&out, ": Not found: ", value);
      break;
  }
  if (!detail.empty()) absl::StrAppend(&out, ": ", detail);
  return out;
}

FieldPath FieldPath::Child(std::string_view name) const {
  return FieldPath(path_.empty() ? std::string(name) : StrCat(path_, ".", name));
}

FieldPath FieldPath::Index(size_t i) const { return FieldPath(StrCat(path_, "[", i, "]")); }

FieldPath FieldPath::Key(std::string_view key) const {
  return FieldPath(StrCat(path_, "[", key, "]"));
}

FieldError Required(const FieldPath& path, std::string detail) {
  return {FieldErrorType::kRequired, path.str(), "", std::move(detail)};
}

FieldError Invalid(const FieldPath& path, std::string value_json, std::string detail) {
  return {FieldErrorType::kInvalid, path.str(), std::move(value_json), std::move(detail)};
}

FieldError NotSupported(const FieldPath& path, std::string value_json,
                        const std::vector<std::string_view>& supported) {
  std::vector<std::string> quoted;
  quoted.reserve(supported.size());
  for (std::string_view s : supported) quoted.push_back(QuoteJson(s));
  return {FieldErrorType::kNotSupported, path.str(), std::move(value_json),
          StrCat("supported values: ", StrJoin(quoted, ", "))};
}

FieldError Forbidden(const FieldPath& path, std::string detail) {
  return {FieldErrorType::kForbidden, path.str(), "", std::move(detail)};
}

FieldError Duplicate(const FieldPath& path, std::string value_json) {
  return {FieldErrorType::kDuplicate, path.str(), std::move(value_json), ""};
}

FieldError NotFound(const FieldPath& path, std::string value_json) {
  return {FieldErrorType::kNotFound, path.str(), std::move(value_json), ""};
}

absl::Status ToStatus(std::string_view what, const FieldErrors& errors) {
  if (errors.empty()) return absl::OkStatus();
  std::vector<std::string> parts;
  parts.reserve(errors.size());
  for (const FieldError& e : errors) parts.push_back(e.ToString());
  return absl::InvalidArgumentError(StrCat(what, " is invalid: ", StrJoin(parts, "; ")));
}

std::string QuoteJson(std::string_view s) {
  return nlohmann::json(std::string(s))
      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace lockstep::api
