#pragma once
// Tensor: a dense fp32 array in host memory with a row-major shape (NCHW for images). The
// CPU kernels take and fill tensors; the CUDA kernels will mirror them with device storage.
// Copying a Tensor copies its data.
// Thread-safety: plain value; concurrent reads are safe.

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace lockstep::trainer {

using Shape = std::vector<int64_t>;

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(Shape shape, float fill = 0.0f);
  Tensor(Shape shape, std::vector<float> values);  // values.size() must match the shape

  const Shape& shape() const { return shape_; }
  int64_t dim(size_t i) const { return shape_.at(i); }
  size_t rank() const { return shape_.size(); }
  int64_t size() const { return static_cast<int64_t>(data_.size()); }
  float* data() { return data_.data(); }
  const float* data() const { return data_.data(); }
  float& operator[](int64_t i) { return data_[static_cast<size_t>(i)]; }
  float operator[](int64_t i) const { return data_[static_cast<size_t>(i)]; }
  std::vector<float>& values() { return data_; }
  const std::vector<float>& values() const { return data_; }

  // Same data, another shape of the same element count.
  Tensor Reshaped(Shape shape) const;
  void Fill(float v);
  // Resizes (contents zeroed) unless the shape already matches.
  void Resize(const Shape& shape);

  bool operator==(const Tensor&) const = default;

 private:
  Shape shape_;
  std::vector<float> data_;
};

int64_t NumElements(const Shape& shape);
std::string ShapeString(const Shape& shape);  // "[64, 1, 28, 28]"

}  // namespace lockstep::trainer
