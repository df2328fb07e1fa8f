#include "trainer/graph/graph.h"

#include <algorithm>
#include <cmath>
#include <new>
#include <stdexcept>

#include "trainer/graph/memory.h"
#include "trainer/kernels/cpu/threads.h"

namespace lockstep::trainer::graph {
namespace {

// Zeroes t, large tensors split over the kernels' threads.
void ZeroFill(Tensor* t) {
  float* d = t->data();
  cpu::ParallelFor(t->size(), 1, [&](int64_t b, int64_t e) { std::fill(d + b, d + e, 0.0f); });
}

}  // namespace

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
  run_.reset();
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
  for (const NodeSpec& n : nodes_) {
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
  NodeSpec n;
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
  run_.reset();
  return ids;
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

// The CPU backend of the executor (executor.h): a node is its layer's own Forward and Backward
// on host tensors, each node's call record (its Args and Saved) kept here between the passes.
class CpuBackend {
 public:
  using Value = Tensor;

  CpuBackend(const std::vector<NodeSpec>& nodes, size_t tensors,
             std::vector<std::pair<size_t, size_t>> param_range)
      : args_(nodes.size()),
        saved_(nodes.size()),
        zeros_(tensors),
        param_range_(std::move(param_range)) {}

  // What one pass is given: the step's context (Forward), the ready callback (Backward).
  void Start(const CallContext& ctx) {
    ctx_ = ctx;
    activity_loss_ = 0;
  }
  void StartBackward(const Graph::GradsReady* ready) { ready_ = ready; }
  double activity_loss() const { return activity_loss_; }

  absl::Status Forward(size_t i, const NodeSpec& n, const std::vector<const Tensor*>& x,
                       const std::vector<const Tensor*>& masks, bool training,
                       std::vector<Tensor>* out, const Tensor** mask) {
    Args& a = args_[i];
    a.x = x;
    a.mask = masks;
    if (training != ctx_.training) {
      CallContext fixed = ctx_;
      fixed.training = training;
      n.layer->Forward(a, out, &saved_[i], fixed);
    } else {
      n.layer->Forward(a, out, &saved_[i], ctx_);
    }
    *mask = n.layer->OutputMask(a, saved_[i]);
    return absl::OkStatus();
  }

  // The layer's Backward takes every output's gradient (zeros where none) and fills din[j]
  // for each input that takes one: into the executor's targets, swapped in and out.
  absl::Status Backward(size_t i, const NodeSpec& n, const std::vector<const Tensor*>&,
                        const std::vector<Tensor>& y, const std::vector<const Tensor*>& dy,
                        const std::vector<Tensor*>& dx) {
    dout_.clear();
    for (size_t k = 0; k < y.size(); ++k) {
      if (dy[k] != nullptr) {
        dout_.push_back(dy[k]);
        continue;
      }
      Tensor& z = zeros_[static_cast<size_t>(n.outputs[k])];
      z.Resize(y[k].shape());
      dout_.push_back(&z);
    }
    din_.resize(dx.size());
    for (size_t j = 0; j < dx.size(); ++j) {
      if (dx[j] != nullptr) std::swap(din_[j], *dx[j]);
    }
    n.layer->Backward(args_[i], y, dout_, n.need_din, &din_, &saved_[i]);
    for (size_t j = 0; j < dx.size(); ++j) {
      if (dx[j] != nullptr) std::swap(din_[j], *dx[j]);
    }
    return absl::OkStatus();
  }

  absl::Status Activity(size_t, const NodeSpec& n, const Tensor& y, Tensor* dy) {
    const double loss = ActivityPenalty(n.layer->activity_penalty(), y, dy);
    if (dy == nullptr) activity_loss_ += loss;
    return absl::OkStatus();
  }
  static absl::Status Zeros(const Tensor& like, Tensor* dst) {
    dst->Resize(like.shape());
    ZeroFill(dst);
    return absl::OkStatus();
  }
  static absl::Status Copy(const Tensor& src, Tensor* dst) {
    *dst = src;
    return absl::OkStatus();
  }
  static absl::Status AddInto(Tensor* dst, const Tensor& src) {
    float* gp = dst->data();
    const float* dp = src.data();
    cpu::ParallelFor(dst->size(), 2, [&](int64_t b, int64_t e) {
      float* __restrict g = gp;
      const float* __restrict d = dp;
      for (int64_t j = b; j < e; ++j) g[j] += d[j];
    });
    return absl::OkStatus();
  }

  // After a layer's last backward turn (its first call): its weight regularizers' gradients,
  // then the ready callback with its range of Params().
  void NodeDone(size_t i, const NodeSpec& n) {
    if (!n.first_call) return;
    for (Weight& w : n.layer->weights()) {
      if (!w.trainable || (w.l1 == 0 && w.l2 == 0)) continue;
      for (int64_t j = 0; j < w.value.size(); ++j) {
        const float v = w.value[j];
        w.grad[j] += w.l1 * static_cast<float>((v > 0) - (v < 0)) + 2 * w.l2 * v;
      }
    }
    if (ready_ != nullptr && *ready_ && param_range_[i].second > 0) {
      (*ready_)(param_range_[i].first, param_range_[i].second);
    }
  }

 private:
  std::vector<Args> args_;
  std::vector<Saved> saved_;
  std::vector<Tensor> zeros_;                           // per tensor, for outputs that feed no loss
  std::vector<std::pair<size_t, size_t>> param_range_;  // per node: its layer's Params() range
  std::vector<const Tensor*> dout_;
  std::vector<Tensor> din_;
  CallContext ctx_;
  const Graph::GradsReady* ready_ = nullptr;
  double activity_loss_ = 0;
};

}  // namespace

struct Graph::CpuRun {
  CpuRun(const std::vector<NodeSpec>& nodes, const std::vector<int>& inputs, size_t tensors,
         std::vector<std::pair<size_t, size_t>> param_range)
      : backend(nodes, tensors, std::move(param_range)),
        executor(&nodes, &inputs, tensors, &backend) {}
  CpuBackend backend;
  Executor<CpuBackend> executor;
};

Graph::Graph() = default;
Graph::~Graph() = default;

Graph::CpuRun& Graph::Run() {
  if (run_ != nullptr) return *run_;
  // Each node's layer's range in Params(), reported after its first call's backward.
  std::vector<std::pair<size_t, size_t>> range(nodes_.size(), {0, 0});
  size_t first = 0;
  for (Layer* l : call_order_) {
    size_t count = 0;
    for (const Weight& w : l->weights()) count += w.trainable ? 1 : 0;
    for (size_t n = 0; n < nodes_.size(); ++n) {
      if (nodes_[n].layer == l && nodes_[n].first_call) range[n] = {first, count};
    }
    first += count;
  }
  run_ = std::make_unique<CpuRun>(nodes_, inputs_, shapes_.size(), std::move(range));
  return *run_;
}

const Tensor* Graph::value(int tensor) const {
  (void)producer_.at(static_cast<size_t>(tensor));  // an unknown tensor throws, as before
  return run_ == nullptr ? nullptr : run_->executor.value(tensor);
}

const Tensor* Graph::output_mask(size_t k) const {
  return run_ == nullptr ? nullptr : run_->executor.mask(outputs_.at(k));
}

void Graph::Forward(const std::vector<const Tensor*>& inputs, const CallContext& ctx) {
  CpuRun& r = Run();
  r.backend.Start(ctx);
  // The CPU backend reports no error: a layer reports bad input through ctx.
  (void)r.executor.Forward(inputs, ctx.training);
}

void Graph::Backward(const std::vector<const Tensor*>& doutputs, const GradsReady& ready) {
  CpuRun& r = Run();
  for (Tensor* g : Grads()) ZeroFill(g);
  r.executor.StartBackward();
  for (size_t k = 0; k < outputs_.size(); ++k) {
    if (k < doutputs.size() && doutputs[k] != nullptr) {
      (void)r.executor.Seed(outputs_[k], *doutputs[k]);
    }
  }
  r.backend.StartBackward(&ready);
  (void)r.executor.Backward();
  r.backend.StartBackward(nullptr);
}

double Graph::RegularizationLoss() {
  double loss = run_ == nullptr ? 0.0 : run_->backend.activity_loss();
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
