#include "operator/api/manifest.h"

#include <yaml-cpp/yaml.h>

#include <charconv>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

#include "absl/strings/ascii.h"
#include "common/str_util.h"

namespace lockstep::api {
namespace {

using nlohmann::json;

bool OneOf(std::string_view s, std::initializer_list<std::string_view> options) {
  for (std::string_view o : options) {
    if (s == o) return true;
  }
  return false;
}

// Integer forms: [-+]digits, 0x hex, 0o octal. Returns nothing for other text.
std::optional<json> ResolveInteger(std::string_view s) {
  bool negative = false;
  std::string_view body = s;
  if (!body.empty() && (body[0] == '-' || body[0] == '+')) {
    negative = body[0] == '-';
    body.remove_prefix(1);
  }
  int base = 10;
  if (body.size() > 2 && body[0] == '0' && (body[1] == 'x' || body[1] == 'o')) {
    base = body[1] == 'x' ? 16 : 8;
    body.remove_prefix(2);
  }
  if (body.empty()) return std::nullopt;
  for (char c : body) {
    bool ok = base == 16 ? absl::ascii_isxdigit(static_cast<unsigned char>(c))
                         : (c >= '0' && c <= (base == 8 ? '7' : '9'));
    if (!ok) return std::nullopt;
  }
  uint64_t magnitude = 0;
  auto [ptr, ec] = std::from_chars(body.data(), body.data() + body.size(), magnitude, base);
  if (ec == std::errc::result_out_of_range) {
    // Too large for 64 bits: keep it as a (rounded) number, as YAML libraries do.
    double d = std::strtod(std::string(s).c_str(), nullptr);
    return json(d);
  }
  if (ec != std::errc() || ptr != body.data() + body.size()) return std::nullopt;
  if (!negative) {
    if (magnitude <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return json(static_cast<int64_t>(magnitude));
    }
    return json(magnitude);
  }
  if (magnitude <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) + 1) {
    return json(static_cast<int64_t>(0 - magnitude));
  }
  return json(-static_cast<double>(magnitude));
}

std::optional<json> ResolveFloat(std::string_view s) {
  if (OneOf(s, {".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF"})) {
    return json(std::numeric_limits<double>::infinity());
  }
  if (OneOf(s, {"-.inf", "-.Inf", "-.INF"})) return json(-std::numeric_limits<double>::infinity());
  if (OneOf(s, {".nan", ".NaN", ".NAN"})) return json(std::numeric_limits<double>::quiet_NaN());
  // [-+]?(digits)(.digits)?([eE][-+]?digits)? with at least one digit and a '.' or exponent.
  size_t i = 0, digits = 0;
  bool dot = false, exponent = false;
  if (i < s.size() && (s[i] == '-' || s[i] == '+')) ++i;
  for (; i < s.size(); ++i) {
    char c = s[i];
    if (c >= '0' && c <= '9') {
      ++digits;
    } else if (c == '.' && !dot && !exponent) {
      dot = true;
    } else if ((c == 'e' || c == 'E') && !exponent && digits > 0) {
      exponent = true;
      if (i + 1 < s.size() && (s[i + 1] == '-' || s[i + 1] == '+')) ++i;
      if (i + 1 >= s.size()) return std::nullopt;
    } else {
      return std::nullopt;
    }
  }
  if (digits == 0 || (!dot && !exponent)) return std::nullopt;
  return json(std::strtod(std::string(s).c_str(), nullptr));
}

json ResolvePlainScalar(const std::string& s) {
  if (OneOf(s, {"", "~", "null", "Null", "NULL"})) return json(nullptr);
  if (OneOf(s, {"true", "True", "TRUE", "yes", "Yes", "YES", "y", "Y", "on", "On", "ON"})) {
    return json(true);
  }
  if (OneOf(s, {"false", "False", "FALSE", "no", "No", "NO", "n", "N", "off", "Off", "OFF"})) {
    return json(false);
  }
  if (auto i = ResolveInteger(s)) return *i;
  if (auto f = ResolveFloat(s)) return *f;
  return json(s);
}

absl::StatusOr<json> ToJson(const YAML::Node& node, int depth) {
  if (depth > kMaxNestingDepth) {
    return absl::InvalidArgumentError(
        StrCat("YAML nests deeper than ", kMaxNestingDepth, " levels"));
  }
  switch (node.Type()) {
    case YAML::NodeType::Undefined:
    case YAML::NodeType::Null:
      return json(nullptr);
    case YAML::NodeType::Scalar:
      if (node.Tag() == "!" || node.Tag() == "tag:yaml.org,2002:str") return json(node.Scalar());
      return ResolvePlainScalar(node.Scalar());
    case YAML::NodeType::Sequence: {
      json out = json::array();
      for (const YAML::Node& item : node) {
        absl::StatusOr<json> v = ToJson(item, depth + 1);
        if (!v.ok()) return v.status();
        out.push_back(*std::move(v));
      }
      return out;
    }
    case YAML::NodeType::Map: {
      json out = json::object();
      for (const auto& kv : node) {
        if (!kv.first.IsScalar()) {
          return absl::InvalidArgumentError(
              StrCat("line ", kv.first.Mark().line + 1, ": mapping keys must be scalars"));
        }
        const std::string& key = kv.first.Scalar();
        if (out.contains(key)) {
          return absl::InvalidArgumentError(
              StrCat("line ", kv.first.Mark().line + 1, ": key \"", key, "\" is repeated"));
        }
        absl::StatusOr<json> v = ToJson(kv.second, depth + 1);
        if (!v.ok()) return v.status();
        out[key] = *std::move(v);
      }
      return out;
    }
  }
  return json(nullptr);
}

// Writes `j` as YAML: a string that would read back as another type ("true", "2222", "") is
// double-quoted, anything else plain.
void Emit(YAML::Emitter& out, const json& j) {
  switch (j.type()) {
    case json::value_t::object:
      if (j.empty()) out << YAML::Flow;
      out << YAML::BeginMap;
      for (const auto& [k, v] : j.items()) {
        out << YAML::Key;
        Emit(out, json(k));
        out << YAML::Value;
        Emit(out, v);
      }
      out << YAML::EndMap;
      return;
    case json::value_t::array:
      if (j.empty()) out << YAML::Flow;
      out << YAML::BeginSeq;
      for (const json& v : j) Emit(out, v);
      out << YAML::EndSeq;
      return;
    case json::value_t::string: {
      const std::string& s = j.get_ref<const std::string&>();
      if (ResolvePlainScalar(s) != j) out << YAML::DoubleQuoted;
      out << s;
      return;
    }
    case json::value_t::boolean:
      out << (j.get<bool>() ? "true" : "false");
      return;
    case json::value_t::number_integer:
      out << j.get<int64_t>();
      return;
    case json::value_t::number_unsigned:
      out << j.get<uint64_t>();
      return;
    case json::value_t::number_float:
      out << j.dump();
      return;
    default:
      out << YAML::Null;
  }
}

}  // namespace

std::string ToYaml(const nlohmann::json& doc) {
  YAML::Emitter out;
  out.SetIndent(2);
  out.SetSeqFormat(YAML::Block);
  Emit(out, doc);
  return std::string(out.c_str()) + "\n";
}

absl::StatusOr<json> ParseJson(std::string_view text) {
  bool too_deep = false;
  json::parser_callback_t guard = [&too_deep](int depth, json::parse_event_t, json&) {
    if (depth > kMaxNestingDepth) too_deep = true;
    return !too_deep;
  };
  try {
    json j = json::parse(text.begin(), text.end(), guard);
    if (too_deep) {
      return absl::InvalidArgumentError(
          StrCat("JSON nests deeper than ", kMaxNestingDepth, " levels"));
    }
    return j;
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(StrCat("malformed JSON: ", e.what()));
  }
}

absl::StatusOr<std::vector<json>> ParseYamlDocuments(std::string_view text) {
  std::vector<YAML::Node> docs;
  try {
    docs = YAML::LoadAll(std::string(text));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(StrCat("malformed YAML: ", e.what()));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(StrCat("malformed YAML: ", e.what()));
  }
  std::vector<json> out;
  for (const YAML::Node& doc : docs) {
    if (doc.IsNull()) continue;
    absl::StatusOr<json> j = ToJson(doc, 0);
    if (!j.ok()) return j.status();
    out.push_back(*std::move(j));
  }
  return out;
}

absl::StatusOr<std::vector<json>> ReadManifestFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(StrCat("cannot open ", path));
  std::stringstream buffer;
  buffer << in.rdbuf();
  absl::StatusOr<std::vector<json>> docs = ParseYamlDocuments(buffer.str());
  if (!docs.ok()) {
    return absl::InvalidArgumentError(StrCat(path, ": ", docs.status().message()));
  }
  return docs;
}

}  // namespace lockstep::api
