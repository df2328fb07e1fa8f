#pragma once
// Executor: runs a graph's nodes (Graph, graph.h) forward and backward on one backend — the one
// traversal every device shares. The graph is the structure (which layer each node calls, on
// which tensors); a backend is what a node becomes on a device and the tensors it holds there:
// the CPU's (graph.cc: the layer's own Forward and Backward on host tensors) and the GPU's
// (model/device_graph.cc: the device op the layer's family registered, on device tensors).
// What the executor decides, once for every backend:
//   - forward: nodes in order, each given its inputs' values and masks and its training mode
//     (a node's fixed mode wins); its outputs' masks follow from it (the first MaskedOutputs);
//     an activity regularizer's penalty is taken on its first output;
//   - backward: nodes in reverse; a tensor's gradient is the sum of its readers' (the first
//     contribution lands in place, later ones — another reader's, or the same node reading
//     the tensor twice — through scratch); a node none of whose outputs feeds a loss is
//     skipped, as is one with no trained weight and no input that takes a gradient; the
//     activity regularizer's gradient joins its output's;
//   - errors: a backend's status comes back naming the node's layer.
//
// A backend B provides (static dispatch: the CPU's per-element loops stay inlined):
//   using Value;                              // a tensor on the device
//   absl::Status Forward(size_t node, const NodeSpec&, const std::vector<const Value*>& x,
//                        const std::vector<const Value*>& masks, bool training,
//                        std::vector<Value>* out, const Value** mask);
//   absl::Status Backward(size_t node, const NodeSpec&, const std::vector<const Value*>& x,
//                         const std::vector<Value>& y, const std::vector<const Value*>& dy,
//                         const std::vector<Value*>& dx);   // dy[k] null: no gradient
//   absl::Status Activity(size_t node, const NodeSpec&, const Value& y, Value* dy);
//   absl::Status Zeros(const Value& like, Value* dst);    // dst = zeros shaped as like
//   absl::Status Copy(const Value& src, Value* dst);
//   absl::Status AddInto(Value* dst, const Value& src);
//   void NodeDone(size_t node, const NodeSpec&);          // after each node's backward turn
// Thread-safety: one thread per executor.

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "trainer/graph/layer.h"

namespace lockstep::trainer::graph {

#define LOCKSTEP_EXECUTOR_RETURN_IF_ERROR(expr) \
  do {                                          \
    absl::Status s_ = (expr);                   \
    if (!s_.ok()) return s_;                    \
  } while (0)

// One node as the graph called it: its layer, its input and output tensors, which inputs take
// a gradient, its fixed training mode, and whether it is the layer's first call (a shared
// layer's gradients are final after its first call's backward, the last one run).
struct NodeSpec {
  Layer* layer = nullptr;
  std::vector<int> inputs, outputs;
  std::vector<bool> need_din;
  std::optional<bool> training;
  bool first_call = false;
};

// "layer 'name' (Class)<what>: message", with the status's code.
inline absl::Status AtLayer(const Layer& l, const char* what, const absl::Status& s) {
  return absl::Status(s.code(), "layer '" + l.name() + "' (" + l.class_name() + ")" + what + ": " +
                                    std::string(s.message()));
}

template <typename B>
class Executor {
 public:
  using Value = typename B::Value;

  // `nodes` (in call order) and `inputs` (the graph's input tensors) outlive the executor;
  // `tensors` is how many tensors the graph numbers.
  Executor(const std::vector<NodeSpec>* nodes, const std::vector<int>* inputs, size_t tensors,
           B* backend)
      : nodes_(nodes),
        inputs_(inputs),
        backend_(backend),
        values_(tensors, nullptr),
        masks_(tensors, nullptr),
        grads_(tensors),
        has_grad_(tensors, false),
        out_(nodes->size()) {
    for (size_t i = 0; i < nodes->size(); ++i) out_[i].resize((*nodes)[i].outputs.size());
  }

  // Runs every node on the graph's input values (which stay alive and unchanged until the
  // backward pass has run); the inputs carry no mask.
  absl::Status Forward(const std::vector<const Value*>& inputs, bool training) {
    for (size_t i = 0; i < inputs_->size(); ++i) {
      const auto t = static_cast<size_t>((*inputs_)[i]);
      values_[t] = inputs.at(i);
      masks_[t] = nullptr;
    }
    for (size_t i = 0; i < nodes_->size(); ++i) {
      const NodeSpec& n = (*nodes_)[i];
      x_.clear();
      xmask_.clear();
      for (int t : n.inputs) {
        x_.push_back(values_[static_cast<size_t>(t)]);
        xmask_.push_back(masks_[static_cast<size_t>(t)]);
      }
      const Value* mask = nullptr;
      std::vector<Value>& out = out_[i];
      absl::Status s =
          backend_->Forward(i, n, x_, xmask_, n.training.value_or(training), &out, &mask);
      if (!s.ok()) return AtLayer(*n.layer, "", s);
      const size_t masked = n.layer->MaskedOutputs();
      for (size_t k = 0; k < n.outputs.size(); ++k) {
        const auto t = static_cast<size_t>(n.outputs[k]);
        values_[t] = &out[k];
        masks_[t] = k < masked ? mask : nullptr;
      }
      if (n.layer->activity_penalty().any() && !out.empty()) {
        s = backend_->Activity(i, n, out[0], nullptr);
        if (!s.ok()) return AtLayer(*n.layer, " activity regularizer", s);
      }
    }
    return absl::OkStatus();
  }

  // A tensor's value and mask after Forward (null before).
  const Value* value(int tensor) const { return values_[static_cast<size_t>(tensor)]; }
  const Value* mask(int tensor) const { return masks_[static_cast<size_t>(tensor)]; }

  // The backward pass: StartBackward, the loss's gradients by Seed or GradientSlot, Backward.
  void StartBackward() { std::fill(has_grad_.begin(), has_grad_.end(), false); }
  // Adds g to dL/d(tensor) (copies it in, for the first).
  absl::Status Seed(int tensor, const Value& g) {
    const auto t = static_cast<size_t>(tensor);
    if (has_grad_[t]) return backend_->AddInto(&grads_[t], g);
    has_grad_[t] = true;
    return backend_->Copy(g, &grads_[t]);
  }
  // dL/d(tensor), for the caller to fill in place: the tensor's only seed.
  Value* GradientSlot(int tensor) {
    has_grad_[static_cast<size_t>(tensor)] = true;
    return &grads_[static_cast<size_t>(tensor)];
  }

  // Every node's backward pass, last first.
  absl::Status Backward() {
    for (size_t i = nodes_->size(); i-- > 0;) {
      LOCKSTEP_EXECUTOR_RETURN_IF_ERROR(BackwardNode(i));
      backend_->NodeDone(i, (*nodes_)[i]);
    }
    return absl::OkStatus();
  }

 private:
  absl::Status BackwardNode(size_t i) {
    const NodeSpec& n = (*nodes_)[i];
    const std::vector<Value>& out = out_[i];
    if (n.layer->activity_penalty().any() && !n.outputs.empty()) {
      // The activity regularizer's gradient joins the output's, once its readers' are in.
      const auto o = static_cast<size_t>(n.outputs[0]);
      if (!has_grad_[o]) {
        LOCKSTEP_EXECUTOR_RETURN_IF_ERROR(backend_->Zeros(out[0], &grads_[o]));
        has_grad_[o] = true;
      }
      absl::Status s = backend_->Activity(i, n, out[0], &grads_[o]);
      if (!s.ok()) return AtLayer(*n.layer, " activity regularizer", s);
    }
    dy_.clear();
    bool any = false;
    for (int t : n.outputs) {
      const auto k = static_cast<size_t>(t);
      dy_.push_back(has_grad_[k] ? &grads_[k] : nullptr);
      any |= has_grad_[k];
    }
    if (!any) return absl::OkStatus();  // feeds no loss: every gradient through it is zero
    const size_t inputs = n.inputs.size();
    dx_.assign(inputs, nullptr);
    if (scratch_.size() < inputs) scratch_.resize(inputs);
    bool takes = false;
    for (size_t j = 0; j < inputs; ++j) {
      if (!n.need_din[j]) continue;
      const int t = n.inputs[j];
      // The first contribution lands in the tensor's gradient, later ones (another reader's,
      // or this node's own when it reads the tensor twice) in scratch.
      const auto jj = static_cast<std::ptrdiff_t>(j);
      const bool taken =
          has_grad_[static_cast<size_t>(t)] ||
          std::find(n.inputs.begin(), n.inputs.begin() + jj, t) != n.inputs.begin() + jj;
      dx_[j] = taken ? &scratch_[j] : &grads_[static_cast<size_t>(t)];
      takes = true;
    }
    const std::vector<Weight>& w = n.layer->weights();
    if (!takes && std::none_of(w.begin(), w.end(), [](const Weight& v) { return v.trainable; })) {
      return absl::OkStatus();  // nothing to compute: no weight to train, no input gradient
    }
    x_.clear();
    for (int t : n.inputs) x_.push_back(values_[static_cast<size_t>(t)]);
    absl::Status s = backend_->Backward(i, n, x_, out, dy_, dx_);
    if (!s.ok()) return AtLayer(*n.layer, " backward", s);
    for (size_t j = 0; j < inputs; ++j) {
      if (dx_[j] == nullptr) continue;
      const auto t = static_cast<size_t>(n.inputs[j]);
      if (dx_[j] == &scratch_[j]) {
        LOCKSTEP_EXECUTOR_RETURN_IF_ERROR(backend_->AddInto(&grads_[t], scratch_[j]));
      }
      has_grad_[t] = true;
    }
    return absl::OkStatus();
  }

  const std::vector<NodeSpec>* nodes_;
  const std::vector<int>* inputs_;
  B* backend_;
  std::vector<const Value*> values_;  // per tensor: the caller's input, or a node's output
  std::vector<const Value*> masks_;   // per tensor: its mask (the backend's), or null
  std::vector<Value> grads_;          // per tensor: dL/d(tensor)
  std::vector<bool> has_grad_;
  std::vector<std::vector<Value>> out_;  // per node: its outputs
  std::vector<Value> scratch_;           // per input of a node: a later gradient contribution
  std::vector<const Value*> x_, xmask_, dy_;
  std::vector<Value*> dx_;
};

#undef LOCKSTEP_EXECUTOR_RETURN_IF_ERROR

}  // namespace lockstep::trainer::graph
