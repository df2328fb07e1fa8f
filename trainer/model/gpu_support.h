#pragma once
// Whether a graph runs on the GPU engine (model/device_graph.h), decided from its layers alone
// through the layer registry (each family says which of its layers run there: layers/registry.h),
// so the trainer can place a model before it starts a GPU, and without CUDA.
// Thread-safety: pure functions.

#include "absl/status/statusor.h"
#include "trainer/graph/graph.h"

namespace lockstep::trainer {

// Where a node's output mask comes from, as the CPU layer's OutputMask decides: none, its first
// input's (most layers pass it through), or the layer itself (Embedding with mask_zero, Masking,
// a mask= argument).
enum class MaskRule { kNone, kFirstInput, kOwn };
MaskRule MaskRuleOf(const graph::Layer& l);

// OK when every node of `g` runs on the GPU, else the first refusal: FailedPrecondition "layer
// 'name' (Class) has no GPU implementation yet: why". Masks flow on the GPU as on the CPU; each
// node's check sees whether its input carries one.
absl::Status GpuSupported(const graph::Graph& g);

}  // namespace lockstep::trainer
