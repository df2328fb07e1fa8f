#pragma once
// The Keras model loader: a model's architecture as Keras writes it, built into a graph.
//
// Formats read (each detected from the document itself):
//   keras2-sequential  {"class_name": "Sequential", "config": [layers]} (Keras 2.0-2.2) or
//                      {"config": {"name", "layers"}} (later), the input shape on an InputLayer
//                      or on the first layer's batch_input_shape;
//   keras2-functional  "Model" (to 2.3) or "Functional" (2.4+): layers with inbound_nodes as
//                      lists of [layer, node_index, tensor_index, kwargs], tensors in kwargs as
//                      [layer, node_index, tensor_index];
//   keras3             "module"/"registered_name"/"build_config", inbound_nodes as
//                      {"args", "kwargs"} holding __keras_tensor__ objects, DTypePolicy dtypes;
//   tfjs               a TensorFlow.js layers model: modelTopology.model_config (a Keras 2
//                      model) and modelTopology.training_config.
// Nested models (a Sequential or Functional model used as a layer) are inlined; calling one
// several times shares its layers. Shared layers become one layer called at several nodes.
//
// Everything the engine does not implement is refused with InvalidArgument naming the layer,
// its class and the option ("layer 'lam' (Lambda): ..."); nothing is dropped silently.
// Thread-safety: pure functions.

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "trainer/graph/graph.h"
#include "trainer/keras/model_document.h"

namespace lockstep::trainer::keras {

struct KerasModel {
  std::unique_ptr<graph::Graph> graph;
  std::string format;  // keras2-sequential, keras2-functional, keras3, tfjs
  std::string name;
  bool keras3 = false;
  // The compile settings the file carries (Keras 3's compile_config, TF.js's training_config,
  // Keras 2's training_config in an .h5's attributes), or null.
  nlohmann::json training_config;
  std::vector<std::string> output_names;  // the layers that make the outputs
  // The model document the graph was built from (a TF.js file's model_config), and the layer
  // each of its layer entries became, by the entry's address: Keras's weights files name
  // weights by the document's nesting (trainer/keras/weights_file.h walks it).
  std::shared_ptr<const nlohmann::json> config;
  std::map<const nlohmann::json*, graph::Layer*> layer_of;
};
// Keras's model classes (a nested model is one of these used as a layer).
bool IsModelClass(const std::string& class_name);
// A layer entry's class_name and name ("" / its class when absent).
std::string ClassOf(const nlohmann::json& entry);
std::string NameOf(const nlohmann::json& entry);
// The layer entries of a model entry (Sequential's list or a model config's "layers").
const nlohmann::json& LayersOf(const nlohmann::json& model);
// The functional operations Keras 3 writes among layers (NotEqual...): not layers, no weights.
bool IsOpClass(const std::string& class_name);

struct LoadOptions {
  uint64_t seed = 1;  // initial weights (initializers without a seed of their own)
  // > 0: the size every open axis (None) of the model's inputs takes, so the graph has fixed
  // shapes; 0 leaves them open (-1).
  int64_t open_axis_size = 0;
};

absl::StatusOr<KerasModel> LoadKerasModel(const nlohmann::json& doc, const LoadOptions& o = {});
// Reads a .json file (to_json, a config.json, or a TF.js model.json) or a .keras archive.
absl::StatusOr<KerasModel> LoadKerasModelFile(const std::string& path, const LoadOptions& o = {});

}  // namespace lockstep::trainer::keras
