#include "trainer/model/model.h"

namespace lockstep::trainer {

Shape TargetShape(const ModelOutput& o) {
  if (o.loss.kind != graph::LossKind::kSparseCategoricalCrossentropy || o.shape.empty()) {
    return o.shape;
  }
  return Shape(o.shape.begin(), o.shape.end() - 1);
}

int64_t Classes(const ModelOutput& o) {
  const int64_t c = o.shape.empty() ? 1 : o.shape.back();
  return c == 1 ? 2 : c;
}

int64_t Model::classes() const { return Classes(outputs()[0]); }

std::vector<ModelOutput> SequentialModel::Outputs() {
  return {{.name = "output", .shape = {10}, .loss = {.from_logits = true}}};
}

namespace {

StepResult FromXent(const cpu::XentResult& r, int64_t n) {
  return {.loss = r.loss, .correct = r.correct, .judged = n};
}

}  // namespace

StepResult SequentialModel::TrainStep(const Dataset& batch, const GradsReady& grads_ready) {
  const Tensor* h = &batch.inputs[0];
  for (auto& l : layers_) h = &l->Forward(*h, true);
  const std::vector<int32_t> labels = ClassIds(batch.targets[0]);
  cpu::XentResult r = cpu::SoftmaxCrossEntropy(*h, labels, &dlogits_);
  const Tensor* g = &dlogits_;
  size_t end = 0;
  for (auto& l : layers_) end += l->Params().size();
  for (size_t i = layers_.size(); i-- > 0;) {
    g = &layers_[i]->Backward(*g, i > 0);
    const size_t count = layers_[i]->Params().size();
    end -= count;
    if (grads_ready && count > 0) grads_ready(end, count);
  }
  return FromXent(r, batch.size());
}

StepResult SequentialModel::Evaluate(const Dataset& batch) {
  const Tensor* h = &batch.inputs[0];
  for (auto& l : layers_) h = &l->Forward(*h, false);
  return FromXent(cpu::SoftmaxCrossEntropy(*h, ClassIds(batch.targets[0]), nullptr), batch.size());
}

std::vector<Tensor*> SequentialModel::Params() {
  std::vector<Tensor*> out;
  for (auto& l : layers_) {
    for (Tensor* t : l->Params()) out.push_back(t);
  }
  return out;
}

std::vector<Tensor*> SequentialModel::Grads() {
  std::vector<Tensor*> out;
  for (auto& l : layers_) {
    for (Tensor* t : l->Grads()) out.push_back(t);
  }
  return out;
}

int64_t Model::NumParams() {
  int64_t n = 0;
  for (Tensor* t : Params()) n += t->size();
  return n;
}

bool IsBuiltinModel(const std::string& name) {
  return name == "mlp" || name == "cnn" || name == "mlp-large";
}

absl::StatusOr<std::unique_ptr<SequentialModel>> BuildBuiltinModel(const std::string& name,
                                                                   uint64_t seed) {
  std::mt19937 rng(static_cast<uint32_t>(seed ^ (seed >> 32)));
  std::vector<std::unique_ptr<Layer>> l;
  if (name == "mlp") {
    l.push_back(MakeFlatten());
    l.push_back(MakeDense(784, 256, &rng));
    l.push_back(MakeReLU());
    l.push_back(MakeDense(256, 256, &rng));
    l.push_back(MakeReLU());
    l.push_back(MakeDense(256, 10, &rng));
  } else if (name == "cnn") {
    l.push_back(MakeConv2D(1, 32, 3, 0, &rng));
    l.push_back(MakeReLU());
    l.push_back(MakeMaxPool2D(2));
    l.push_back(MakeConv2D(32, 64, 3, 0, &rng));
    l.push_back(MakeReLU());
    l.push_back(MakeMaxPool2D(2));
    l.push_back(MakeFlatten());
    l.push_back(MakeDense(1600, 128, &rng));
    l.push_back(MakeReLU());
    l.push_back(MakeDense(128, 10, &rng));
  } else if (name == "mlp-large") {
    // The GPU benchmark's GEMM-bound model: three hidden layers of 8192.
    l.push_back(MakeFlatten());
    l.push_back(MakeDense(784, 8192, &rng));
    l.push_back(MakeReLU());
    l.push_back(MakeDense(8192, 8192, &rng));
    l.push_back(MakeReLU());
    l.push_back(MakeDense(8192, 8192, &rng));
    l.push_back(MakeReLU());
    l.push_back(MakeDense(8192, 10, &rng));
  } else {
    return absl::InvalidArgumentError("--model: unknown model \"" + name +
                                      "\" (known: mlp, cnn, mlp-large, or a Keras model file)");
  }
  return std::make_unique<SequentialModel>(std::move(l), Shape{1, 28, 28});
}

}  // namespace lockstep::trainer
