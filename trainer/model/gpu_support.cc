#include "trainer/model/gpu_support.h"

#include <string>

#include "trainer/graph/layers/attention.h"
#include "trainer/graph/layers/conv.h"
#include "trainer/graph/layers/normalization.h"
#include "trainer/graph/layers/pooling.h"
#include "trainer/graph/layers/recurrent.h"

namespace lockstep::trainer {

using graph::OptionsOf;

namespace {

absl::Status Unsupported(const graph::Layer& l, const std::string& why) {
  return absl::FailedPreconditionError("layer '" + l.name() + "' (" + l.class_name() +
                                       ") has no GPU implementation yet: " + why);
}

}  // namespace

std::optional<Activation> ReluActivation(const graph::ReluOptions& r) {
  const bool unbounded = r.max_value >= 3.0e38f;
  if (r.threshold != 0) return std::nullopt;
  if (r.negative_slope == 0 && unbounded) return Activation{Act::kRelu, 0};
  if (r.negative_slope == 0 && r.max_value == 6.0f) return Activation{Act::kRelu6, 0};
  if (unbounded) return Activation{Act::kLeakyRelu, r.negative_slope};
  return std::nullopt;
}

absl::StatusOr<GpuOpKind> ClassifyForGpu(const graph::Layer& l) {
  const std::string& cls = l.class_name();
  if (OptionsOf<graph::DenseOptions>(l)) return GpuOpKind::kDense;
  if (OptionsOf<Activation>(l)) return GpuOpKind::kActivation;
  if (auto r = OptionsOf<graph::ReluOptions>(l)) {
    if (!ReluActivation(*r)) {
      return Unsupported(l, "a ReLU with a threshold, or with both max_value and negative_slope");
    }
    return GpuOpKind::kActivation;
  }
  if (cls == "Flatten" || cls == "Reshape") return GpuOpKind::kReshape;
  if (cls == "RepeatVector") return GpuOpKind::kRepeat;
  if (OptionsOf<graph::DropoutOptions>(l)) return GpuOpKind::kDropout;
  if (OptionsOf<graph::GaussianNoiseOptions>(l)) return GpuOpKind::kNoise;
  if (OptionsOf<graph::RescalingOptions>(l)) return GpuOpKind::kRescaling;
  if (OptionsOf<graph::NormalizationOptions>(l)) return GpuOpKind::kNormalization;
  if (OptionsOf<MergeOp>(l)) return GpuOpKind::kMerge;
  if (OptionsOf<graph::ConcatOptions>(l)) return GpuOpKind::kConcat;
  if (OptionsOf<graph::ConvOptions>(l)) return GpuOpKind::kConv;
  if (OptionsOf<graph::DepthwiseOptions>(l)) return GpuOpKind::kDepthwise;
  if (OptionsOf<graph::SeparableOptions>(l)) return GpuOpKind::kSeparable;
  if (OptionsOf<graph::ConvTransposeOptions>(l)) return GpuOpKind::kConvTranspose;
  if (OptionsOf<graph::PoolOptions>(l)) return GpuOpKind::kPool;
  if (OptionsOf<graph::GlobalPoolOptions>(l)) return GpuOpKind::kGlobalPool;
  if (OptionsOf<graph::BatchNormOptions>(l)) return GpuOpKind::kBatchNorm;
  if (OptionsOf<graph::LayerNormOptions>(l)) return GpuOpKind::kLayerNorm;
  if (OptionsOf<graph::PadCropOptions>(l)) return GpuOpKind::kPadCrop;
  if (OptionsOf<graph::UpSamplingOptions>(l)) return GpuOpKind::kUpSampling;
  if (OptionsOf<graph::EmbeddingOptions>(l)) return GpuOpKind::kEmbedding;
  if (OptionsOf<graph::MaskingOptions>(l)) return GpuOpKind::kMasking;
  if (OptionsOf<graph::CompareOptions>(l)) return GpuOpKind::kCompare;
  if (OptionsOf<graph::MaskWithOptions>(l)) return GpuOpKind::kMaskWith;
  if (auto r = OptionsOf<graph::RnnOptions>(l)) {
    if (r->dropout > 0 || r->recurrent_dropout > 0) {
      return Unsupported(l, "input or recurrent dropout on a recurrent layer");
    }
    if (r->activation.kind == Act::kSoftmax || r->recurrent_activation.kind == Act::kSoftmax) {
      return Unsupported(l, "a softmax activation inside a recurrent cell");
    }
    return GpuOpKind::kRecurrent;
  }
  if (auto b = OptionsOf<graph::BidirectionalOptions>(l)) {
    if (b->merge == graph::BidirectionalMerge::kNone) return Unsupported(l, "merge_mode None");
    if (b->return_state) return Unsupported(l, "return_state");
    for (const graph::Layer* inner : {b->forward, b->backward}) {
      absl::StatusOr<GpuOpKind> k = ClassifyForGpu(*inner);
      if (!k.ok()) return Unsupported(l, std::string(k.status().message()));
      if (*k != GpuOpKind::kRecurrent) return Unsupported(l, "it wraps a " + inner->class_name());
    }
    return GpuOpKind::kBidirectional;
  }
  if (OptionsOf<graph::MultiHeadAttentionOptions>(l)) return GpuOpKind::kAttention;
  if (auto t = OptionsOf<graph::TimeDistributedOptions>(l)) {
    absl::StatusOr<GpuOpKind> k = ClassifyForGpu(*t->inner);
    if (!k.ok()) return Unsupported(l, std::string(k.status().message()));
    return GpuOpKind::kTimeDistributed;
  }
  return Unsupported(l, "its kernels run on the CPU only in this version");
}

MaskRule MaskRuleOf(const graph::Layer& l) {
  // OutputMask only picks one of the pointers it is handed (or the record's own mask): probed
  // with stand-ins, it says where the layer's output mask comes from without running it.
  const Tensor x0, x1, x2, mask;
  const graph::Args probe{.x = {&x0, &x1, &x2}, .mask = {&mask}};
  const graph::Saved saved;
  const Tensor* m = l.OutputMask(probe, saved);
  if (m == nullptr) return MaskRule::kNone;
  return m == &mask ? MaskRule::kFirstInput : MaskRule::kOwn;
}

absl::Status GpuSupported(const graph::Graph& g) {
  // Which tensors carry a mask, followed through the nodes in order.
  std::vector<bool> masked(g.inputs().size(), false);
  auto has_mask = [&](int t) {
    return t >= 0 && static_cast<size_t>(t) < masked.size() && masked[static_cast<size_t>(t)];
  };
  for (size_t i = 0; i < g.num_nodes(); ++i) {
    const graph::Graph::NodeSpec n = g.node(i);
    absl::StatusOr<GpuOpKind> k = ClassifyForGpu(*n.layer);
    if (!k.ok()) return k.status();
    // Only a recurrent layer has several outputs (its states, return_state) or inputs (its
    // initial states).
    if (n.outputs.size() != 1 && *k != GpuOpKind::kRecurrent) {
      return Unsupported(*n.layer, "it has " + std::to_string(n.outputs.size()) + " outputs");
    }
    if (*k == GpuOpKind::kBidirectional && n.inputs.size() > 1) {
      return Unsupported(*n.layer, "initial states passed to a Bidirectional layer");
    }
    const bool in_mask = !n.inputs.empty() && has_mask(n.inputs[0]);
    const graph::Layer* inner = n.layer;
    if (auto t = OptionsOf<graph::TimeDistributedOptions>(*n.layer)) inner = t->inner;
    if (in_mask && OptionsOf<graph::BatchNormOptions>(*inner)) {
      return Unsupported(*n.layer, "it receives a mask (masked batch statistics)");
    }
    const MaskRule rule = MaskRuleOf(*n.layer);
    const bool out_mask = rule == MaskRule::kOwn || (rule == MaskRule::kFirstInput && in_mask);
    const auto o = static_cast<size_t>(n.outputs[0]);
    if (masked.size() <= o) masked.resize(o + 1, false);
    masked[o] = out_mask;
  }
  return absl::OkStatus();
}

}  // namespace lockstep::trainer
