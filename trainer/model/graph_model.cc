#include "trainer/model/graph_model.h"

#include <algorithm>

namespace lockstep::trainer {

namespace {

absl::Status Refuse(const std::string& path, const std::string& why) {
  return absl::InvalidArgumentError("model " + path + ": " + why);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> BuildModel(const std::string& name_or_path, uint64_t seed) {
  if (IsBuiltinModel(name_or_path)) {
    absl::StatusOr<std::unique_ptr<SequentialModel>> m = BuildBuiltinModel(name_or_path, seed);
    if (!m.ok()) return m.status();
    return std::unique_ptr<Model>(std::move(*m));
  }
  if (name_or_path.find('/') == std::string::npos &&
      name_or_path.find(".json") == std::string::npos) {
    return BuildBuiltinModel(name_or_path, seed).status();  // names the known models
  }
  absl::StatusOr<std::unique_ptr<GraphModel>> g = GraphModel::Load(name_or_path, seed);
  if (!g.ok()) return g.status();
  return std::unique_ptr<Model>(std::move(*g));
}

absl::StatusOr<std::unique_ptr<GraphModel>> GraphModel::Load(const std::string& path,
                                                             uint64_t seed) {
  absl::StatusOr<keras::KerasModel> m = keras::LoadKerasModelFile(path, {.seed = seed});
  if (!m.ok()) {
    // A missing file is the configuration's fault too: exit 2, BadConfig.
    return absl::InvalidArgumentError("--model: " + std::string(m.status().message()));
  }
  return FromKeras(std::move(*m), seed);
}

absl::StatusOr<std::unique_ptr<GraphModel>> GraphModel::FromKeras(keras::KerasModel m,
                                                                  uint64_t seed) {
  const std::string what = m.name.empty() ? "the model" : "'" + m.name + "'";
  graph::Graph& g = *m.graph;
  if (g.num_inputs() != 1 || g.outputs().size() != 1) {
    return Refuse(what, "has " + std::to_string(g.num_inputs()) + " inputs and " +
                            std::to_string(g.outputs().size()) +
                            " outputs; the trainer feeds one input and one class label per "
                            "example");
  }
  const Shape in = g.shape(g.inputs()[0]);
  if (std::any_of(in.begin(), in.end(), [](int64_t d) { return d <= 0; })) {
    return Refuse(what, "leaves an input axis open " + ShapeString(in) +
                            "; the trainer's examples have a fixed shape");
  }
  const Shape out = g.shape(g.outputs()[0]);
  if (out.size() != 1) {
    return Refuse(what, "outputs " + ShapeString(out) +
                            " per example; the trainer's labels are one class per example");
  }
  graph::Loss loss;
  const graph::Layer* last = g.producer(g.outputs()[0]);
  const graph::Activation* act = last == nullptr ? nullptr : last->output_activation();
  const bool softmax = act != nullptr && act->kind == graph::Act::kSoftmax;
  const bool sigmoid = act != nullptr && act->kind == graph::Act::kSigmoid;
  if (m.training_config.is_object() && m.training_config.contains("loss") &&
      !m.training_config["loss"].is_null()) {
    absl::StatusOr<graph::Loss> l = graph::ParseLoss(m.training_config["loss"]);
    if (!l.ok()) return Refuse(what, std::string(l.status().message()));
    loss = *l;
  } else if (out[0] == 1 && sigmoid) {
    loss.kind = graph::LossKind::kBinaryCrossentropy;
  } else {
    loss.from_logits = !softmax;
  }
  if (loss.kind != graph::LossKind::kSparseCategoricalCrossentropy &&
      loss.kind != graph::LossKind::kCategoricalCrossentropy &&
      !(loss.kind == graph::LossKind::kBinaryCrossentropy && out[0] == 1)) {
    return Refuse(what, "its loss " + graph::LossName(loss) + " on outputs " + ShapeString(out) +
                            " does not take class labels");
  }
  return std::unique_ptr<GraphModel>(new GraphModel(std::move(m), loss, seed));
}

GraphModel::GraphModel(keras::KerasModel m, graph::Loss loss, uint64_t seed)
    : m_(std::move(m)), loss_(loss), rng_(seed * 0x9E3779B97F4A7C15ull + 3) {}

std::vector<Tensor*> GraphModel::State() {
  std::vector<Tensor*> out;
  for (graph::Weight* w : graph().State()) out.push_back(&w->value);
  return out;
}

Shape GraphModel::example_shape() const { return m_.graph->shape(m_.graph->inputs()[0]); }

int64_t GraphModel::classes() const {
  const int64_t c = m_.graph->shape(m_.graph->outputs()[0])[0];
  return c == 1 ? 2 : c;
}

int64_t GraphModel::vocabulary() const {
  for (const graph::Layer* l : m_.graph->Consumers(m_.graph->inputs()[0])) {
    if (l->class_name() == "Embedding" && !l->weights().empty())
      return l->weights()[0].value.dim(0);
  }
  return 0;
}

std::string GraphModel::TakeInputError() {
  std::string e;
  std::swap(e, error_);
  return e;
}

void GraphModel::Targets(const std::vector<int32_t>& labels, Tensor* out) const {
  const auto n = static_cast<int64_t>(labels.size());
  const int64_t c = m_.graph->shape(m_.graph->outputs()[0])[0];
  if (loss_.kind == graph::LossKind::kCategoricalCrossentropy) {
    out->Resize({n, c});
    out->Fill(0.0f);
    for (int64_t i = 0; i < n; ++i) {
      const int32_t y = labels[static_cast<size_t>(i)];
      if (y >= 0 && y < c) (*out)[i * c + y] = 1.0f;
    }
    return;
  }
  out->Resize({n, 1});
  for (int64_t i = 0; i < n; ++i) (*out)[i] = static_cast<float>(labels[static_cast<size_t>(i)]);
  if (loss_.kind == graph::LossKind::kSparseCategoricalCrossentropy) *out = out->Reshaped({n});
}

cpu::XentResult GraphModel::Run(const Tensor& x, const std::vector<int32_t>& labels, bool training,
                                const GradsReady* ready) {
  graph::Graph& g = graph();
  const auto n = static_cast<int64_t>(labels.size());
  Shape shape{n};
  for (int64_t d : example_shape()) shape.push_back(d);
  x_ = x.Reshaped(shape);
  Targets(labels, &targets_);
  std::string err;
  g.Forward({&x_}, graph::CallContext{training, &rng_, &err});
  absl::StatusOr<double> l =
      graph::ComputeLoss(loss_, g.output(0), targets_, ready != nullptr ? &dy_ : nullptr);
  if (!l.ok() && err.empty()) err = std::string(l.status().message());
  if (!err.empty() && error_.empty()) error_ = err;
  cpu::XentResult r;
  r.loss = (l.ok() ? *l : 0.0) + g.RegularizationLoss();
  int64_t judged = 0;
  r.correct = graph::CountCorrect(loss_, g.output(0), targets_, &judged);
  if (ready != nullptr) {
    if (!l.ok()) dy_.Fill(0.0f);
    g.Backward({&dy_}, *ready);
  }
  return r;
}

cpu::XentResult GraphModel::TrainStep(const Tensor& x, const std::vector<int32_t>& labels,
                                      const GradsReady& grads_ready) {
  const GradsReady none = [](size_t, size_t) {};
  return Run(x, labels, true, grads_ready ? &grads_ready : &none);
}

cpu::XentResult GraphModel::Evaluate(const Tensor& x, const std::vector<int32_t>& labels) {
  return Run(x, labels, false, nullptr);
}

}  // namespace lockstep::trainer
