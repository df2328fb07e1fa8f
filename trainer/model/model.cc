#include "trainer/model/model.h"

namespace lockstep::trainer {

Shape TargetShape(const ModelOutput& o) {
  if (o.loss.kind != LossKind::kSparseCategoricalCrossentropy || o.shape.empty()) {
    return o.shape;
  }
  return Shape(o.shape.begin(), o.shape.end() - 1);
}

int64_t Classes(const ModelOutput& o) {
  const int64_t c = o.shape.empty() ? 1 : o.shape.back();
  return c == 1 ? 2 : c;
}

int64_t Model::classes() const { return Classes(outputs()[0]); }

int64_t Model::NumParams() {
  int64_t n = 0;
  for (Tensor* t : Params()) n += t->size();
  return n;
}

}  // namespace lockstep::trainer
