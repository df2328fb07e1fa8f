#include "trainer/keras/layer_factory.h"

#include "trainer/layers/registry.h"

namespace lockstep::trainer::keras {

using nlohmann::json;

const LayerFactories& LayerFactories::Get() { return layers::Registry::Get().keras(); }

const LayerFactory* LayerFactories::Find(const std::string& class_name) const {
  auto it = map_.find(class_name);
  return it == map_.end() ? nullptr : &it->second;
}

std::vector<std::string> LayerFactories::Names() const {
  std::vector<std::string> out;
  for (const auto& [name, f] : map_) out.push_back(name);
  return out;
}

void ReadCommonOptions(LayerConfig& c) {
  c.Ignore("name");
  c.Ignore("trainable");  // the loader applies it
  // Shapes Keras records for building; the graph infers them from the inputs.
  c.Ignore("batch_input_shape");
  c.Ignore("batch_shape");
  c.Ignore("input_shape");
  c.Ignore("input_dtype");
  // The dtype policy: float32, or a mixed policy (float32 variables), which the trainer's
  // precision setting carries out.
  const json d = c.Object("dtype");
  std::string dtype = "float32";
  if (d.is_string()) {
    dtype = d.get<std::string>();
  } else if (d.is_object()) {
    const json& cfg = d.contains("config") ? d["config"] : json();
    if (cfg.is_object() && cfg.contains("name") && cfg["name"].is_string()) {
      dtype = cfg["name"].get<std::string>();
    }
  }
  if (dtype != "float32" && dtype != "mixed_float16" && dtype != "mixed_bfloat16") {
    c.Refuse("dtype \"" + dtype + "\" (the engine computes in float32 or a mixed policy)");
  }
}

absl::StatusOr<std::unique_ptr<graph::Layer>> LayerFactories::Build(const json& layer,
                                                                    bool keras3) const {
  if (!layer.is_object() || !layer.contains("class_name") || !layer["class_name"].is_string()) {
    return absl::InvalidArgumentError("a layer without a class_name: " + Show(layer));
  }
  const std::string cls = layer["class_name"].get<std::string>();
  json config = layer.contains("config") ? layer["config"] : json::object();
  std::string name = cls;
  if (config.is_object() && config.contains("name") && config["name"].is_string()) {
    name = config["name"].get<std::string>();
  } else if (layer.contains("name") && layer["name"].is_string()) {
    name = layer["name"].get<std::string>();
  }
  LayerConfig c(config, name, cls, keras3);
  if (cls == "Lambda") {
    return c.Prefix(
        "a Lambda layer holds Python code, which the trainer cannot run; replace it with "
        "built-in layers");
  }
  if (cls == "TensorFlowOpLayer" || cls == "TFOpLambda" || cls == "SlicingOpLambda") {
    return c.Prefix("a TensorFlow operation recorded as a layer (" + cls +
                    ") is Python-side TensorFlow code, which the trainer cannot run");
  }
  const bool custom = layer.contains("registered_name") && layer["registered_name"].is_string() &&
                      layer["registered_name"].get<std::string>() != cls;
  const LayerFactory* f = Find(cls);
  if (f == nullptr) {
    return c.Prefix(
        std::string(custom ? "a user-defined layer class" : "the layer class") +
        " is not supported (docs/reference/keras-layers.md lists the supported classes)");
  }
  ReadCommonOptions(c);
  // Any layer may carry an activity regularizer: the graph applies it to the first output.
  const Regularizer activity = c.Regularization("activity_regularizer");
  const bool trainable =
      config.is_object() && config.contains("trainable") && config["trainable"].is_boolean()
          ? config["trainable"].get<bool>()
          : true;
  absl::StatusOr<std::unique_ptr<graph::Layer>> l = (*f)(c, *this);
  if (!l.ok()) return l.status();
  if (absl::Status s = c.Finish(); !s.ok()) return s;
  (*l)->set_trainable(trainable);
  (*l)->set_activity_penalty({activity.l1, activity.l2, !keras3});
  return l;
}

}  // namespace lockstep::trainer::keras
