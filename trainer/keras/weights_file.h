#pragma once
// Keras's weights files, written and read through Debian's HDF5, so a model leaves the trainer
// for Keras and a model Keras trained comes in (--initial-weights).
//
// Keras 3 (model.weights.h5 inside a .keras archive, or `model.save_weights("x.weights.h5")`):
// one group per object, on the path Keras's saving walk gives it. A model's layers are under
// "layers/<class in snake_case>", numbered per class in the model's layer order ("dense",
// "dense_1"); a Sequential model's InputLayer is not among its layers, a functional model's is;
// a nested model's layers are under its own path. A layer's sub-objects are under their
// attribute: an RNN's "cell", Bidirectional's "forward_layer" and "backward_layer",
// TimeDistributed's "layer", MultiHeadAttention's "_query_dense", "_key_dense", "_value_dense",
// "_output_dense". Each object's own variables are datasets "<path>/vars/<i>" in creation
// order; the "vars" group's attribute "name" is the object's name.
//
// Keras 2 (`save_weights("x.h5")`, and the "model_weights" group of `model.save("x.h5")`): the
// root attribute layer_names (the model's layers), a group per layer with the attribute
// weight_names ("dense/kernel:0") and a dataset per name. A layer's weights are its trainable
// then its non-trainable ones; a nested model is one layer holding all its layers' weights.
// Keras 2 loads by order (the n-th layer with weights from the n-th such group), and so does
// this reader; names are checked only for what they say in errors.
//
// Values are float32 (Keras 2's Normalization count is an int64, as Keras writes it); a reader
// converts any numeric dataset. Every mismatch (a missing variable, a count or a shape that
// differs) is InvalidArgument naming the file, the layer and the weight; nothing is loaded
// partially (values are staged and assigned only when the whole file fits).
// Thread-safety: plain functions; the model's weights must not be in use.

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/keras/model_loader.h"

namespace lockstep::trainer::keras {

// Where one of the model's weights lives in each layout.
struct KerasVariable {
  graph::Layer* layer = nullptr;
  graph::Weight* weight = nullptr;
  std::string keras3_path;   // "layers/dense/vars/0"; empty where Keras 3 has no such variable
  std::string keras2_group;  // the top-level layer that holds it ("dense", a nested model's name)
  std::string keras2_name;   // "dense/kernel:0"
};

struct WeightLayout {
  std::vector<KerasVariable> variables;  // Keras 3's walk order
  // Every Keras 3 object's group and name, variables or not ("layers/lstm", "lstm").
  std::vector<std::pair<std::string, std::string>> keras3_objects;
  std::vector<std::string> keras2_layers;  // the root's layer_names
};

// The layout of a model the loader built. InvalidArgument when the model has no document (it
// was not loaded from a file) or a layer's weights cannot be placed.
absl::StatusOr<WeightLayout> LayoutOf(const KerasModel& m);

// Keras's naming.to_snake_case, which names Keras 3's groups: "MultiHeadAttention" ->
// "multi_head_attention", "Conv2D" -> "conv2d", "LSTMCell" -> "lstm_cell", "ReLU" -> "re_lu".
std::string KerasSnakeCase(const std::string& class_name);

// Keras 3's model.weights.h5, Keras 2's weights .h5, and the .keras archive (config.json, the
// model document as loaded; metadata.json; model.weights.h5). Each replaces the file at `path`.
absl::Status WriteKeras3Weights(const KerasModel& m, const std::string& path);
absl::Status WriteKeras2Weights(const KerasModel& m, const std::string& path);
absl::Status WriteKerasArchive(const KerasModel& m, const std::string& path);

// Loads weights into the model from a .keras archive, a Keras 3 .weights.h5, or a Keras 2 .h5
// (save_weights or a whole model.save), told apart by their contents.
absl::Status ReadKerasWeights(const std::string& path, KerasModel* m);

}  // namespace lockstep::trainer::keras
