#include "trainer/tensor/tensor.h"

#include <algorithm>
#include <stdexcept>

namespace lockstep::trainer {

int64_t NumElements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string ShapeString(const Shape& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

Tensor::Tensor(Shape shape, float fill)
    : shape_(std::move(shape)), data_(static_cast<size_t>(NumElements(shape_)), fill) {}

Tensor::Tensor(Shape shape, std::vector<float> values)
    : shape_(std::move(shape)), data_(std::move(values)) {
  if (static_cast<int64_t>(data_.size()) != NumElements(shape_)) {
    throw std::invalid_argument("Tensor: " + std::to_string(data_.size()) + " values for shape " +
                                ShapeString(shape_));
  }
}

Tensor Tensor::Reshaped(Shape shape) const {
  if (NumElements(shape) != size()) {
    throw std::invalid_argument("Tensor::Reshaped: " + ShapeString(shape_) + " to " +
                                ShapeString(shape));
  }
  Tensor t;
  t.shape_ = std::move(shape);
  t.data_ = data_;
  return t;
}

void Tensor::Fill(float v) { std::fill(data_.begin(), data_.end(), v); }

void Tensor::Resize(const Shape& shape) {
  if (shape == shape_) return;
  shape_ = shape;
  data_.assign(static_cast<size_t>(NumElements(shape_)), 0.0f);
}

}  // namespace lockstep::trainer
