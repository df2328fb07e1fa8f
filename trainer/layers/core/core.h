#pragma once
// The core layers: Dense, the activations as layers (Activation, ReLU, LeakyReLU, ELU,
// Softmax) and Embedding. Each takes its options as a typed struct (the Keras factories fill them).
// Thread-safety: one thread per layer object (graph/layer.h).

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "trainer/graph/activation.h"
#include "trainer/graph/initializer.h"
#include "trainer/graph/layer.h"

namespace lockstep::trainer::graph {

struct DenseOptions {
  int64_t units = 1;
  Activation activation;
  bool use_bias = true;
  Initializer kernel_initializer = GlorotUniform();
  Initializer bias_initializer = Zeros();
  float kernel_l1 = 0, kernel_l2 = 0, bias_l1 = 0, bias_l2 = 0;
};
// y = act(x kernel + bias) over the last axis; kernel [in, units].
std::unique_ptr<Layer> MakeDense(std::string name, DenseOptions o);

struct ReluOptions {
  float max_value = 3.4e38f, negative_slope = 0, threshold = 0;
};

// An activation as a layer (Activation, ReLU, LeakyReLU, ELU, Softmax over the last axis).
std::unique_ptr<Layer> MakeActivation(std::string name, std::string class_name, Activation a);
// Keras's ReLU layer: min(max_value, x) above threshold, negative_slope * (x - threshold)
// below it.
std::unique_ptr<Layer> MakeRelu(std::string name, float max_value, float negative_slope,
                                float threshold);
// A Keras ReLU layer as one of the activations: relu, relu6 (max_value 6) or leaky_relu
// (negative_slope); nullopt for a threshold or other combinations (the GPU and ONNX forms).
std::optional<Activation> ReluActivation(const ReluOptions& r);

struct EmbeddingOptions {
  int64_t input_dim = 1;
  int64_t output_dim = 1;
  Initializer embeddings_initializer = RandomUniform(-0.05f, 0.05f);
  float l1 = 0, l2 = 0;
  bool mask_zero = false;
  // Keras 2's input_length: the per-example input shape it declares (empty: none). Inert,
  // but checked against the input.
  Shape input_length;
};
// ids (floats holding integers in [0, input_dim)) of any shape -> [..., output_dim]; weight
// "embeddings" [input_dim, output_dim]. An id that is not such an integer is reported through
// the CallContext and reads a zero vector. With mask_zero the output mask is id != 0.
std::unique_ptr<Layer> MakeEmbedding(std::string name, EmbeddingOptions o);

}  // namespace lockstep::trainer::graph
