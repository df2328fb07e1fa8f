#pragma once
// The core layers: Dense, activations as layers, shape layers, noise, and merges. Each takes
// its options as a typed struct (the Keras loader fills them from a config).
// Thread-safety: one thread per layer object (layer.h).

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

// The options of the layers made from loose arguments below, as OptionsOf reads them back.
struct ReluOptions {
  float max_value = 3.4e38f, negative_slope = 0, threshold = 0;
};
struct DropoutOptions {
  float rate = 0;
  Shape noise_shape;
};
struct GaussianNoiseOptions {
  float stddev = 0;
};
struct RescalingOptions {
  std::vector<float> scale, offset;
};
struct ConcatOptions {
  int64_t axis = -1;  // as given (negative counts from the end)
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

struct ReshapeOptions {
  Shape target;  // Reshape's (empty for Flatten)
  bool flatten = false;
};
std::unique_ptr<Layer> MakeFlatten(std::string name);
// Reshape to `target` (per example; one -1 is inferred).
std::unique_ptr<Layer> MakeReshape(std::string name, Shape target);
struct RepeatOptions {
  int64_t n = 1;
};
// [batch, d] -> [batch, n, d].
std::unique_ptr<Layer> MakeRepeatVector(std::string name, int64_t n);
// Inverted dropout in training (kept units scaled by 1/(1-rate)); identity otherwise.
// `noise_shape` (per example, 1 = broadcast along that axis; empty: none) as Keras's.
std::unique_ptr<Layer> MakeDropout(std::string name, float rate, Shape noise_shape);
// Adds N(0, stddev) noise in training.
std::unique_ptr<Layer> MakeGaussianNoise(std::string name, float stddev);
// y = x * scale + offset; a list of scales or offsets applies along the last axis.
std::unique_ptr<Layer> MakeRescaling(std::string name, std::vector<float> scale,
                                     std::vector<float> offset);

// Elementwise merge of inputs of one shape (Keras broadcasts size-1 axes; so does this).
std::unique_ptr<Layer> MakeMerge(std::string name, std::string class_name, MergeOp op);
// Concatenation along `axis` (negative counts from the end, as Keras's; batch is axis 0).
std::unique_ptr<Layer> MakeConcatenate(std::string name, int64_t axis);

struct CompareOptions {
  CompareOp op = CompareOp::kEqual;
  float constant = 0;
};
struct MaskingOptions {
  float value = 0;
};
struct MaskWithOptions {};
// 1 where `x op constant` holds, else 0 (Keras 3's comparison ops recorded as layers, such as
// the NotEqual that makes a padding mask). Carries no gradient.
std::unique_ptr<Layer> MakeCompare(std::string name, std::string class_name, CompareOp op,
                                   float constant);
// Keras's Masking: a time step whose features all equal `value` is masked (zeroed, and 0 in
// the [batch, time] mask that follows the output).
std::unique_ptr<Layer> MakeMasking(std::string name, float value);
// Inputs [x, m]: passes x through with m as its mask (a call's `mask=` argument).
std::unique_ptr<Layer> MakeMaskWith(std::string name);

}  // namespace lockstep::trainer::graph
