#include "trainer/model/device_graph.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <string>

#include "trainer/kernels/cuda/check.h"
#include "trainer/kernels/cuda/elementwise.h"
#include "trainer/kernels/cuda/loss.h"
#include "trainer/layers/gpu_op.h"
#include "trainer/layers/registry.h"
#include "trainer/model/gpu_support.h"

namespace lockstep::trainer {

using cuda::DeviceTensor;
using cuda::DType;
using cuda::GpuContext;
using GraphLayer = graph::Layer;
using layers::DeviceOp;
using layers::DeviceWeight;
using layers::LayerWeights;
using layers::StepInfo;
using layers::ViewOf;

namespace {

uint64_t Mix(uint64_t a, uint64_t b) {
  uint64_t z = a + 0x9E3779B97F4A7C15ull * (b + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

// The per-layer device state the ops point into; kept apart from the ops so a shared layer's
// nodes see one record.
struct DeviceGraphLayers {
  std::map<const GraphLayer*, std::unique_ptr<LayerWeights>> weights;
  std::vector<cuda::DeviceBuffer> bad;  // per counter (an Embedding's): ids outside its table
};

DeviceGraph::~DeviceGraph() = default;

namespace {

// The device op of a call of `l` whose per-example output shape is `out`, over the weights `w`:
// the maker its family registered.
absl::StatusOr<std::unique_ptr<DeviceOp>> MakeOp(GpuContext* ctx, const GraphLayer& l,
                                                 const LayerWeights& w, const Shape& out,
                                                 DType compute, DeviceGraphLayers* records) {
  absl::StatusOr<const layers::GpuEntry*> e = layers::Registry::Get().Gpu(l);
  if (!e.ok()) return e.status();
  if (!(*e)->make) return layers::GpuRefusal(l, "this build has no GPU op for it");
  return (*e)->make(layers::GpuOpArgs{
      .ctx = ctx,
      .layer = l,
      .weights = w,
      .out = out,
      .compute = compute,
      .bad_input_counter = [ctx, records]() -> absl::StatusOr<int*> {
        absl::StatusOr<cuda::DeviceBuffer> bad =
            cuda::DeviceBuffer::Make(ctx->allocator(), sizeof(int));
        if (!bad.ok()) return bad.status();
        records->bad.push_back(std::move(*bad));
        return records->bad.back().as<int>();
      },
      .inner =
          [ctx, &w, compute, records](const GraphLayer& inner, const Shape& inner_out) {
            return MakeOp(ctx, inner, w, inner_out, compute, records);
          }});
}

}  // namespace

absl::StatusOr<std::unique_ptr<DeviceGraph>> DeviceGraph::Create(GpuContext* ctx, GraphModel& host,
                                                                 DType compute, uint64_t seed) {
  graph::Graph& g = host.graph();
  LOCKSTEP_RETURN_IF_ERROR(GpuSupported(g));
  std::unique_ptr<DeviceGraph> d(new DeviceGraph);
  d->ctx_ = ctx;
  d->host_ = &host;
  d->seed_ = seed;

  // The weights: trainable (Params() order) then the rest, as the host graph lists them.
  std::vector<Tensor*> trainable = g.Params(), state;
  for (graph::Weight* w : g.State()) state.push_back(&w->value);
  LOCKSTEP_RETURN_IF_ERROR(d->weights_.Init(ctx, trainable, state, compute));
  std::map<const Tensor*, size_t> index;  // host weight -> its place in the flat buffers
  for (size_t i = 0; i < trainable.size(); ++i) index[trainable[i]] = i;
  for (size_t i = 0; i < state.size(); ++i) index[state[i]] = trainable.size() + i;
  for (const auto& [layer, w] : g.AllWeights()) {
    if (w->trainable && (w->l1 != 0 || w->l2 != 0)) {
      d->penalties_.push_back({index.at(&w->value), w->value.size(), w->l1, w->l2});
    }
  }

  // Slots for the penalties of a step: the weight regularizers', then one per node with an
  // activity regularizer.
  int64_t slots = static_cast<int64_t>(d->penalties_.size());
  std::vector<int> activity_slot(g.num_nodes(), -1);
  for (size_t i = 0; i < g.num_nodes(); ++i) {
    if (g.node(i).layer->activity_penalty().any()) activity_slot[i] = static_cast<int>(slots++);
  }
  if (slots > 0) LOCKSTEP_RETURN_IF_ERROR(d->penalty_values_.Resize(ctx, {slots}, DType::kF32));

  auto records = std::make_unique<DeviceGraphLayers>();
  std::map<const GraphLayer*, int> calls;
  for (size_t i = 0; i < g.num_nodes(); ++i) ++calls[g.node(i).layer];
  for (auto [layer, count] : calls) {
    std::map<std::string, DeviceWeight> w;
    for (const graph::Weight& hw : layer->weights()) {
      const size_t k = index.at(&hw.value);
      w[hw.name] = {.value = d->weights_.compute_view(k, hw.value.shape()),
                    .master = d->weights_.master(k),
                    .grad = d->weights_.grad(k)};
    }
    records->weights[layer] = std::make_unique<LayerWeights>(*layer, std::move(w), count > 1);
  }

  // The inputs: token ids stay fp32 (an fp16 id above 2048 would round).
  for (int t : g.inputs()) {
    bool ids = false, other = false;
    // A comparison (the padding mask's NotEqual) reads ids in any dtype.
    for (const GraphLayer* c : g.Consumers(t)) {
      if (c->ReadsAnyDtype(0)) continue;
      (c->IdBound(0) > 0 ? ids : other) = true;
    }
    if (ids && other && compute != DType::kF32) {
      return absl::FailedPreconditionError(
          "input '" + g.input_name(d->input_dtypes_.size()) +
          "' feeds an Embedding and other layers: token ids stay fp32 on the GPU, so the "
          "model runs there in float32 only");
    }
    d->input_dtypes_.push_back(ids ? DType::kF32 : compute);
  }

  for (size_t i = 0; i < g.num_nodes(); ++i) {
    graph::Graph::NodeSpec spec = g.node(i);
    const GraphLayer& l = *spec.layer;
    absl::StatusOr<std::unique_ptr<DeviceOp>> op =
        MakeOp(ctx, l, *records->weights.at(&l), g.shape(spec.outputs[0]), compute, records.get());
    if (!op.ok()) return op.status();
    d->nodes_.push_back({std::move(*op), std::move(spec), MaskRuleOf(l), activity_slot[i]});
  }
  size_t tensors = g.inputs().size();
  for (const Node& n : d->nodes_) {
    for (int t : n.spec.outputs) tensors = std::max(tensors, static_cast<size_t>(t) + 1);
  }
  d->values_.resize(tensors);
  d->masks_.assign(tensors, nullptr);
  d->grads_.resize(tensors);
  d->has_grad_.assign(tensors, false);
  d->inputs_.resize(g.inputs().size());
  d->layers_ = std::move(records);
  return d;
}

absl::Status DeviceGraph::Activity(const Node& node, DeviceTensor* dy, float loss_scale) {
  const GraphLayer::ActivityPenalty& p = node.spec.layer->activity_penalty();
  const DeviceTensor& y = values_[static_cast<size_t>(node.spec.outputs[0])];
  // Keras 2 divides by the batch size, Keras 3 does not (Layer::ActivityPenalty).
  const float scale = p.per_example && !y.shape().empty() && y.dim(0) > 0
                          ? 1.0f / static_cast<float>(y.dim(0))
                          : 1.0f;
  return cuda::ActivityPenalty(ctx_, y, p.l1 * scale, p.l2 * scale, dy, loss_scale,
                               penalty_values_.as<float>() + node.activity_slot);
}

absl::Status DeviceGraph::AddPenalties(bool gradients, float loss_scale, double* loss) {
  if (penalty_values_.data() == nullptr) return absl::OkStatus();
  for (size_t k = 0; k < penalties_.size(); ++k) {
    const Penalty& p = penalties_[k];
    LOCKSTEP_RETURN_IF_ERROR(cuda::WeightPenalty(ctx_, weights_.master(p.weight), p.size, p.l1,
                                                 p.l2,
                                                 gradients ? weights_.grad(p.weight) : nullptr,
                                                 loss_scale, penalty_values_.as<float>() + k));
  }
  std::vector<float> values(static_cast<size_t>(penalty_values_.size()));
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudaMemcpyAsync(values.data(), penalty_values_.data(),
                                               values.size() * sizeof(float),
                                               cudaMemcpyDeviceToHost, ctx_->stream()));
  LOCKSTEP_RETURN_IF_ERROR(ctx_->Synchronize());
  for (float v : values) *loss += v;
  return absl::OkStatus();
}

absl::Status DeviceGraph::Reloaded() {
  for (Node& n : nodes_) LOCKSTEP_RETURN_IF_ERROR(n.op->Reloaded());
  return absl::OkStatus();
}

absl::StatusOr<cuda::LossResult> DeviceGraph::TrainStep(const Tensor& x,
                                                        const std::vector<int32_t>& labels,
                                                        float loss_scale) {
  return Run(x, labels, true, loss_scale);
}

absl::StatusOr<cuda::LossResult> DeviceGraph::Evaluate(const Tensor& x,
                                                       const std::vector<int32_t>& labels) {
  return Run(x, labels, false, 1.0f);
}

absl::StatusOr<cuda::LossResult> DeviceGraph::Run(const Tensor& x,
                                                  const std::vector<int32_t>& labels, bool training,
                                                  float loss_scale) {
  graph::Graph& g = host_->graph();
  DeviceGraphLayers& records = *layers_;
  ++step_;
  const auto n = static_cast<int64_t>(labels.size());
  Shape shape{n};
  for (int64_t dim : host_->example_shape()) shape.push_back(dim);
  LOCKSTEP_RETURN_IF_ERROR(cuda::Upload(ctx_, x.Reshaped(shape), input_dtypes_[0], &inputs_[0]));
  values_[static_cast<size_t>(g.inputs()[0])] = ViewOf(inputs_[0]);
  for (cuda::DeviceBuffer& b : records.bad) {
    LOCKSTEP_GPU_RETURN_IF_ERROR(cudaMemsetAsync(b.get(), 0, sizeof(int), ctx_->stream()));
  }

  // Forward, node by node, each tensor's mask following it (the graph's inputs have none).
  std::vector<const DeviceTensor*> in;
  StepInfo step;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    Node& node = nodes_[i];
    in.clear();
    step.masks.clear();
    for (int t : node.spec.inputs) {
      in.push_back(&values_[static_cast<size_t>(t)]);
      step.masks.push_back(masks_[static_cast<size_t>(t)]);
    }
    step.training = node.spec.training.value_or(training);
    step.seed = Mix(Mix(seed_, step_), i);
    absl::StatusOr<DeviceTensor> y = node.op->Forward(in, step);
    if (!y.ok()) {
      return absl::Status(y.status().code(), "layer '" + node.spec.layer->name() + "' (" +
                                                 node.spec.layer->class_name() +
                                                 "): " + std::string(y.status().message()));
    }
    const auto o = static_cast<size_t>(node.spec.outputs[0]);
    values_[o] = std::move(*y);
    masks_[o] = node.mask == MaskRule::kOwn          ? node.op->OwnMask()
                : node.mask == MaskRule::kFirstInput ? step.mask(0)
                                                     : nullptr;
    if (node.activity_slot >= 0) LOCKSTEP_RETURN_IF_ERROR(Activity(node, nullptr, 1.0f));
    if (node.spec.outputs.size() > 1) {  // a recurrent layer's states: no masks
      absl::StatusOr<std::vector<DeviceTensor>> more = node.op->MoreOutputs();
      if (!more.ok()) return more.status();
      if (more->size() + 1 != node.spec.outputs.size()) {
        return absl::InternalError("layer '" + node.spec.layer->name() + "' made " +
                                   std::to_string(more->size() + 1) + " outputs, not " +
                                   std::to_string(node.spec.outputs.size()));
      }
      for (size_t k = 1; k < node.spec.outputs.size(); ++k) {
        const auto t = static_cast<size_t>(node.spec.outputs[k]);
        values_[t] = std::move((*more)[k - 1]);
        masks_[t] = nullptr;
      }
    }
  }

  // The loss (and dL/d(output) times the loss scale).
  host_->Targets(labels, &host_targets_);
  LOCKSTEP_RETURN_IF_ERROR(cuda::Upload(ctx_, host_targets_, DType::kF32, &targets_));
  const auto out = static_cast<size_t>(g.outputs()[0]);
  std::fill(has_grad_.begin(), has_grad_.end(), false);
  absl::StatusOr<cuda::LossResult> loss = cuda::ComputeLoss(
      ctx_, host_->loss(), values_[out], targets_, training ? &grads_[out] : nullptr, loss_scale);
  int bad = 0;
  for (cuda::DeviceBuffer& b : records.bad) {
    int count = 0;
    LOCKSTEP_GPU_RETURN_IF_ERROR(
        cudaMemcpyAsync(&count, b.get(), sizeof(int), cudaMemcpyDeviceToHost, ctx_->stream()));
    LOCKSTEP_RETURN_IF_ERROR(ctx_->Synchronize());
    bad += count;
  }
  if (bad > 0) {
    return absl::DataLossError("a batch the model cannot take: " + std::to_string(bad) +
                               " token id(s) outside an Embedding's table");
  }
  if (!loss.ok())
    return absl::DataLossError("a batch the model cannot take: " +
                               std::string(loss.status().message()));
  cuda::LossResult r = *loss;
  if (!training) {
    LOCKSTEP_RETURN_IF_ERROR(AddPenalties(false, 1.0f, &r.loss));
    return r;
  }

  // Backward, node by node in reverse; each tensor's gradient sums its readers'.
  has_grad_[out] = true;
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudaMemsetAsync(
      weights_.grads(), 0, static_cast<size_t>(weights_.trainable_size()) * sizeof(float),
      ctx_->stream()));
  std::vector<DeviceTensor*> dx;
  std::vector<DeviceTensor> scratch;
  std::vector<const DeviceTensor*> ys, dys;
  for (size_t i = nodes_.size(); i-- > 0;) {
    Node& node = nodes_[i];
    if (node.activity_slot >= 0) {
      // The activity regularizer's gradient joins the output's, once its readers' are in.
      const auto o = static_cast<size_t>(node.spec.outputs[0]);
      if (!has_grad_[o]) {
        LOCKSTEP_RETURN_IF_ERROR(grads_[o].Resize(ctx_, values_[o].shape(), values_[o].dtype()));
        LOCKSTEP_GPU_RETURN_IF_ERROR(
            cudaMemsetAsync(grads_[o].data(), 0, grads_[o].bytes(), ctx_->stream()));
        has_grad_[o] = true;
      }
      LOCKSTEP_RETURN_IF_ERROR(Activity(node, &grads_[o], loss_scale));
    }
    ys.clear();
    dys.clear();
    for (int t : node.spec.outputs) {
      const auto k = static_cast<size_t>(t);
      ys.push_back(&values_[k]);
      dys.push_back(has_grad_[k] ? &grads_[k] : nullptr);
    }
    if (std::all_of(dys.begin(), dys.end(), [](const DeviceTensor* d) { return d == nullptr; })) {
      continue;  // feeds no loss: every gradient through it is zero
    }
    in.clear();
    for (int t : node.spec.inputs) in.push_back(&values_[static_cast<size_t>(t)]);
    const size_t k = node.spec.inputs.size();
    dx.assign(k, nullptr);
    scratch.resize(std::max(scratch.size(), k));
    for (size_t j = 0; j < k; ++j) {
      if (!node.spec.need_din[j]) continue;
      const int t = node.spec.inputs[j];
      // The first contribution lands in the tensor's gradient, later ones (another reader's,
      // or this node's own when it reads the tensor twice) in scratch.
      const bool taken =
          has_grad_[static_cast<size_t>(t)] ||
          std::find(node.spec.inputs.begin(), node.spec.inputs.begin() + static_cast<long>(j), t) !=
              node.spec.inputs.begin() + static_cast<long>(j);
      dx[j] = taken ? &scratch[j] : &grads_[static_cast<size_t>(t)];
    }
    const bool trains =
        std::any_of(node.spec.layer->weights().begin(), node.spec.layer->weights().end(),
                    [](const graph::Weight& w) { return w.trainable; });
    if (!trains &&
        std::all_of(dx.begin(), dx.end(), [](DeviceTensor* t) { return t == nullptr; })) {
      continue;  // nothing to compute: no weight to train, no input that takes a gradient
    }
    absl::Status s = node.op->BackwardAll(in, ys, dys, dx);
    if (!s.ok()) {
      return absl::Status(s.code(), "layer '" + node.spec.layer->name() + "' (" +
                                        node.spec.layer->class_name() +
                                        ") backward: " + std::string(s.message()));
    }
    for (size_t j = 0; j < k; ++j) {
      if (dx[j] == nullptr) continue;
      const auto t = static_cast<size_t>(node.spec.inputs[j]);
      if (dx[j] == &scratch[j]) {
        LOCKSTEP_RETURN_IF_ERROR(cuda::AddInto(ctx_, &grads_[t], scratch[j]));
      }
      has_grad_[t] = true;
    }
  }
  LOCKSTEP_RETURN_IF_ERROR(AddPenalties(true, loss_scale, &r.loss));
  return r;
}

}  // namespace lockstep::trainer
