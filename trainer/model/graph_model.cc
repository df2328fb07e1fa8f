#include "trainer/model/graph_model.h"

#include <algorithm>
#include <optional>
#include <set>

#include "trainer/model/builtin_models.h"

namespace lockstep::trainer {

namespace {

absl::Status Refuse(const std::string& path, const std::string& why) {
  return absl::InvalidArgumentError("model " + path + ": " + why);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> BuildModel(const std::string& name_or_path, uint64_t seed,
                                                  const std::string& loss, int64_t open_axis_size) {
  absl::StatusOr<std::unique_ptr<GraphModel>> g =
      GraphModel::Load(name_or_path, seed, loss, open_axis_size);
  if (!g.ok()) return g.status();
  return std::unique_ptr<Model>(std::move(*g));
}

absl::StatusOr<std::unique_ptr<GraphModel>> GraphModel::Load(const std::string& name_or_path,
                                                             uint64_t seed, const std::string& loss,
                                                             int64_t open_axis_size) {
  // A missing or unreadable file is the configuration's fault too: exit 2, BadConfig.
  absl::StatusOr<nlohmann::json> doc = ReadModelDocument(name_or_path);
  if (!doc.ok())
    return absl::InvalidArgumentError("--model: " + std::string(doc.status().message()));
  absl::StatusOr<keras::KerasModel> m =
      keras::LoadKerasModel(*doc, {.seed = seed, .open_axis_size = open_axis_size});
  if (!m.ok()) {
    return absl::InvalidArgumentError("--model: " + name_or_path + ": " +
                                      std::string(m.status().message()));
  }
  return FromKeras(std::move(*m), seed, loss);
}

namespace {

// The compile config's entry for output `k` named `name` of a "loss" or "loss_weights" value:
// one value for all, a list by position, or a dict by output name. Null when it has none.
absl::StatusOr<nlohmann::json> ForOutput(const nlohmann::json& v, const std::string& key, size_t k,
                                         size_t outputs, const std::string& name) {
  if (v.is_array()) {
    if (v.size() != outputs) {
      return absl::InvalidArgumentError("the compile config's " + key + " lists " +
                                        std::to_string(v.size()) + " values for " +
                                        std::to_string(outputs) + " outputs");
    }
    return v[k];
  }
  if (v.is_object() && !v.contains("class_name")) {
    if (!v.contains(name)) {
      return absl::InvalidArgumentError("the compile config's " + key +
                                        " has no entry for output '" + name + "'");
    }
    return v[name];
  }
  return v;
}

// The activation that makes tensor `t`, looking through the layers that only move or drop values
// (a classifier's softmax before a Reshape, as Keras's MobileNet ends).
const Activation* OutputActivation(const graph::Graph& g, int t) {
  for (;;) {  // each step goes to an earlier tensor, ending at a graph input at the latest
    const int node = g.producer_node(t);
    if (node < 0) return nullptr;
    const graph::NodeSpec& n = g.node(static_cast<size_t>(node));
    const graph::Layer* l = n.layer;
    if (const Activation* a = l->output_activation()) return a;
    static const std::set<std::string> kPassThrough = {"Reshape",
                                                       "Flatten",
                                                       "Dropout",
                                                       "SpatialDropout1D",
                                                       "SpatialDropout2D",
                                                       "Permute",
                                                       "ActivityRegularization",
                                                       "GaussianNoise",
                                                       "GaussianDropout",
                                                       "AlphaDropout"};
    if (!kPassThrough.count(l->class_name()) || n.inputs.size() != 1) return nullptr;
    t = n.inputs[0];
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<GraphModel>> GraphModel::FromKeras(keras::KerasModel m,
                                                                  uint64_t seed,
                                                                  const std::string& loss_flag) {
  const std::string what = m.name.empty() ? "the model" : "'" + m.name + "'";
  graph::Graph& g = *m.graph;
  std::vector<ModelInput> inputs;
  for (size_t k = 0; k < g.inputs().size(); ++k) {
    ModelInput in{.name = g.input_name(k), .shape = g.shape(g.inputs()[k])};
    if (std::any_of(in.shape.begin(), in.shape.end(), [](int64_t d) { return d <= 0; })) {
      return Refuse(what, "leaves an axis of input '" + in.name + "' open " +
                              ShapeString(in.shape) +
                              "; give --open-axis-size=N, the size your examples have there");
    }
    for (const graph::Layer* l : g.Consumers(g.inputs()[k])) {
      if (l->IdBound(0) > 0) in.vocabulary = l->IdBound(0);
    }
    inputs.push_back(std::move(in));
  }
  std::optional<Loss> flag;
  if (!loss_flag.empty()) {
    nlohmann::json j = nlohmann::json::parse(loss_flag, nullptr, false);
    absl::StatusOr<Loss> l =
        graph::ParseLoss(j.is_discarded() || !j.is_object() ? nlohmann::json(loss_flag) : j);
    if (!l.ok()) return absl::InvalidArgumentError("--loss: " + std::string(l.status().message()));
    flag = *l;
  }
  const nlohmann::json& tc = m.training_config;
  const nlohmann::json no = nullptr;
  const nlohmann::json& compiled = tc.is_object() && tc.contains("loss") ? tc["loss"] : no;
  const nlohmann::json& weights =
      tc.is_object() && tc.contains("loss_weights") ? tc["loss_weights"] : no;
  std::vector<ModelOutput> outputs;
  std::vector<std::string> reasons;
  const size_t n = g.outputs().size();
  for (size_t k = 0; k < n; ++k) {
    ModelOutput o;
    o.name = k < m.output_names.size() ? m.output_names[k] : "output_" + std::to_string(k);
    o.shape = g.shape(g.outputs()[k]);
    if (std::any_of(o.shape.begin(), o.shape.end(), [](int64_t d) { return d <= 0; })) {
      return Refuse(what, "leaves an axis of output '" + o.name + "' open " + ShapeString(o.shape) +
                              "; the trainer's targets have a fixed shape");
    }
    const Activation* act = OutputActivation(g, g.outputs()[k]);
    const bool softmax = act != nullptr && act->kind == Act::kSoftmax;
    const bool sigmoid = act != nullptr && act->kind == Act::kSigmoid;
    const bool linear = act == nullptr || act->kind == Act::kLinear;
    absl::StatusOr<nlohmann::json> given =
        compiled.is_null() ? nlohmann::json() : ForOutput(compiled, "loss", k, n, o.name);
    if (!given.ok()) return Refuse(what, std::string(given.status().message()));
    if (flag) {
      o.loss = *flag;
      reasons.push_back("--loss");
    } else if (!given->is_null()) {
      absl::StatusOr<Loss> l = graph::ParseLoss(*given);
      if (!l.ok()) return Refuse(what, std::string(l.status().message()));
      o.loss = *l;
      reasons.push_back("the file's compile config");
    } else if (softmax) {
      o.loss.kind = LossKind::kSparseCategoricalCrossentropy;
      reasons.push_back("no loss in the file; a softmax output takes class ids");
    } else if (sigmoid) {
      o.loss.kind = LossKind::kBinaryCrossentropy;
      reasons.push_back("no loss in the file; a sigmoid output takes 0/1 targets");
    } else if (o.shape.size() == 1 && o.shape[0] > 1 && linear) {
      o.loss = {.kind = LossKind::kSparseCategoricalCrossentropy, .from_logits = true};
      reasons.push_back("no loss in the file; a linear output of " + std::to_string(o.shape[0]) +
                        " units is taken for a classifier's logits (--loss mean_squared_error "
                        "for a regression)");
    } else {
      o.loss.kind = LossKind::kMeanSquaredError;
      reasons.push_back("no loss in the file; a " +
                        std::string(linear ? "linear" : graph::ActivationName(*act)) + " output " +
                        ShapeString(o.shape) + " is a regression");
    }
    if (!weights.is_null()) {
      absl::StatusOr<nlohmann::json> w = ForOutput(weights, "loss_weights", k, n, o.name);
      if (!w.ok()) return Refuse(what, std::string(w.status().message()));
      if (!w->is_number()) {
        return Refuse(what, "the compile config's loss_weights for output '" + o.name + "' is " +
                                w->dump() + ", not a number");
      }
      o.loss_weight = w->get<float>();
    }
    if ((o.loss.kind == LossKind::kSparseCategoricalCrossentropy ||
         o.loss.kind == LossKind::kCategoricalCrossentropy) &&
        (o.shape.empty() || (o.shape.back() == 1 && !o.loss.from_logits && softmax))) {
      return Refuse(what, "output '" + o.name + "' " + ShapeString(o.shape) + " has one class; " +
                              graph::LossName(o.loss) + " needs a class axis");
    }
    outputs.push_back(std::move(o));
  }
  return std::unique_ptr<GraphModel>(new GraphModel(std::move(m), std::move(inputs),
                                                    std::move(outputs), std::move(reasons), seed));
}

GraphModel::GraphModel(keras::KerasModel m, std::vector<ModelInput> inputs,
                       std::vector<ModelOutput> outputs, std::vector<std::string> reasons,
                       uint64_t seed)
    : m_(std::move(m)),
      inputs_(std::move(inputs)),
      outputs_(std::move(outputs)),
      loss_reasons_(std::move(reasons)),
      rng_(seed * 0x9E3779B97F4A7C15ull + 3) {}

std::vector<Tensor*> GraphModel::State() {
  std::vector<Tensor*> out;
  for (graph::Weight* w : graph().State()) out.push_back(&w->value);
  return out;
}

GraphModel::StepMemory GraphModel::TrainingStepMemory(int64_t batch) {
  StepMemory m;
  m.weights = 4.0 * sizeof(float) * static_cast<double>(NumParams());
  const graph::Graph& g = graph();
  double per_example = 0;
  for (size_t t = 0; t < g.num_tensors(); ++t) {
    per_example +=
        static_cast<double>(std::max<int64_t>(NumElements(g.shape(static_cast<int>(t))), 0));
  }
  m.activations = 2.0 * sizeof(float) * per_example * static_cast<double>(batch);
  return m;
}

std::string GraphModel::TakeInputError() {
  std::string e;
  std::swap(e, error_);
  return e;
}

void GraphModel::Targets(const std::vector<int32_t>& labels, Tensor* out) const {
  const auto n = static_cast<int64_t>(labels.size());
  const int64_t c = outputs_[0].shape.back();
  if (loss().kind == LossKind::kCategoricalCrossentropy) {
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
  if (loss().kind == LossKind::kSparseCategoricalCrossentropy) *out = out->Reshaped({n});
}

namespace {

// Accuracy is judged for the cross-entropies; a regression output is not.
bool Judged(const Loss& l) {
  return l.kind == LossKind::kSparseCategoricalCrossentropy ||
         l.kind == LossKind::kCategoricalCrossentropy || l.kind == LossKind::kBinaryCrossentropy;
}

}  // namespace

StepResult GraphModel::Run(const Dataset& batch, bool training, const GradsReady* ready) {
  graph::Graph& g = graph();
  const int64_t n = batch.size();
  std::vector<const Tensor*> in;
  x_.resize(inputs_.size());
  for (size_t k = 0; k < inputs_.size(); ++k) {
    const Tensor& t = batch.inputs[k];
    Shape shape{n};
    shape.insert(shape.end(), inputs_[k].shape.begin(), inputs_[k].shape.end());
    if (t.shape() == shape) {
      in.push_back(&t);
    } else {
      x_[k] = t.Reshaped(shape);
      in.push_back(&x_[k]);
    }
  }
  std::string err;
  g.Forward(in, graph::CallContext{training, &rng_, &err});
  StepResult r;
  dy_.resize(outputs_.size());
  std::vector<const Tensor*> dys;
  for (size_t k = 0; k < outputs_.size(); ++k) {
    const ModelOutput& o = outputs_[k];
    const Tensor& target = batch.targets[k];
    absl::StatusOr<double> l = graph::ComputeLoss(
        o.loss, g.output(static_cast<int>(k)), target, ready != nullptr ? &dy_[k] : nullptr,
        batch.sample_weights.size() > 0 ? &batch.sample_weights : nullptr);
    if (!l.ok() && err.empty()) {
      err = (outputs_.size() > 1 ? "output '" + o.name + "': " : "") +
            std::string(l.status().message());
    }
    r.loss += o.loss_weight * (l.ok() ? *l : 0.0);
    if (Judged(o.loss)) {
      int64_t judged = 0;
      r.correct += graph::CountCorrect(o.loss, g.output(static_cast<int>(k)), target, &judged);
      r.judged += judged;
    }
    if (ready != nullptr) {
      if (!l.ok()) {
        dy_[k].Resize(g.output(static_cast<int>(k)).shape());
        dy_[k].Fill(0.0f);
      } else if (o.loss_weight != 1.0f) {
        for (float& v : dy_[k].values()) v *= o.loss_weight;
      }
      dys.push_back(&dy_[k]);
    }
  }
  if (!err.empty() && error_.empty()) error_ = err;
  r.loss += g.RegularizationLoss();
  if (ready != nullptr) g.Backward(dys, *ready);
  return r;
}

StepResult GraphModel::TrainStep(const Dataset& batch, const GradsReady& grads_ready) {
  const GradsReady none = [](size_t, size_t) {};
  return Run(batch, true, grads_ready ? &grads_ready : &none);
}

StepResult GraphModel::Evaluate(const Dataset& batch) { return Run(batch, false, nullptr); }

}  // namespace lockstep::trainer
