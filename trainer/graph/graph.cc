#include "trainer/graph/graph.h"

#include <algorithm>
#include <cmath>
#include <new>
#include <stdexcept>

#include "trainer/graph/memory.h"

namespace lockstep::trainer::graph {

Weight& Layer::AddWeight(std::string name, Tensor init, bool trainable) {
  Weight w;
  w.name = std::move(name);
  w.trainable = trainable && trainable_;
  if (w.trainable) w.grad = Tensor(init.shape());
  w.value = std::move(init);
  weights_.push_back(std::move(w));
  return weights_.back();
}

absl::Status LayerError(const Layer& l, const std::string& message) {
  return absl::InvalidArgumentError("layer '" + l.name() + "' (" + l.class_name() +
                                    "): " + message);
}

int Graph::AddInput(std::string name, Shape shape) {
  const int id = static_cast<int>(shapes_.size());
  shapes_.push_back(std::move(shape));
  producer_.push_back(-1);
  requires_grad_.push_back(false);
  inputs_.push_back(id);
  input_names_.push_back(std::move(name));
  indexed_ = false;
  return id;
}

Layer* Graph::AddLayer(std::unique_ptr<Layer> layer) {
  layers_.push_back(std::move(layer));
  return layers_.back().get();
}

const Layer* Graph::producer(int tensor) const {
  const int n = producer_.at(static_cast<size_t>(tensor));
  return n < 0 ? nullptr : nodes_[static_cast<size_t>(n)].layer;
}

std::vector<const Layer*> Graph::Consumers(int tensor) const {
  std::vector<const Layer*> out;
  for (const Node& n : nodes_) {
    if (std::find(n.inputs.begin(), n.inputs.end(), tensor) != n.inputs.end()) {
      out.push_back(n.layer);
    }
  }
  return out;
}

absl::StatusOr<std::vector<int>> Graph::Call(Layer* layer, const std::vector<int>& inputs,
                                             const BuildContext& ctx,
                                             std::optional<bool> training) {
  std::vector<Shape> in_shapes;
  for (int t : inputs) {
    if (t < 0 || static_cast<size_t>(t) >= shapes_.size()) {
      return LayerError(*layer, "called on an unknown tensor");
    }
    in_shapes.push_back(shapes_[static_cast<size_t>(t)]);
  }
  const bool first = std::find(call_order_.begin(), call_order_.end(), layer) == call_order_.end();
  absl::StatusOr<std::vector<Shape>> out;
  try {
    out = layer->Build(in_shapes, ctx);
  } catch (const WeightTooLarge& e) {
    return LayerError(*layer, e.what());
  } catch (const std::bad_alloc&) {
    return LayerError(*layer, "its weights do not fit in memory (" +
                                  Bytes(static_cast<double>(AvailableMemoryBytes())) +
                                  " available)");
  } catch (const std::length_error&) {
    return LayerError(*layer, "its weights are larger than any allocation can be");
  }
  if (!out.ok()) return out.status();
  if (first) call_order_.push_back(layer);
  Node n;
  n.layer = layer;
  n.inputs = inputs;
  n.first_call = first;
  n.training = training;
  bool any_weights = false;
  for (const Weight& w : layer->weights()) any_weights |= w.trainable;
  bool needs_grad = any_weights;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const bool need = layer->Differentiable(i) && requires_grad_[static_cast<size_t>(inputs[i])];
    n.need_din.push_back(need);
    needs_grad |= need;
  }
  const int node_id = static_cast<int>(nodes_.size());
  for (Shape& s : *out) {
    n.outputs.push_back(static_cast<int>(shapes_.size()));
    shapes_.push_back(std::move(s));
    producer_.push_back(node_id);
    requires_grad_.push_back(needs_grad);
  }
  std::vector<int> ids = n.outputs;
  nodes_.push_back(std::move(n));
  indexed_ = false;
  return ids;
}

void Graph::Index() {
  // Each node's layer's range in Params(), reported after its first call's backward.
  param_range_.assign(nodes_.size(), {0, 0});
  size_t first = 0;
  for (Layer* l : call_order_) {
    size_t count = 0;
    for (const Weight& w : l->weights()) count += w.trainable ? 1 : 0;
    for (size_t n = 0; n < nodes_.size(); ++n) {
      if (nodes_[n].layer == l && nodes_[n].first_call) param_range_[n] = {first, count};
    }
    first += count;
  }
  masks_.assign(shapes_.size(), nullptr);
  grads_.resize(shapes_.size());
  zeros_.resize(shapes_.size());
  has_grad_.assign(shapes_.size(), false);
  input_values_.assign(inputs_.size(), nullptr);
  indexed_ = true;
}

const Tensor* Graph::value(int tensor) const {
  const int n = producer_.at(static_cast<size_t>(tensor));
  if (n < 0) {
    const auto it = std::find(inputs_.begin(), inputs_.end(), tensor);
    return input_values_[static_cast<size_t>(it - inputs_.begin())];
  }
  const Node& node = nodes_[static_cast<size_t>(n)];
  const auto k = std::find(node.outputs.begin(), node.outputs.end(), tensor) - node.outputs.begin();
  return &node.out[static_cast<size_t>(k)];
}

namespace {

// An activity penalty on y, and (into dy, when given) its gradient.
double ActivityPenalty(const Layer::ActivityPenalty& p, const Tensor& y, Tensor* dy) {
  const double scale = p.per_example && y.rank() > 0 ? 1.0 / static_cast<double>(y.dim(0)) : 1.0;
  double a = 0, q = 0;
  for (int64_t i = 0; i < y.size(); ++i) {
    const float v = y[i];
    a += std::abs(v);
    q += static_cast<double>(v) * v;
    if (dy != nullptr) {
      (*dy)[i] += static_cast<float>(
          scale * (p.l1 * static_cast<double>((v > 0) - (v < 0)) + 2.0 * p.l2 * v));
    }
  }
  return scale * (p.l1 * a + p.l2 * q);
}

}  // namespace

void Graph::Forward(const std::vector<const Tensor*>& inputs, const CallContext& ctx) {
  if (!indexed_) Index();
  activity_loss_ = 0;
  for (size_t i = 0; i < inputs_.size(); ++i) {
    input_values_[i] = inputs.at(i);
    masks_[static_cast<size_t>(inputs_[i])] = nullptr;
  }
  for (Node& n : nodes_) {
    n.args.x.clear();
    n.args.mask.clear();
    for (int t : n.inputs) {
      n.args.x.push_back(value(t));
      n.args.mask.push_back(masks_[static_cast<size_t>(t)]);
    }
    n.out.resize(n.outputs.size());
    if (n.training && *n.training != ctx.training) {
      CallContext fixed = ctx;
      fixed.training = *n.training;
      n.layer->Forward(n.args, &n.out, &n.saved, fixed);
    } else {
      n.layer->Forward(n.args, &n.out, &n.saved, ctx);
    }
    if (n.layer->activity_penalty().any() && !n.out.empty()) {
      activity_loss_ += ActivityPenalty(n.layer->activity_penalty(), n.out[0], nullptr);
    }
    const Tensor* m = n.layer->OutputMask(n.args, n.saved);
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      masks_[static_cast<size_t>(n.outputs[k])] = k < n.layer->MaskedOutputs() ? m : nullptr;
    }
  }
}

void Graph::Backward(const std::vector<const Tensor*>& doutputs, const GradsReady& ready) {
  for (Tensor* g : Grads()) g->Fill(0.0f);
  std::fill(has_grad_.begin(), has_grad_.end(), false);
  for (size_t k = 0; k < outputs_.size(); ++k) {
    if (k >= doutputs.size() || doutputs[k] == nullptr) continue;
    const auto t = static_cast<size_t>(outputs_[k]);
    if (has_grad_[t]) {
      for (int64_t i = 0; i < grads_[t].size(); ++i) grads_[t][i] += (*doutputs[k])[i];
    } else {
      grads_[t] = *doutputs[k];
      has_grad_[t] = true;
    }
  }
  std::vector<const Tensor*> dout;
  for (size_t ni = nodes_.size(); ni-- > 0;) {
    Node& n = nodes_[ni];
    if (n.layer->activity_penalty().any() && !n.outputs.empty()) {
      const auto t = static_cast<size_t>(n.outputs[0]);
      if (!has_grad_[t]) {
        grads_[t].Resize(n.out[0].shape());
        grads_[t].Fill(0.0f);
        has_grad_[t] = true;
      }
      ActivityPenalty(n.layer->activity_penalty(), n.out[0], &grads_[t]);
    }
    bool any = false;
    dout.clear();
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      const auto t = static_cast<size_t>(n.outputs[k]);
      if (has_grad_[t]) {
        any = true;
        dout.push_back(&grads_[t]);
      } else {
        zeros_[t].Resize(n.out[k].shape());
        dout.push_back(&zeros_[t]);
      }
    }
    if (any) {
      n.din.resize(n.inputs.size());
      n.layer->Backward(n.args, n.out, dout, n.need_din, &n.din, &n.saved);
      for (size_t i = 0; i < n.inputs.size(); ++i) {
        if (!n.need_din[i]) continue;
        const auto t = static_cast<size_t>(n.inputs[i]);
        if (has_grad_[t]) {
          float* g = grads_[t].data();
          const float* d = n.din[i].data();
          for (int64_t j = 0; j < grads_[t].size(); ++j) g[j] += d[j];
        } else {
          std::swap(grads_[t], n.din[i]);
          has_grad_[t] = true;
        }
      }
    }
    if (n.first_call) {
      for (Weight& w : n.layer->weights()) {
        if (!w.trainable || (w.l1 == 0 && w.l2 == 0)) continue;
        for (int64_t j = 0; j < w.value.size(); ++j) {
          const float v = w.value[j];
          w.grad[j] += w.l1 * static_cast<float>((v > 0) - (v < 0)) + 2 * w.l2 * v;
        }
      }
    }
    if (ready && n.first_call && param_range_[ni].second > 0) {
      ready(param_range_[ni].first, param_range_[ni].second);
    }
  }
}

double Graph::RegularizationLoss() {
  double loss = activity_loss_;
  for (Layer* l : call_order_) {
    for (const Weight& w : l->weights()) {
      if (!w.trainable || (w.l1 == 0 && w.l2 == 0)) continue;
      double a = 0, q = 0;
      for (float v : w.value.values()) {
        a += std::abs(v);
        q += static_cast<double>(v) * v;
      }
      loss += w.l1 * a + w.l2 * q;
    }
  }
  return loss;
}

std::vector<Tensor*> Graph::Params() {
  std::vector<Tensor*> out;
  for (Layer* l : call_order_) {
    for (Weight& w : l->weights()) {
      if (w.trainable) out.push_back(&w.value);
    }
  }
  return out;
}

std::vector<Tensor*> Graph::Grads() {
  std::vector<Tensor*> out;
  for (Layer* l : call_order_) {
    for (Weight& w : l->weights()) {
      if (w.trainable) out.push_back(&w.grad);
    }
  }
  return out;
}

std::vector<Weight*> Graph::State() {
  std::vector<Weight*> out;
  for (Layer* l : call_order_) {
    for (Weight& w : l->weights()) {
      if (!w.trainable) out.push_back(&w);
    }
  }
  return out;
}

std::vector<std::pair<Layer*, Weight*>> Graph::AllWeights() {
  std::vector<std::pair<Layer*, Weight*>> out;
  for (Layer* l : call_order_) {
    for (Weight& w : l->weights()) out.emplace_back(l, &w);
  }
  return out;
}

int64_t Graph::NumParams() {
  int64_t n = 0;
  for (Tensor* t : Params()) n += t->size();
  return n;
}

}  // namespace lockstep::trainer::graph
