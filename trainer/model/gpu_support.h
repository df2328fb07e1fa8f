#pragma once
// Which graph layers the GPU engine runs (model/device_graph.h), decided from the layers'
// options alone, so the trainer can place a model before it starts a GPU (and without CUDA).
// Thread-safety: pure functions.

#include <optional>

#include "absl/status/statusor.h"
#include "trainer/graph/graph.h"
#include "trainer/graph/layers/core.h"

namespace lockstep::trainer {

// What a layer becomes on the GPU.
enum class GpuOpKind {
  kDense,
  kActivation,  // Activation, Softmax, LeakyReLU, ELU and ReLU layers
  kReshape,     // Flatten, Reshape
  kRepeat,
  kDropout,
  kNoise,
  kRescaling,
  kNormalization,
  kMerge,
  kConcat,
  kConv,
  kDepthwise,
  kSeparable,
  kConvTranspose,
  kPool,
  kGlobalPool,
  kBatchNorm,
  kLayerNorm,
  kPadCrop,
  kUpSampling,
  kEmbedding,
  kRecurrent,  // SimpleRNN, LSTM, GRU
  kBidirectional,
  kTimeDistributed,
  kAttention,  // MultiHeadAttention
  kMasking,
  kCompare,   // Equal, NotEqual, Greater... against a constant
  kMaskWith,  // a call's mask= argument
};

// Where a node's output mask comes from, as the CPU layer's OutputMask decides: none, its first
// input's (most layers pass it through), or the layer itself (Embedding with mask_zero, Masking,
// a mask= argument).
enum class MaskRule { kNone, kFirstInput, kOwn };
MaskRule MaskRuleOf(const graph::Layer& l);

// The layer's op, or FailedPrecondition "layer 'name' (Class) has no GPU implementation yet:
// why".
absl::StatusOr<GpuOpKind> ClassifyForGpu(const graph::Layer& l);
// OK when every node of `g` has a GPU op, else the first refusal. Masks flow on the GPU as on
// the CPU; a BatchNormalization that receives one (masked batch statistics) is refused.
absl::Status GpuSupported(const graph::Graph& g);

// A Keras ReLU layer as one of the activations the kernels have: relu, relu6 (max_value 6) or
// leaky_relu (negative_slope); nullopt for a threshold or other combinations.
std::optional<Activation> ReluActivation(const graph::ReluOptions& r);

}  // namespace lockstep::trainer
