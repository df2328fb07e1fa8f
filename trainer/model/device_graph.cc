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

// The per-layer device state the ops point into; kept apart from the ops so a shared layer's
// nodes see one record.
struct DeviceGraphLayers {
  std::map<const GraphLayer*, std::unique_ptr<LayerWeights>> weights;
  std::vector<cuda::DeviceBuffer> bad;  // per counter (an Embedding's): ids outside its table
};

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

// The GPU backend of the executor (graph/executor.h): a node is its device op, on device
// tensors in the compute dtype; its noise draws from a stream keyed by (seed, step, node).
class GpuBackend {
 public:
  using Value = DeviceTensor;

  struct Node {
    std::unique_ptr<DeviceOp> op;
    MaskRule mask;           // where its output's mask comes from
    int activity_slot = -1;  // its activity penalty's place in the penalty values, or -1
  };

  GpuBackend(GpuContext* ctx, uint64_t seed, std::unique_ptr<DeviceGraphLayers> layers)
      : ctx_(ctx), seed_(seed), layers_(std::move(layers)) {}

  std::vector<Node>& nodes() { return nodes_; }
  DeviceGraphLayers& layers() { return *layers_; }
  // A new step: its draws; `penalties`: where activity penalties go.
  void Start(float loss_scale, float* penalties) {
    ++step_;
    loss_scale_ = loss_scale;
    penalties_ = penalties;
  }

  absl::Status Forward(size_t i, const graph::NodeSpec&, const std::vector<const DeviceTensor*>& x,
                       const std::vector<const DeviceTensor*>& masks, bool training,
                       std::vector<DeviceTensor>* out, const DeviceTensor** mask) {
    Node& node = nodes_[i];
    step_info_.training = training;
    step_info_.seed = Mix(Mix(seed_, step_), i);
    step_info_.masks = masks;
    absl::StatusOr<DeviceTensor> y = node.op->Forward(x, step_info_);
    if (!y.ok()) return y.status();
    (*out)[0] = std::move(*y);
    *mask = node.mask == MaskRule::kOwn          ? node.op->OwnMask()
            : node.mask == MaskRule::kFirstInput ? step_info_.mask(0)
                                                 : nullptr;
    if (out->size() == 1) return absl::OkStatus();
    // A recurrent layer's states.
    absl::StatusOr<std::vector<DeviceTensor>> more = node.op->MoreOutputs();
    if (!more.ok()) return more.status();
    if (more->size() + 1 != out->size()) {
      return absl::InternalError("made " + std::to_string(more->size() + 1) + " outputs, not " +
                                 std::to_string(out->size()));
    }
    for (size_t k = 1; k < out->size(); ++k) (*out)[k] = std::move((*more)[k - 1]);
    return absl::OkStatus();
  }

  absl::Status Backward(size_t i, const graph::NodeSpec&, const std::vector<const DeviceTensor*>& x,
                        const std::vector<DeviceTensor>& y,
                        const std::vector<const DeviceTensor*>& dy,
                        const std::vector<DeviceTensor*>& dx) {
    ys_.clear();
    for (const DeviceTensor& t : y) ys_.push_back(&t);
    return nodes_[i].op->BackwardAll(x, ys_, dy, dx);
  }

  // The penalty into the node's slot and, when dy is given, its gradient times the loss scale.
  absl::Status Activity(size_t i, const graph::NodeSpec& n, const DeviceTensor& y,
                        DeviceTensor* dy) {
    const GraphLayer::ActivityPenalty& p = n.layer->activity_penalty();
    // Keras 2 divides by the batch size, Keras 3 does not (Layer::ActivityPenalty).
    const float scale = p.per_example && !y.shape().empty() && y.dim(0) > 0
                            ? 1.0f / static_cast<float>(y.dim(0))
                            : 1.0f;
    return cuda::ActivityPenalty(ctx_, y, p.l1 * scale, p.l2 * scale, dy,
                                 dy != nullptr ? loss_scale_ : 1.0f,
                                 penalties_ + nodes_[i].activity_slot);
  }
  absl::Status Zeros(const DeviceTensor& like, DeviceTensor* dst) {
    LOCKSTEP_RETURN_IF_ERROR(dst->Resize(ctx_, like.shape(), like.dtype()));
    LOCKSTEP_GPU_RETURN_IF_ERROR(cudaMemsetAsync(dst->data(), 0, dst->bytes(), ctx_->stream()));
    return absl::OkStatus();
  }
  absl::Status Copy(const DeviceTensor& src, DeviceTensor* dst) {
    return layers::Copy(ctx_, src, dst);
  }
  absl::Status AddInto(DeviceTensor* dst, const DeviceTensor& src) {
    return cuda::AddInto(ctx_, dst, src);
  }
  void NodeDone(size_t, const graph::NodeSpec&) {}

 private:
  static uint64_t Mix(uint64_t a, uint64_t b) {
    uint64_t z = a + 0x9E3779B97F4A7C15ull * (b + 1);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }

  GpuContext* ctx_;
  uint64_t seed_;
  uint64_t step_ = 0;
  float loss_scale_ = 1.0f;
  float* penalties_ = nullptr;
  std::unique_ptr<DeviceGraphLayers> layers_;
  std::vector<Node> nodes_;
  StepInfo step_info_;
  std::vector<const DeviceTensor*> ys_;
};

DeviceGraph::~DeviceGraph() = default;

absl::StatusOr<std::unique_ptr<DeviceGraph>> DeviceGraph::Create(GpuContext* ctx, GraphModel& host,
                                                                 DType compute, uint64_t seed) {
  graph::Graph& g = host.graph();
  LOCKSTEP_RETURN_IF_ERROR(GpuSupported(g));
  std::unique_ptr<DeviceGraph> d(new DeviceGraph);
  d->ctx_ = ctx;
  d->host_ = &host;

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

  d->backend_ = std::make_unique<GpuBackend>(ctx, seed, std::make_unique<DeviceGraphLayers>());
  DeviceGraphLayers* records = &d->backend_->layers();
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
    const graph::NodeSpec& spec = g.node(i);
    const GraphLayer& l = *spec.layer;
    absl::StatusOr<std::unique_ptr<DeviceOp>> op =
        MakeOp(ctx, l, *records->weights.at(&l), g.shape(spec.outputs[0]), compute, records);
    if (!op.ok()) return op.status();
    d->backend_->nodes().push_back({std::move(*op), MaskRuleOf(l), activity_slot[i]});
  }
  d->executor_ = std::make_unique<graph::Executor<GpuBackend>>(&g.nodes(), &g.inputs(),
                                                               g.num_tensors(), d->backend_.get());
  d->inputs_.resize(g.inputs().size());
  return d;
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
  for (GpuBackend::Node& n : backend_->nodes()) LOCKSTEP_RETURN_IF_ERROR(n.op->Reloaded());
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

absl::Status DeviceGraph::CheckInput() {
  int bad = 0;
  for (cuda::DeviceBuffer& b : backend_->layers().bad) {
    int count = 0;
    LOCKSTEP_GPU_RETURN_IF_ERROR(
        cudaMemcpyAsync(&count, b.get(), sizeof(int), cudaMemcpyDeviceToHost, ctx_->stream()));
    LOCKSTEP_RETURN_IF_ERROR(ctx_->Synchronize());
    bad += count;
  }
  if (bad == 0) return absl::OkStatus();
  return absl::DataLossError("a batch the model cannot take: " + std::to_string(bad) +
                             " token id(s) outside an Embedding's table");
}

absl::StatusOr<cuda::LossResult> DeviceGraph::Run(const Tensor& x,
                                                  const std::vector<int32_t>& labels, bool training,
                                                  float loss_scale) {
  graph::Graph& g = host_->graph();
  const auto n = static_cast<int64_t>(labels.size());
  Shape shape{n};
  for (int64_t dim : host_->example_shape()) shape.push_back(dim);
  LOCKSTEP_RETURN_IF_ERROR(cuda::Upload(ctx_, x.Reshaped(shape), input_dtypes_[0], &inputs_[0]));
  for (cuda::DeviceBuffer& b : backend_->layers().bad) {
    LOCKSTEP_GPU_RETURN_IF_ERROR(cudaMemsetAsync(b.get(), 0, sizeof(int), ctx_->stream()));
  }
  backend_->Start(loss_scale, penalty_values_.as<float>());
  std::vector<const DeviceTensor*> inputs;
  for (const DeviceTensor& t : inputs_) inputs.push_back(&t);
  LOCKSTEP_RETURN_IF_ERROR(executor_->Forward(inputs, training));

  // The loss (and dL/d(output) times the loss scale).
  host_->Targets(labels, &host_targets_);
  LOCKSTEP_RETURN_IF_ERROR(cuda::Upload(ctx_, host_targets_, DType::kF32, &targets_));
  const int out = g.outputs()[0];
  executor_->StartBackward();
  absl::StatusOr<cuda::LossResult> loss =
      cuda::ComputeLoss(ctx_, host_->loss(), *executor_->value(out), targets_,
                        training ? executor_->GradientSlot(out) : nullptr, loss_scale);
  LOCKSTEP_RETURN_IF_ERROR(CheckInput());
  if (!loss.ok())
    return absl::DataLossError("a batch the model cannot take: " +
                               std::string(loss.status().message()));
  cuda::LossResult r = *loss;
  if (!training) {
    LOCKSTEP_RETURN_IF_ERROR(AddPenalties(false, 1.0f, &r.loss));
    return r;
  }

  // Backward: every weight gradient from zero.
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudaMemsetAsync(
      weights_.grads(), 0, static_cast<size_t>(weights_.trainable_size()) * sizeof(float),
      ctx_->stream()));
  LOCKSTEP_RETURN_IF_ERROR(executor_->Backward());
  LOCKSTEP_RETURN_IF_ERROR(AddPenalties(true, loss_scale, &r.loss));
  return r;
}

}  // namespace lockstep::trainer
