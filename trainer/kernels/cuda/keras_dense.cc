#include "trainer/kernels/cuda/keras_dense.h"

#include <string>

#include "trainer/kernels/cuda/elementwise.h"
#include "trainer/kernels/cuda/gemm.h"

namespace lockstep::trainer::cuda {
namespace {

absl::Status Check(const DeviceTensor& x, const DeviceTensor& kernel, const char* op) {
  if (kernel.shape().size() != 2 || x.shape().empty() || x.shape().back() != kernel.dim(0) ||
      x.dtype() != kernel.dtype()) {
    return absl::InvalidArgumentError(std::string(op) + ": input " + ShapeString(x.shape()) +
                                      " does not match kernel " + ShapeString(kernel.shape()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status KerasDenseForward(GpuContext* ctx, const DeviceTensor& x, const DeviceTensor& kernel,
                               const float* b, DeviceTensor* y) {
  if (absl::Status s = Check(x, kernel, "KerasDenseForward"); !s.ok()) return s;
  const int64_t in = kernel.dim(0), units = kernel.dim(1), rows = x.size() / in;
  Shape ys = x.shape();
  ys.back() = units;
  if (absl::Status s = y->Resize(ctx, ys, x.dtype()); !s.ok()) return s;
  if (rows == 0) return absl::OkStatus();
  if (absl::Status s = Gemm(ctx, false, false, rows, units, in, 1.0f, x.data(), kernel.data(),
                            x.dtype(), 0.0f, y->data(), x.dtype());
      !s.ok()) {
    return s;
  }
  if (b == nullptr) return absl::OkStatus();
  return AddBias(ctx, y, b, rows, units, 1);
}

absl::Status KerasDenseBackward(GpuContext* ctx, const DeviceTensor& x, const DeviceTensor& kernel,
                                const DeviceTensor& dy, DeviceTensor* dx, float* dkernel,
                                float* db) {
  if (absl::Status s = Check(x, kernel, "KerasDenseBackward"); !s.ok()) return s;
  const int64_t in = kernel.dim(0), units = kernel.dim(1), rows = x.size() / in;
  if (dy.size() != rows * units || dy.dtype() != x.dtype()) {
    return absl::InvalidArgumentError("KerasDenseBackward: gradient " + ShapeString(dy.shape()) +
                                      " does not match " + std::to_string(rows) + " rows of " +
                                      std::to_string(units));
  }
  if (dx != nullptr) {
    if (absl::Status s = dx->Resize(ctx, x.shape(), x.dtype()); !s.ok()) return s;
    if (rows > 0) {
      if (absl::Status s = Gemm(ctx, false, true, rows, in, units, 1.0f, dy.data(), kernel.data(),
                                x.dtype(), 0.0f, dx->data(), x.dtype());
          !s.ok()) {
        return s;
      }
    }
  }
  if (dkernel != nullptr) {
    if (absl::Status s = Gemm(ctx, true, false, in, units, rows, 1.0f, x.data(), dy.data(),
                              x.dtype(), 0.0f, dkernel, DType::kF32);
        !s.ok()) {
      return s;
    }
  }
  if (db != nullptr) return BiasGrad(ctx, dy, db, rows, units, 1);
  return absl::OkStatus();
}

}  // namespace lockstep::trainer::cuda
