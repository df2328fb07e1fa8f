#pragma once
// DeviceTensor: a dense array in one GPU's memory with a row-major shape (NCHW for images) and
// an element type: fp32, or fp16/bf16 for mixed precision (where the arithmetic is still fp32
// and only storage is 16-bit). It owns a block of its context's caching allocator, or views
// memory owned elsewhere (a layer's slice of the flat parameter buffer). The CUDA ops take
// DeviceTensors where the CPU ops take Tensors.
// Thread-safety: plain value (move-only); the owning context's thread uses it.

#include <cstdint>

#include "absl/status/statusor.h"
#include "trainer/kernels/cuda/device.h"
#include "trainer/tensor/tensor.h"

namespace lockstep::trainer::cuda {

enum class DType { kF32, kF16, kBF16 };
size_t DTypeSize(DType t);
const char* DTypeName(DType t);  // "fp32", "fp16", "bf16"

class DeviceTensor {
 public:
  DeviceTensor() = default;
  static absl::StatusOr<DeviceTensor> Make(GpuContext* ctx, Shape shape, DType dtype);
  // A view of `data`, which must outlive it.
  static DeviceTensor View(void* data, Shape shape, DType dtype);

  // Keeps the storage when the new shape fits in it (activations keep their blocks across
  // steps; the last batch of an epoch may be smaller).
  absl::Status Resize(GpuContext* ctx, const Shape& shape, DType dtype);

  const Shape& shape() const { return shape_; }
  int64_t dim(size_t i) const { return shape_.at(i); }
  int64_t size() const { return NumElements(shape_); }
  DType dtype() const { return dtype_; }
  size_t bytes() const { return static_cast<size_t>(size()) * DTypeSize(dtype_); }
  void* data() const { return data_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  // The same memory with another shape of the same element count.
  DeviceTensor Reshaped(Shape shape) const { return View(data_, std::move(shape), dtype_); }
  // This tensor (owned or a view) takes another shape of the same element count in place.
  void Reshape(Shape shape) {
    if (NumElements(shape) == size()) shape_ = std::move(shape);
  }

 private:
  Shape shape_;
  DType dtype_ = DType::kF32;
  void* data_ = nullptr;
  DeviceBuffer owned_;
};

// Host fp32 <-> device (any dtype; converted on the device). Upload resizes `dst` to the
// host shape with `dtype`. Both are asynchronous on the context's stream except that Download
// waits for its copy (the host tensor is then ready).
absl::Status Upload(GpuContext* ctx, const Tensor& src, DType dtype, DeviceTensor* dst);
absl::Status Download(GpuContext* ctx, const DeviceTensor& src, Tensor* dst);

}  // namespace lockstep::trainer::cuda
