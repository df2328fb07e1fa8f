#include "trainer/kernels/cuda/spatial.h"

#include <string>

#include "trainer/kernels/cuda/check.h"
#include "trainer/kernels/cuda/dtype.cuh"
#include "trainer/kernels/cuda/index.cuh"

namespace lockstep::trainer::cuda {
namespace {

// Three spatial axes, the missing leading ones of length 1.
struct Dims3 {
  int64_t n = 0, c = 0;
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1}, a[3] = {0, 0, 0};  // a: before, or size
};

absl::Status Check(const DeviceTensor& x, int rank, const char* op) {
  if (rank < 1 || rank > 3 || x.shape().size() != static_cast<size_t>(rank) + 2) {
    return absl::InvalidArgumentError(std::string(op) + ": input " + ShapeString(x.shape()) +
                                      " is not [n, " + std::to_string(rank) + " spatial axes, c]");
  }
  return absl::OkStatus();
}

template <typename T>
__global__ void PadOrCropKernel(const T* __restrict__ x, Dims3 g, int64_t total,
                                T* __restrict__ y) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < total; i += stride) {
    int64_t j, q[3], b;
    Coords(i, g.out, g.c, &j, q, &b);
    bool inside = true;
    for (int k = 0; k < 3; ++k) {
      q[k] -= g.a[k];
      inside = inside && q[k] >= 0 && q[k] < g.in[k];
    }
    y[i] = inside ? x[Flat(b, q, g.in, g.c, j)] : FromFloat<T>(0.0f);
  }
}

template <typename T>
__global__ void NearestKernel(const T* __restrict__ x, Dims3 g, int64_t total, T* __restrict__ y) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < total; i += stride) {
    int64_t j, q[3], b;
    Coords(i, g.out, g.c, &j, q, &b);
    for (int k = 0; k < 3; ++k) q[k] /= g.a[k];
    y[i] = x[Flat(b, q, g.in, g.c, j)];
  }
}

// dx[i] = the sum of dy over i's block of size^rank outputs, in block order.
template <typename T>
__global__ void NearestBackwardKernel(const T* __restrict__ dy, Dims3 g, int64_t total,
                                      T* __restrict__ dx) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < total; i += stride) {
    int64_t j, q[3], b;
    Coords(i, g.in, g.c, &j, q, &b);
    float sum = 0.0f;
    int64_t o[3];
    for (o[0] = q[0] * g.a[0]; o[0] < (q[0] + 1) * g.a[0]; ++o[0]) {
      for (o[1] = q[1] * g.a[1]; o[1] < (q[1] + 1) * g.a[1]; ++o[1]) {
        for (o[2] = q[2] * g.a[2]; o[2] < (q[2] + 1) * g.a[2]; ++o[2]) {
          sum += ToFloat(dy[Flat(b, o, g.out, g.c, j)]);
        }
      }
    }
    dx[i] = FromFloat<T>(sum);
  }
}

// One axis of the half-pixel resize, as pooling.cc's Lerp (no fused multiply-adds, so the
// source positions round as the CPU's do).
struct Lerp {
  int64_t lo, hi;
  float w;
};
__device__ __forceinline__ Lerp AxisLerp(int64_t in, int64_t out, int64_t o) {
  const float scale = __fdiv_rn(static_cast<float>(in), static_cast<float>(out));
  const float src = __fsub_rn(__fmul_rn(__fadd_rn(static_cast<float>(o), 0.5f), scale), 0.5f);
  const float fl = floorf(src);
  Lerp l;
  l.lo = static_cast<int64_t>(fl) > 0 ? static_cast<int64_t>(fl) : 0;
  const auto up = static_cast<int64_t>(ceilf(src));
  l.hi = up < in - 1 ? up : in - 1;
  l.w = __fsub_rn(src, fl);
  return l;
}

template <typename T>
__global__ void BilinearKernel(const T* __restrict__ x, int64_t n, int64_t ih, int64_t iw,
                               int64_t oh, int64_t ow, int64_t c, T* __restrict__ y) {
  const int64_t total = n * oh * ow * c;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < total; i += stride) {
    const int64_t j = i % c;
    const int64_t ox = (i / c) % ow, oy = (i / c / ow) % oh, b = i / c / ow / oh;
    const Lerp ey = AxisLerp(ih, oh, oy), ex = AxisLerp(iw, ow, ox);
    const int64_t base = b * ih * iw;
    auto at = [&](int64_t yy, int64_t xx) { return ToFloat(x[(base + yy * iw + xx) * c + j]); };
    const float w00 = (1 - ey.w) * (1 - ex.w), w01 = (1 - ey.w) * ex.w;
    const float w10 = ey.w * (1 - ex.w), w11 = ey.w * ex.w;
    y[i] = FromFloat<T>(w00 * at(ey.lo, ex.lo) + w01 * at(ey.lo, ex.hi) + w10 * at(ey.hi, ex.lo) +
                        w11 * at(ey.hi, ex.hi));
  }
}

// The weight with which output (oy, ox) reads input (iy, ix).
__device__ __forceinline__ float BilinearWeight(const Lerp& ey, const Lerp& ex, int64_t iy,
                                                int64_t ix) {
  const float wy = (ey.lo == iy ? 1 - ey.w : 0.0f) + (ey.hi == iy ? ey.w : 0.0f);
  const float wx = (ex.lo == ix ? 1 - ex.w : 0.0f) + (ex.hi == ix ? ex.w : 0.0f);
  return wy * wx;
}

// dx per input pixel: the outputs whose four neighbours include it lie within two input
// pixels' span of outputs either side (out >= in: upsampling).
template <typename T>
__global__ void BilinearBackwardKernel(const T* __restrict__ dy, int64_t n, int64_t ih, int64_t iw,
                                       int64_t oh, int64_t ow, int64_t c, T* __restrict__ dx) {
  const int64_t total = n * ih * iw * c;
  const int64_t ry = (oh + ih - 1) / ih + 1, rx = (ow + iw - 1) / iw + 1;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < total; i += stride) {
    const int64_t j = i % c;
    const int64_t ix = (i / c) % iw, iy = (i / c / iw) % ih, b = i / c / iw / ih;
    const int64_t cy = iy * oh / ih, cx = ix * ow / iw;
    const int64_t y0 = cy - 2 * ry > 0 ? cy - 2 * ry : 0, y1 = cy + 2 * ry < oh ? cy + 2 * ry : oh;
    const int64_t x0 = cx - 2 * rx > 0 ? cx - 2 * rx : 0, x1 = cx + 2 * rx < ow ? cx + 2 * rx : ow;
    float sum = 0.0f;
    for (int64_t oy = y0; oy < y1; ++oy) {
      const Lerp ey = AxisLerp(ih, oh, oy);
      if (ey.lo != iy && ey.hi != iy) continue;
      for (int64_t ox = x0; ox < x1; ++ox) {
        const Lerp ex = AxisLerp(iw, ow, ox);
        if (ex.lo != ix && ex.hi != ix) continue;
        sum += BilinearWeight(ey, ex, iy, ix) * ToFloat(dy[((b * oh + oy) * ow + ox) * c + j]);
      }
    }
    dx[i] = FromFloat<T>(sum);
  }
}

Dims3 Make(const Shape& x, int rank) {
  Dims3 g;
  g.n = x[0];
  g.c = x.back();
  for (int k = 0; k < rank; ++k) g.in[3 - rank + k] = x[static_cast<size_t>(k) + 1];
  return g;
}

Shape ShapeOf(const Dims3& g, int rank, const int64_t* d) {
  Shape s{g.n};
  for (int k = 0; k < rank; ++k) s.push_back(d[3 - rank + k]);
  s.push_back(g.c);
  return s;
}

absl::Status Launched() {
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace

absl::Status PadOrCrop(GpuContext* ctx, const DeviceTensor& x, int rank, const Axes3& before,
                       const Axes3& after, DeviceTensor* y) {
  if (absl::Status s = Check(x, rank, "PadOrCrop"); !s.ok()) return s;
  Dims3 g = Make(x.shape(), rank);
  for (int k = 0; k < rank; ++k) {
    const int ga = 3 - rank + k;
    const auto i = static_cast<size_t>(k);
    g.a[ga] = before[i];
    g.out[ga] = g.in[ga] + before[i] + after[i];
    if (g.out[ga] < 0) {
      return absl::InvalidArgumentError("PadOrCrop: axis " + std::to_string(k) + " of " +
                                        ShapeString(x.shape()) + " cropped below zero");
    }
  }
  if (absl::Status s = y->Resize(ctx, ShapeOf(g, rank, g.out), x.dtype()); !s.ok()) return s;
  if (y->size() == 0) return absl::OkStatus();
  DispatchDType(x.dtype(), [&](auto t) {
    using T = decltype(t);
    PadOrCropKernel<T>
        <<<Blocks(y->size()), kThreads, 0, ctx->stream()>>>(x.as<T>(), g, y->size(), y->as<T>());
    return 0;
  });
  return Launched();
}

absl::Status UpsampleNearest(GpuContext* ctx, const DeviceTensor& x, int rank, const Axes3& size,
                             DeviceTensor* y) {
  if (absl::Status s = Check(x, rank, "UpsampleNearest"); !s.ok()) return s;
  Dims3 g = Make(x.shape(), rank);
  for (int k = 0; k < 3; ++k) g.a[k] = 1;
  for (int k = 0; k < rank; ++k) {
    const int ga = 3 - rank + k;
    g.a[ga] = size[static_cast<size_t>(k)];
    if (g.a[ga] <= 0) {
      return absl::InvalidArgumentError("UpsampleNearest: size " + std::to_string(g.a[ga]) +
                                        " on axis " + std::to_string(k) + " is not positive");
    }
    g.out[ga] = g.in[ga] * g.a[ga];
  }
  if (absl::Status s = y->Resize(ctx, ShapeOf(g, rank, g.out), x.dtype()); !s.ok()) return s;
  if (y->size() == 0) return absl::OkStatus();
  DispatchDType(x.dtype(), [&](auto t) {
    using T = decltype(t);
    NearestKernel<T>
        <<<Blocks(y->size()), kThreads, 0, ctx->stream()>>>(x.as<T>(), g, y->size(), y->as<T>());
    return 0;
  });
  return Launched();
}

absl::Status UpsampleNearestBackward(GpuContext* ctx, const DeviceTensor& dy, int rank,
                                     const Axes3& size, DeviceTensor* dx) {
  if (absl::Status s = Check(dy, rank, "UpsampleNearestBackward"); !s.ok()) return s;
  Dims3 g;
  g.n = dy.dim(0);
  g.c = dy.shape().back();
  for (int k = 0; k < 3; ++k) g.a[k] = 1;
  for (int k = 0; k < rank; ++k) {
    const int ga = 3 - rank + k;
    const auto i = static_cast<size_t>(k);
    g.a[ga] = size[i];
    g.out[ga] = dy.dim(i + 1);
    if (size[i] <= 0 || g.out[ga] % size[i] != 0) {
      return absl::InvalidArgumentError("UpsampleNearestBackward: " + ShapeString(dy.shape()) +
                                        " is not a multiple of the size");
    }
    g.in[ga] = g.out[ga] / size[i];
  }
  if (absl::Status s = dx->Resize(ctx, ShapeOf(g, rank, g.in), dy.dtype()); !s.ok()) return s;
  if (dx->size() == 0) return absl::OkStatus();
  DispatchDType(dy.dtype(), [&](auto t) {
    using T = decltype(t);
    NearestBackwardKernel<T><<<Blocks(dx->size()), kThreads, 0, ctx->stream()>>>(
        dy.as<T>(), g, dx->size(), dx->as<T>());
    return 0;
  });
  return Launched();
}

absl::Status UpsampleBilinear2d(GpuContext* ctx, const DeviceTensor& x, int64_t out_h,
                                int64_t out_w, DeviceTensor* y) {
  if (absl::Status s = Check(x, 2, "UpsampleBilinear2d"); !s.ok()) return s;
  const int64_t n = x.dim(0), ih = x.dim(1), iw = x.dim(2), c = x.dim(3);
  if (out_h < ih || out_w < iw) {
    return absl::InvalidArgumentError("UpsampleBilinear2d: the output is smaller than the input");
  }
  if (absl::Status s = y->Resize(ctx, {n, out_h, out_w, c}, x.dtype()); !s.ok()) return s;
  if (y->size() == 0) return absl::OkStatus();
  DispatchDType(x.dtype(), [&](auto t) {
    using T = decltype(t);
    BilinearKernel<T><<<Blocks(y->size()), kThreads, 0, ctx->stream()>>>(
        x.as<T>(), n, ih, iw, out_h, out_w, c, y->as<T>());
    return 0;
  });
  return Launched();
}

absl::Status UpsampleBilinear2dBackward(GpuContext* ctx, const DeviceTensor& dy, int64_t in_h,
                                        int64_t in_w, DeviceTensor* dx) {
  if (absl::Status s = Check(dy, 2, "UpsampleBilinear2dBackward"); !s.ok()) return s;
  const int64_t n = dy.dim(0), oh = dy.dim(1), ow = dy.dim(2), c = dy.dim(3);
  if (in_h <= 0 || in_w <= 0 || oh < in_h || ow < in_w) {
    return absl::InvalidArgumentError("UpsampleBilinear2dBackward: bad input size");
  }
  if (absl::Status s = dx->Resize(ctx, {n, in_h, in_w, c}, dy.dtype()); !s.ok()) return s;
  if (dx->size() == 0) return absl::OkStatus();
  DispatchDType(dy.dtype(), [&](auto t) {
    using T = decltype(t);
    BilinearBackwardKernel<T><<<Blocks(dx->size()), kThreads, 0, ctx->stream()>>>(
        dy.as<T>(), n, in_h, in_w, oh, ow, c, dx->as<T>());
    return 0;
  });
  return Launched();
}

}  // namespace lockstep::trainer::cuda
