#pragma once
// The ONNX export checked as a test checks it: the graph's state randomised (moving statistics,
// so inference differs from training's), a random batch through the engine in inference mode,
// the export written and handed to trainer/model/testdata/onnx_peer.py (the onnx checker,
// strict shape inference, and an independent evaluation of every operator; ONNX Runtime's too
// where installed), and the outputs compared.
// Thread-safety: test code.

#include <cstdint>
#include <string>

#include "trainer/graph/graph.h"

namespace lockstep::trainer::testing {

// "" when the export passes; "skip: why" when the peer cannot run here (or the export refuses
// the model with Unimplemented: "skip: refused: message"); otherwise what failed.
std::string CheckOnnxExport(graph::Graph& g, const std::string& path, uint64_t seed);

}  // namespace lockstep::trainer::testing
