#include "trainer/model/gpu_support.h"

#include <vector>

#include "trainer/layers/registry.h"

namespace lockstep::trainer {

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
  const layers::Registry& registry = layers::Registry::Get();
  // Which tensors carry a mask, followed through the nodes in order.
  std::vector<bool> masked(g.inputs().size(), false);
  auto has_mask = [&](int t) {
    return t >= 0 && static_cast<size_t>(t) < masked.size() && masked[static_cast<size_t>(t)];
  };
  for (size_t i = 0; i < g.num_nodes(); ++i) {
    const graph::NodeSpec& n = g.node(i);
    const bool in_mask = !n.inputs.empty() && has_mask(n.inputs[0]);
    if (absl::Status s = registry.GpuSupported(
            *n.layer,
            {.inputs = n.inputs.size(), .outputs = n.outputs.size(), .input_masked = in_mask});
        !s.ok()) {
      return s;
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
