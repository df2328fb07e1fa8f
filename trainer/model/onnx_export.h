#pragma once
// A graph model's inference graph as an ONNX model (opset 17, IR version 8) for serving (ONNX
// Runtime, TensorRT, Triton...).
//
// The model's input is "input", float32 [batch, ...] as the Keras model takes it (token ids as
// floats where it feeds an Embedding); its output is "output", as the model's last layer gives
// it (probabilities after a softmax). A model of several inputs names them "input_<Keras
// input's name>", of several outputs "output_0", "output_1"... The batch is a symbolic
// dimension. Layers run as in
// inference: dropout, noise and augmentation are identities, batch normalisation uses its
// moving statistics. Tensors stay channels-last as Keras keeps them; convolutions and pooling
// transpose to ONNX's channels-first around their op. Weights are initializers (raw float32).
//
// Each layer is written by its family's exporter (layers/onnx_builder.h). Every layer the
// engine trains is exported except what needs a mask (Embedding with
// mask_zero, Masking, Keras 3's comparison ops, mask= arguments) and a few options whose ONNX
// form needs a shape the model leaves open: those are Unimplemented naming the layer and why.
// The tests check each file with the `onnx` checker and strict shape inference, and evaluate it
// with an independent evaluator of the ONNX operators (PyTorch's functions) against the
// engine's own forward pass.
// Thread-safety: the graph must not be in use.

#include <string>

#include "absl/status/status.h"
#include "trainer/graph/graph.h"

namespace lockstep::trainer {

// Writes `g` to `path` as ONNX; `name` becomes the graph's name.
absl::Status WriteOnnx(graph::Graph& g, const std::string& name, const std::string& path);

}  // namespace lockstep::trainer
