#pragma once
// What the CUDA op tests share (cuda_ops_test.cc: the built-in models' ops; graph_ops_test.cc:
// the graph's): status assertions, the tolerance per storage dtype, the relative error
// ||got - want|| / ||want||, random inputs, and inputs rounded through a 16-bit dtype the way
// the GPU reads them. Test-only; needs a GPU context only for Rounded.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "trainer/kernels/cuda/device_tensor.h"

#define ASSERT_OK(expr)                    \
  do {                                     \
    const absl::Status s_ = (expr);        \
    ASSERT_TRUE(s_.ok()) << s_.ToString(); \
  } while (0)

namespace lockstep::trainer::cuda {

// fp32 1e-5 (TF32 5e-3), fp16 5e-3, bf16 3e-2: 16-bit inputs are rounded, sums stay fp32.
inline double Tolerance(DType t, bool tf32 = false) {
  switch (t) {
    case DType::kF16:
      return 5e-3;
    case DType::kBF16:
      return 3e-2;
    default:
      return tf32 ? 5e-3 : 1e-5;
  }
}

// Infinite when any result is not finite, and a failure when the sizes differ, so a short or
// long result never passes.
inline double RelativeError(const Tensor& got, const Tensor& want) {
  if (got.size() != want.size()) {
    ADD_FAILURE() << "result " << ShapeString(got.shape()) << ", expected "
                  << ShapeString(want.shape());
    return std::numeric_limits<double>::infinity();
  }
  double diff = 0, norm = 0;
  for (int64_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i])) return std::numeric_limits<double>::infinity();
    diff += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
    norm += static_cast<double>(want[i]) * want[i];
  }
  return std::sqrt(diff / std::max(norm, 1e-30));
}

inline Tensor Random(Shape shape, std::mt19937* rng, float lo = -1.0f, float hi = 1.0f) {
  Tensor t(std::move(shape));
  std::uniform_real_distribution<float> u(lo, hi);
  for (int64_t i = 0; i < t.size(); ++i) t[i] = u(*rng);
  return t;
}

// `t` rounded through dtype `d` and back, so a CPU reference sees what the GPU reads.
inline Tensor Rounded(GpuContext* ctx, const Tensor& t, DType d) {
  DeviceTensor dev;
  EXPECT_TRUE(Upload(ctx, t, d, &dev).ok());
  Tensor out;
  EXPECT_TRUE(Download(ctx, dev, &out).ok());
  return out;
}

// The relative error of a device result against `want` (downloaded first).
inline double DeviceError(GpuContext* ctx, const DeviceTensor& got, const Tensor& want) {
  Tensor host;
  const absl::Status s = Download(ctx, got, &host);
  if (!s.ok()) {
    ADD_FAILURE() << s;
    return std::numeric_limits<double>::infinity();
  }
  return RelativeError(host, want);
}

}  // namespace lockstep::trainer::cuda
