#pragma once
// The Keras layer classes the engine builds, by class name: the layer registry's Keras table
// (trainer/layers/registry.h), which each family of layers fills. A factory reads its options
// through the LayerConfig (so unread options are refused) and returns the layer; the loader
// has already read the options every layer has (name, trainable, dtype, the build shapes).
// Thread-safety: the registry is built once and read-only after.

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "trainer/graph/layer.h"
#include "trainer/keras/layer_config.h"

namespace lockstep::trainer::keras {

class LayerFactories;
using LayerFactory = std::function<absl::StatusOr<std::unique_ptr<graph::Layer>>(
    LayerConfig& c, const LayerFactories& all)>;

class LayerFactories {
 public:
  // The registry's (layers::Registry::Get().keras()).
  static const LayerFactories& Get();

  void Add(const std::string& class_name, LayerFactory f) { map_[class_name] = std::move(f); }
  const LayerFactory* Find(const std::string& class_name) const;
  std::vector<std::string> Names() const;
  // A layer from a {class_name, config} object (a wrapper's inner layer, or a model's):
  // reads the common options, runs the factory, and Finish()es the config.
  absl::StatusOr<std::unique_ptr<graph::Layer>> Build(const nlohmann::json& layer,
                                                      bool keras3) const;

 private:
  std::map<std::string, LayerFactory> map_;
};

// Reads the options every layer shares (name, trainable, dtype, the input/build shapes).
// InvalidArgument when the dtype is not float32 or a mixed policy.
void ReadCommonOptions(LayerConfig& c);

}  // namespace lockstep::trainer::keras
