// The registrations of SimpleRNN, LSTM, GRU, Bidirectional and TimeDistributed: their Keras
// classes, which of them run on the GPU, and their ONNX exporters.
#include "trainer/layers/registry.h"
#include "trainer/layers/rnn/rnn.h"

namespace lockstep::trainer::layers::rnn {

namespace {

// A recurrent layer on the GPU: not with dropout, nor a softmax inside its cell.
absl::Status RnnOnGpu(const graph::Layer& l, const GpuNode&) {
  const graph::RnnOptions o = *graph::OptionsOf<graph::RnnOptions>(l);
  if (o.dropout > 0 || o.recurrent_dropout > 0) {
    return GpuRefusal(l, "input or recurrent dropout on a recurrent layer");
  }
  if (o.activation.kind == Act::kSoftmax || o.recurrent_activation.kind == Act::kSoftmax) {
    return GpuRefusal(l, "a softmax activation inside a recurrent cell");
  }
  return absl::OkStatus();
}

}  // namespace

void RegisterKeras(Registry& r);  // keras.cc
void RegisterOnnx(Registry& r);   // onnx.cc

void Register(Registry& r) {
  RegisterKeras(r);
  r.SupportsGpu<graph::RnnOptions>(RnnOnGpu, /*multiple_outputs=*/true);
  r.SupportsGpu<graph::BidirectionalOptions>([](const graph::Layer& l, const GpuNode& n) {
    const graph::BidirectionalOptions b = *graph::OptionsOf<graph::BidirectionalOptions>(l);
    if (b.merge == graph::BidirectionalMerge::kNone) return GpuRefusal(l, "merge_mode None");
    if (b.return_state) return GpuRefusal(l, "return_state");
    if (n.inputs > 1) return GpuRefusal(l, "initial states passed to a Bidirectional layer");
    for (const graph::Layer* inner : {b.forward, b.backward}) {
      if (inner->options_type() != typeid(graph::RnnOptions)) {
        return GpuRefusal(l, "it wraps a " + inner->class_name());
      }
      if (absl::Status s = RnnOnGpu(*inner, {}); !s.ok()) {
        return GpuRefusal(l, std::string(s.message()));
      }
    }
    return absl::OkStatus();
  });
  // The wrapped layer's verdict on the same node.
  r.SupportsGpu<graph::TimeDistributedOptions>([&r](const graph::Layer& l, const GpuNode& n) {
    const graph::Layer& inner = *graph::OptionsOf<graph::TimeDistributedOptions>(l)->inner;
    absl::Status s = r.GpuSupported(inner, n);
    return s.ok() ? s : GpuRefusal(l, std::string(s.message()));
  });
  RegisterOnnx(r);
}

}  // namespace lockstep::trainer::layers::rnn
