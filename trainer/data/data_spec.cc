#include "trainer/data/data_spec.h"

#include <algorithm>
#include <fstream>
#include <iterator>
#include <map>
#include <set>
#include <tuple>

#include "common/json_text.h"

namespace lockstep::trainer {
namespace {

using nlohmann::json;

absl::Status Bad(const std::string& field, const std::string& why) {
  return absl::InvalidArgumentError("data spec: " + field + ": " + why);
}

absl::StatusOr<FeatureSpec> ParseFeature(const std::string& name, const json& j) {
  const std::string at = "features." + name;
  if (!j.is_object()) return Bad(at, "must be an object with \"dtype\" (and \"shape\")");
  FeatureSpec f;
  f.name = name;
  for (const auto& [key, value] : j.items()) {
    if (key == "dtype") {
      if (value == "float32") {
        f.type = FeatureType::kFloat32;
      } else if (value == "int64") {
        f.type = FeatureType::kInt64;
      } else if (value == "string") {
        return Bad(at + ".dtype",
                   "string features (encoded images, text) are not supported yet; store the "
                   "values as float32 or int64 lists");
      } else {
        return Bad(at + ".dtype", value.dump() + " is not float32 or int64");
      }
    } else if (key == "shape") {
      if (!value.is_array()) return Bad(at + ".shape", "must be a list of positive sizes");
      for (const json& d : value) {
        if (!d.is_number_integer() || d.get<int64_t>() < 1) {
          return Bad(at + ".shape", value.dump() + " is not a list of positive sizes");
        }
        f.shape.push_back(d.get<int64_t>());
      }
    } else if (key == "var_len") {
      if (!value.is_boolean()) return Bad(at + ".var_len", "must be true or false");
      f.var_len = value.get<bool>();
    } else if (key == "default") {
      if (!value.is_number()) return Bad(at + ".default", "must be a number");
      f.default_value = value.get<float>();
    } else {
      return Bad(at + "." + key, "unknown field (dtype, shape, var_len, default)");
    }
  }
  if (!j.contains("dtype")) return Bad(at + ".dtype", "is required (float32 or int64)");
  if (f.var_len && f.shape.size() != 1) {
    return Bad(at + ".shape", "a var_len feature has a one-axis shape: its padded length");
  }
  return f;
}

// A source, a list of sources (by position), or {"model_name": source} (by name).
absl::StatusOr<std::vector<Feeds<std::string>>> ParseSources(const std::string& key,
                                                             const json& v) {
  std::vector<Feeds<std::string>> out;
  auto one = [&](const std::string& feeds, const json& e) -> absl::Status {
    if (!e.is_string() || e.get<std::string>().empty()) {
      return Bad(key, "must be a non-empty string, a list of them, or {\"model_name\": string}");
    }
    out.push_back({feeds, e.get<std::string>()});
    return absl::OkStatus();
  };
  if (v.is_array() && !v.empty()) {
    for (const json& e : v) {
      if (absl::Status s = one("", e); !s.ok()) return s;
    }
  } else if (v.is_object() && !v.empty()) {
    for (const auto& [name, e] : v.items()) {
      if (absl::Status s = one(name, e); !s.ok()) return s;
    }
  } else if (absl::Status s = one("", v); !s.ok()) {
    return s;
  }
  return out;
}

// CSV columns: "col" or ["col", ...] for one source (`list_is_one`) or one per column, or
// {"model_name": "col" or ["col", ...]}.
absl::StatusOr<std::vector<Feeds<std::vector<std::string>>>> ParseColumns(const std::string& key,
                                                                          const json& v) {
  auto names = [&](const json& e) -> absl::StatusOr<std::vector<std::string>> {
    std::vector<std::string> cols;
    if (e.is_string() && !e.get<std::string>().empty()) return std::vector{e.get<std::string>()};
    if (!e.is_array() || e.empty()) return Bad(key, "must name columns: \"col\" or [\"col\", ...]");
    for (const json& c : e) {
      if (!c.is_string() || c.get<std::string>().empty())
        return Bad(key, "must be a list of names");
      cols.push_back(c.get<std::string>());
    }
    return cols;
  };
  std::vector<Feeds<std::vector<std::string>>> out;
  if (v.is_object() && !v.empty()) {
    for (const auto& [name, e] : v.items()) {
      absl::StatusOr<std::vector<std::string>> cols = names(e);
      if (!cols.ok()) return cols.status();
      out.push_back({name, *cols});
    }
    return out;
  }
  absl::StatusOr<std::vector<std::string>> cols = names(v);
  if (!cols.ok()) return cols.status();
  out.push_back({"", *cols});
  return out;
}

}  // namespace

absl::StatusOr<DataSpec> ParseDataSpec(const json& j) {
  if (!j.is_object()) return Bad("(top)", "must be a JSON object");
  DataSpec s;
  const std::map<std::string, std::pair<DataFormat, std::set<std::string>>> formats = {
      {"tfrecord",
       {DataFormat::kTfRecord,
        {"files", "validation_files", "features", "input", "label", "skip_corrupt",
         "sample_weight"}}},
      {"numpy",
       {DataFormat::kNumpy,
        {"x", "y", "validation_x", "validation_y", "sample_weight", "validation_sample_weight"}}},
      {"csv",
       {DataFormat::kCsv,
        {"files", "validation_files", "header", "columns", "delimiter", "input", "label",
         "label_vocabulary", "missing", "sample_weight"}}},
      {"images", {DataFormat::kImages, {"directory", "validation_directory"}}}};
  if (!j.contains("format") || !j["format"].is_string() ||
      !formats.count(j["format"].get<std::string>())) {
    return Bad("format",
               (j.contains("format") ? j["format"].dump() + " is not " : "is required: ") +
                   std::string("\"tfrecord\", \"numpy\", \"csv\" or \"images\""));
  }
  const std::string format = j["format"].get<std::string>();
  const auto& [kind, own] = formats.at(format);
  s.format = kind;
  std::vector<Feeds<std::string>> input, label;  // tfrecord: feature names
  std::map<std::string, FeatureSpec> features;
  auto strings = [&](const std::string& key, const json& v,
                     std::vector<std::string>* out) -> absl::Status {
    if (!v.is_array() || v.empty()) return Bad(key, "must be a list of names");
    for (const json& e : v) {
      if (!e.is_string() || e.get<std::string>().empty())
        return Bad(key, "must be a list of names");
      out->push_back(e.get<std::string>());
    }
    return absl::OkStatus();
  };
  for (const auto& [key, value] : j.items()) {
    if (key == "format") continue;
    const bool common = key == "validation_split" || key == "input_scale" || key == "target";
    if (!common && !own.count(key)) {
      std::string known = "format, validation_split, input_scale, target";
      for (const std::string& k : own) known += ", " + k;
      bool elsewhere = false;
      for (const auto& [name, f] : formats) elsewhere = elsewhere || f.second.count(key) > 0;
      return Bad(key, elsewhere ? "is not a field of the " + format + " format (" + known + ")"
                                : "unknown field (" + known + ")");
    }
    absl::Status st;
    if (key == "target") {
      if (value != "input") return Bad(key, "the one value is \"input\" (an autoencoder)");
      s.target_is_input = true;
    } else if ((key == "input" || key == "label") && kind == DataFormat::kCsv) {
      absl::StatusOr<std::vector<Feeds<std::vector<std::string>>>> cols = ParseColumns(key, value);
      if (!cols.ok()) return cols.status();
      (key == "input" ? s.input_columns : s.label_columns) = std::move(*cols);
    } else if (key == "input" || key == "label" || key == "x" || key == "y" ||
               key == "validation_x" || key == "validation_y") {
      absl::StatusOr<std::vector<Feeds<std::string>>> src = ParseSources(key, value);
      if (!src.ok()) return src.status();
      if (key == "input") input = *src;
      if (key == "label") label = *src;
      if (key == "x") s.x = *src;
      if (key == "y") s.y = *src;
      if (key == "validation_x") s.validation_x = *src;
      if (key == "validation_y") s.validation_y = *src;
    } else if (key == "columns") {
      st = strings(key, value, &s.columns);
    } else if (key == "label_vocabulary") {
      st = strings(key, value, &s.label_vocabulary);
    } else if (key == "files" || key == "validation_files" || key == "directory" ||
               key == "validation_directory" || key == "sample_weight" ||
               key == "validation_sample_weight") {
      if (!value.is_string() || value.get<std::string>().empty()) {
        return Bad(key, "must be a non-empty string");
      }
      const std::string v = value.get<std::string>();
      if (key == "files") s.files = v;
      if (key == "validation_files") s.validation_files = v;
      if (key == "directory") s.directory = v;
      if (key == "validation_directory") s.validation_directory = v;
      if (key == "sample_weight") s.sample_weight = v;
      if (key == "validation_sample_weight") s.validation_sample_weight = v;
    } else if (key == "validation_split") {
      if (!value.is_number() || value.get<double>() < 0 || value.get<double>() >= 1) {
        return Bad(key, "must be a fraction in [0, 1)");
      }
      s.validation_split = value.get<double>();
    } else if (key == "input_scale") {
      if (!value.is_number() || !(value.get<double>() > 0)) {
        return Bad(key, "must be a positive number (1/255 for uint8 pixels)");
      }
      s.input_scale = value.get<float>();
    } else if (key == "skip_corrupt" || key == "header") {
      if (!value.is_boolean()) return Bad(key, "must be true or false");
      (key == "header" ? s.header : s.skip_corrupt) = value.get<bool>();
    } else if (key == "delimiter") {
      if (!value.is_string() || value.get<std::string>().size() != 1 || value == "\"" ||
          value == "\n") {
        return Bad(key, "must be one character (not a quote or a newline)");
      }
      s.delimiter = value.get<std::string>()[0];
    } else if (key == "missing") {
      if (!value.is_number()) return Bad(key, "must be a number (what an empty field holds)");
      s.missing = value.get<float>();
    } else if (key == "features") {
      if (!value.is_object() || value.empty()) {
        return Bad(key, "must map feature names to {\"dtype\", \"shape\"}");
      }
      for (const auto& [name, f] : value.items()) {
        absl::StatusOr<FeatureSpec> parsed = ParseFeature(name, f);
        if (!parsed.ok()) return parsed.status();
        features[name] = *parsed;
      }
    }
    if (!st.ok()) return st;
  }
  const bool validation_files =
      !s.validation_files.empty() || !s.validation_x.empty() || !s.validation_directory.empty();
  if (validation_files && s.validation_split > 0) {
    return Bad("validation_split", "give validation files or validation_split, not both");
  }
  if (kind == DataFormat::kImages) {
    if (s.directory.empty()) return Bad("directory", "is required: DIR/<class>/*.png|jpg");
    return s;
  }
  // Sources by name or all by position, never a mix.
  auto names_all_or_none = [](const std::string& key, const auto& sources) -> absl::Status {
    const auto named = std::count_if(sources.begin(), sources.end(),
                                     [](const auto& f) { return !f.feeds.empty(); });
    if (named != 0 && named != static_cast<long>(sources.size())) {
      return Bad(key, "name every model input (output) or none");
    }
    return absl::OkStatus();
  };
  if (kind == DataFormat::kNumpy) {
    if (s.x.empty()) {
      return Bad("x", "is required: a .npy file, or FILE.npz:KEY, of the training inputs");
    }
    if (s.y.empty() && !s.target_is_input) {
      return Bad("y",
                 "is required: a .npy file, or FILE.npz:KEY, of the training targets (or "
                 "\"target\": \"input\" for an autoencoder)");
    }
    if (!s.target_is_input && s.validation_x.empty() != s.validation_y.empty()) {
      return Bad(s.validation_x.empty() ? "validation_x" : "validation_y",
                 "validation_x and validation_y come together");
    }
    for (const auto& [key, src] :
         {std::pair{"x", &s.x}, std::pair{"y", &s.y}, std::pair{"validation_x", &s.validation_x},
          std::pair{"validation_y", &s.validation_y}}) {
      if (absl::Status st = names_all_or_none(key, *src); !st.ok()) return st;
    }
    if (!s.validation_sample_weight.empty() &&
        (s.validation_x.empty() || s.sample_weight.empty())) {
      return Bad("validation_sample_weight", "comes with validation_x and sample_weight");
    }
    if (s.target_is_input && (!s.y.empty() || !s.validation_y.empty())) {
      return Bad(s.y.empty() ? "validation_y" : "y", "not with \"target\": \"input\"");
    }
    return s;
  }
  if (s.files.empty()) return Bad("files", "is required: a glob of the training files");
  if (kind == DataFormat::kCsv) {
    if (s.label_columns.empty() && !s.target_is_input) {
      return Bad("label", "is required: the label's column (or columns)");
    }
    if (!s.header && s.columns.empty()) {
      return Bad("columns", "is required when the files have no header line");
    }
    if (absl::Status st = names_all_or_none("input", s.input_columns); !st.ok()) return st;
    if (absl::Status st = names_all_or_none("label", s.label_columns); !st.ok()) return st;
    std::set<std::string> labels;
    for (const auto& l : s.label_columns) labels.insert(l.what.begin(), l.what.end());
    for (const auto& in : s.input_columns) {
      for (const std::string& col : in.what) {
        if (labels.count(col)) return Bad("input", "holds the label's column \"" + col + "\"");
      }
    }
    if (!s.label_vocabulary.empty() &&
        (s.label_columns.size() != 1 || s.label_columns[0].what.size() != 1)) {
      return Bad("label_vocabulary", "needs one label column");
    }
    return s;
  }
  if (input.empty()) return Bad("input", "is required: the name of a feature");
  if (label.empty() && !s.target_is_input)
    return Bad("label", "is required: the name of a feature");
  std::set<std::string> used;
  for (const auto& [field, sources, out] : {std::tuple{"input", &input, &s.input_features},
                                            std::tuple{"label", &label, &s.label_features}}) {
    if (absl::Status st = names_all_or_none(field, *sources); !st.ok()) return st;
    for (const Feeds<std::string>& f : *sources) {
      if (!features.count(f.what)) {
        return Bad(field, "\"" + f.what + "\" is not one of the features");
      }
      if (!used.insert(f.what).second) {
        return Bad(field, "feature \"" + f.what + "\" is given twice");
      }
      out->push_back({f.feeds, features.at(f.what)});
    }
  }
  for (const Feeds<FeatureSpec>& l : s.label_features) {
    if (l.what.var_len) {
      return Bad("features." + l.what.name, "a label has a fixed shape (not var_len)");
    }
  }
  if (!s.sample_weight.empty()) {
    if (!features.count(s.sample_weight)) {
      return Bad("sample_weight", "\"" + s.sample_weight + "\" is not one of the features");
    }
    if (used.count(s.sample_weight)) {
      return Bad("sample_weight", "feature \"" + s.sample_weight + "\" is an input or a label");
    }
    s.weight_feature = features.at(s.sample_weight);
    if (s.weight_feature->size() != 1 || s.weight_feature->var_len) {
      return Bad("features." + s.sample_weight, "a sample weight is one value per example");
    }
  }
  return s;
}

absl::StatusOr<DataSpec> LoadDataSpec(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError("data spec " + path + ": cannot be read");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  absl::StatusOr<json> j = common::ParseJsonText(text, "data spec " + path);
  if (!j.ok()) return j.status();
  absl::StatusOr<DataSpec> s = ParseDataSpec(*j);
  if (!s.ok()) {
    return absl::InvalidArgumentError(path + ": " + std::string(s.status().message()));
  }
  return s;
}

}  // namespace lockstep::trainer
