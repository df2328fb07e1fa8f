#include "trainer/keras/model_document.h"

#include <fstream>
#include <functional>
#include <set>
#include <sstream>

#include "common/json_text.h"
#include "trainer/data/zip_archive.h"
#include "trainer/keras/model_loader.h"

namespace lockstep::trainer::keras {

using nlohmann::json;

std::vector<std::string> UnreportedMetrics(const json& training_config) {
  static const std::set<std::string> kAccuracy = {"accuracy",
                                                  "acc",
                                                  "sparse_categorical_accuracy",
                                                  "categorical_accuracy",
                                                  "binary_accuracy",
                                                  "SparseCategoricalAccuracy",
                                                  "CategoricalAccuracy",
                                                  "BinaryAccuracy"};
  std::vector<std::string> out;
  std::function<void(const json&)> visit = [&](const json& m) {
    if (m.is_array()) {
      for (const json& e : m) visit(e);
    } else if (m.is_object() && m.contains("class_name")) {
      const json& cls = m["class_name"];
      if (!cls.is_string()) {
        out.push_back(Show(m));
      } else if (!kAccuracy.count(cls.get<std::string>())) {
        out.push_back(cls.get<std::string>());
      }
    } else if (m.is_object()) {
      for (const auto& [k, v] : m.items()) visit(v);  // per output name
    } else if (m.is_string()) {
      if (!kAccuracy.count(m.get<std::string>())) out.push_back(m.get<std::string>());
    } else if (!m.is_null()) {
      out.push_back(Show(m));
    }
  };
  if (training_config.is_object()) {
    for (const char* k : {"metrics", "weighted_metrics"}) {
      if (training_config.contains(k)) visit(training_config[k]);
    }
  }
  return out;
}

std::string DTypePolicyOf(const json& doc) {
  auto policy = [](const json& d) -> std::string {
    if (d.is_string()) return d.get<std::string>();
    if (d.is_object() && d.contains("config") && d["config"].is_object()) {
      return d["config"].value("name", "");
    }
    return "";
  };
  std::string found;
  std::function<void(const json&)> visit = [&](const json& v) {
    if (!found.empty()) return;
    if (v.is_object()) {
      if (v.contains("dtype")) {
        const std::string p = policy(v["dtype"]);
        if (p == "mixed_float16" || p == "mixed_bfloat16") found = p;
      }
      for (const auto& [k, child] : v.items()) visit(child);
    } else if (v.is_array()) {
      for (const json& child : v) visit(child);
    }
  };
  visit(doc);
  return found.empty() ? "float32" : found;
}

json TrainingConfigOf(const json& doc) {
  if (!doc.is_object()) return json();
  if (doc.contains("modelTopology") && doc["modelTopology"].is_object()) {
    return doc["modelTopology"].value("training_config", json());
  }
  if (doc.contains("compile_config") && doc["compile_config"].is_object()) {
    return doc["compile_config"];
  }
  if (doc.contains("training_config") && doc["training_config"].is_object()) {
    return doc["training_config"];
  }
  return json();
}

namespace {

// The config.json of a .keras archive (a zip file).
absl::StatusOr<std::string> ReadKerasArchiveConfig(const std::string& path) {
  absl::StatusOr<std::string> config = ReadZipMember(path, "config.json", 256u << 20);
  if (absl::IsNotFound(config.status()) || (config.ok() && config->empty())) {
    return absl::InvalidArgumentError(path + ": a .keras archive without a readable config.json");
  }
  if (!config.ok()) {
    return absl::InvalidArgumentError(path + ": not a readable .keras archive (" +
                                      std::string(config.status().message()) + ")");
  }
  return config;
}

}  // namespace

absl::StatusOr<json> ReadJsonFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return absl::NotFoundError("model file " + path + " cannot be read");
  std::stringstream ss;
  ss << f.rdbuf();
  std::string text = ss.str();
  if (text.rfind("PK\x03\x04", 0) == 0) {  // a zip file: Keras 3's .keras archive
    absl::StatusOr<std::string> config = ReadKerasArchiveConfig(path);
    if (!config.ok()) return config.status();
    text = std::move(*config);
  }
  return common::ParseJsonText(text, path);
}

namespace {

// "batchInputShape" -> "batch_input_shape".
std::string SnakeCase(const std::string& key) {
  std::string out;
  for (char ch : key) {
    if (ch >= 'A' && ch <= 'Z') {
      if (!out.empty()) out += '_';
      out += static_cast<char>(ch - 'A' + 'a');
    } else {
      out += ch;
    }
  }
  return out;
}

}  // namespace

// Every layer entry ({"class_name", "config"}) of `j`, nested ones too, in the spelling the
// builder reads: Keras 2's cuDNN recurrent layers as the layers they equal (CuDNNLSTM is an
// LSTM with tanh and sigmoid, CuDNNGRU a GRU with reset_after), and, for a TF.js file,
// camelCase config keys (the converter's batchInputShape) in Keras's snake_case.
void NormalizeModel(json& j, bool tfjs) {
  if (j.is_array()) {
    for (json& e : j) NormalizeModel(e, tfjs);
    return;
  }
  if (!j.is_object()) return;
  if (j.contains("class_name") && j["class_name"].is_string() && j.contains("config") &&
      j["config"].is_object()) {
    json& cfg = j["config"];
    if (tfjs) {
      json renamed = json::object();
      for (auto& [key, value] : cfg.items()) {
        const std::string snake = SnakeCase(key);
        if (snake != key && cfg.contains(snake)) continue;  // both spellings: Keras's wins
        renamed[snake] = value;
      }
      cfg = std::move(renamed);
    }
    const std::string cls = j["class_name"].get<std::string>();
    if (cls == "CuDNNLSTM" || cls == "CuDNNGRU") {
      j["class_name"] = cls == "CuDNNLSTM" ? "LSTM" : "GRU";
      cfg["activation"] = "tanh";
      cfg["recurrent_activation"] = "sigmoid";
      if (cls == "CuDNNGRU") cfg["reset_after"] = true;
    }
  }
  for (auto& [key, value] : j.items()) NormalizeModel(value, tfjs);
}

// A declared input shape with an axis of size 0 (no example can have it), named by its layer.
absl::Status CheckDeclaredShapes(const json& j) {
  if (j.is_array()) {
    for (const json& e : j) {
      if (absl::Status s = CheckDeclaredShapes(e); !s.ok()) return s;
    }
    return absl::OkStatus();
  }
  if (!j.is_object()) return absl::OkStatus();
  if (j.contains("config") && j["config"].is_object()) {
    const json& cfg = j["config"];
    for (const char* key : {"batch_input_shape", "batch_shape"}) {
      if (!cfg.contains(key) || !cfg[key].is_array()) continue;
      for (const json& d : cfg[key]) {
        if (d.is_number_integer() && d.get<int64_t>() <= 0) {
          return absl::InvalidArgumentError("model config: layer '" + NameOf(j) +
                                            "' declares the input shape " + cfg[key].dump() +
                                            ", with an axis of size " + d.dump() +
                                            "; every axis is positive or null");
        }
      }
    }
  }
  for (const auto& [key, value] : j.items()) {
    if (absl::Status s = CheckDeclaredShapes(value); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace lockstep::trainer::keras
