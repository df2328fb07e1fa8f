#include "trainer/layers/pooling/pooling_kernels.h"

#include <string>

#include "trainer/kernels/cuda/check.h"
#include "trainer/kernels/cuda/dtype.cuh"
#include "trainer/kernels/cuda/index.cuh"

namespace lockstep::trainer::cuda {
namespace {

// The geometry padded to three axes (missing leading axes have length 1), by value for kernels.
struct Geo3 {
  int64_t n, c;
  int64_t in[3], out[3], k[3], s[3], pad[3];
  __host__ __device__ int64_t in_size() const { return in[0] * in[1] * in[2]; }
  __host__ __device__ int64_t out_size() const { return out[0] * out[1] * out[2]; }
};

Geo3 Pad3(const cpu::ConvGeometry& g) {
  Geo3 r{};
  r.n = g.n;
  r.c = g.c_in;
  for (int a = 0; a < 3; ++a) {
    r.in[a] = r.out[a] = r.k[a] = r.s[a] = 1;
    r.pad[a] = 0;
  }
  for (int a = 0; a < g.rank; ++a) {
    const int ga = 3 - g.rank + a;
    const auto i = static_cast<size_t>(a);
    r.in[ga] = g.in[i];
    r.out[ga] = g.out[i];
    r.k[ga] = g.kernel[i];
    r.s[ga] = g.stride[i];
    r.pad[ga] = g.pad_before[i];
  }
  return r;
}

// The real inputs [lo, hi) of output o's window along axis a.
__device__ __forceinline__ void Window(const Geo3& g, int a, int64_t o, int64_t* lo, int64_t* hi) {
  const int64_t start = o * g.s[a] - g.pad[a];
  *lo = start < 0 ? 0 : start;
  const int64_t end = start + g.k[a];
  *hi = end > g.in[a] ? g.in[a] : end;
}

// One thread per (output position, channel).
template <typename T>
__global__ void PoolForwardKernel(const T* __restrict__ x, Geo3 g, bool max, T* __restrict__ y,
                                  int32_t* __restrict__ arg) {
  const int64_t total = g.n * g.out_size() * g.c;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t idx = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; idx < total; idx += stride) {
    int64_t j, o[3], b;
    Coords(idx, g.out, g.c, &j, o, &b);
    int64_t lo[3], hi[3];
    for (int a = 0; a < 3; ++a) Window(g, a, o[a], &lo[a], &hi[a]);
    float best = 0.0f, sum = 0.0f;
    int64_t best_i = -1;
    for (int64_t i0 = lo[0]; i0 < hi[0]; ++i0) {
      for (int64_t i1 = lo[1]; i1 < hi[1]; ++i1) {
        for (int64_t i2 = lo[2]; i2 < hi[2]; ++i2) {
          const int64_t i = ((b * g.in[0] + i0) * g.in[1] + i1) * g.in[2] + i2;
          const float v = ToFloat(x[i * g.c + j]);
          if (best_i < 0 || v > best) {
            best = v;
            best_i = i * g.c + j;
          }
          sum += v;
        }
      }
    }
    if (max) {
      y[idx] = FromFloat<T>(best);
      arg[idx] = static_cast<int32_t>(best_i);
    } else {
      const int64_t count = (hi[0] - lo[0]) * (hi[1] - lo[1]) * (hi[2] - lo[2]);
      y[idx] = FromFloat<T>(sum / static_cast<float>(count));
    }
  }
}

// The outputs [first, last] along axis a whose window holds input i.
__device__ __forceinline__ void Covering(const Geo3& g, int a, int64_t i, int64_t* first,
                                         int64_t* last) {
  // o s - pad <= i < o s - pad + k  <=>  (i + pad - k) / s < o <= (i + pad) / s
  const int64_t num = i + g.pad[a] - g.k[a] + 1;
  *first = num <= 0 ? 0 : (num + g.s[a] - 1) / g.s[a];
  const int64_t l = (i + g.pad[a]) / g.s[a];
  *last = l < g.out[a] - 1 ? l : g.out[a] - 1;
}

// One thread per (input position, channel): the sum of the outputs that took it.
template <typename T>
__global__ void PoolBackwardKernel(const T* __restrict__ dy, Geo3 g, bool max,
                                   const int32_t* __restrict__ arg, T* __restrict__ dx) {
  const int64_t total = g.n * g.in_size() * g.c;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t idx = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; idx < total; idx += stride) {
    int64_t j, in[3], b;
    Coords(idx, g.in, g.c, &j, in, &b);
    int64_t f[3], l[3];
    for (int a = 0; a < 3; ++a) Covering(g, a, in[a], &f[a], &l[a]);
    float sum = 0.0f;
    for (int64_t o0 = f[0]; o0 <= l[0]; ++o0) {
      for (int64_t o1 = f[1]; o1 <= l[1]; ++o1) {
        for (int64_t o2 = f[2]; o2 <= l[2]; ++o2) {
          const int64_t o = (((b * g.out[0] + o0) * g.out[1] + o1) * g.out[2] + o2) * g.c + j;
          if (max) {
            if (arg[o] == idx) sum += ToFloat(dy[o]);
          } else {
            int64_t lo[3], hi[3];
            Window(g, 0, o0, &lo[0], &hi[0]);
            Window(g, 1, o1, &lo[1], &hi[1]);
            Window(g, 2, o2, &lo[2], &hi[2]);
            const int64_t count = (hi[0] - lo[0]) * (hi[1] - lo[1]) * (hi[2] - lo[2]);
            sum += ToFloat(dy[o]) / static_cast<float>(count);
          }
        }
      }
    }
    dx[idx] = FromFloat<T>(sum);
  }
}

// One thread per (example, channel), striding over the steps (adjacent threads read adjacent
// channels).
// A masked average's weight per (example, step): 1 / (the example's unmasked steps) where its
// mask is on, else 0 (and 0 throughout for an example with every step masked). One thread per
// example.
__global__ void MaskedAverageWeightsKernel(const float* __restrict__ mask, int64_t n, int64_t steps,
                                           float* __restrict__ w) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t b = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; b < n; b += stride) {
    float count = 0;
    for (int64_t t = 0; t < steps; ++t) count += mask[b * steps + t] != 0.0f ? 1.0f : 0.0f;
    for (int64_t t = 0; t < steps; ++t) {
      const bool on = mask[b * steps + t] != 0.0f;
      w[b * steps + t] = on && count > 0 ? 1.0f / count : 0.0f;
    }
  }
}

// `w`: a masked average's weights [n, steps], or null (each step weighs 1 / steps).
template <typename T>
__global__ void GlobalPoolForwardKernel(const T* __restrict__ x, int64_t n, int64_t steps,
                                        int64_t c, bool max, const float* __restrict__ w,
                                        T* __restrict__ y, int32_t* __restrict__ arg) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t idx = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; idx < n * c; idx += stride) {
    const int64_t b = idx / c, j = idx % c;
    float best = 0.0f, sum = 0.0f;
    int64_t best_i = -1;
    for (int64_t t = 0; t < steps; ++t) {
      const int64_t i = (b * steps + t) * c + j;
      const float v = ToFloat(x[i]);
      if (best_i < 0 || v > best) {
        best = v;
        best_i = i;
      }
      sum += w != nullptr ? v * w[b * steps + t] : v;
    }
    if (max) {
      y[idx] = FromFloat<T>(best);
      arg[idx] = static_cast<int32_t>(best_i);
    } else {
      y[idx] = FromFloat<T>(w != nullptr ? sum : sum / static_cast<float>(steps));
    }
  }
}

template <typename T>
__global__ void GlobalPoolBackwardKernel(const T* __restrict__ dy, int64_t n, int64_t steps,
                                         int64_t c, bool max, const int32_t* __restrict__ arg,
                                         const float* __restrict__ w, T* __restrict__ dx) {
  const int64_t total = n * steps * c;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < total; i += stride) {
    const int64_t j = i % c, b = i / (steps * c);
    const int64_t o = b * c + j;
    const float g = ToFloat(dy[o]);
    const float avg = w != nullptr ? g * w[i / c] : g / static_cast<float>(steps);
    dx[i] = FromFloat<T>(max ? (arg[o] == i ? g : 0.0f) : avg);
  }
}

absl::Status FitsInt32(int64_t elements, const char* op) {
  if (elements >= (int64_t{1} << 31)) {
    return absl::InvalidArgumentError(std::string(op) + ": " + std::to_string(elements) +
                                      " input elements pass the int32 arg-max indices");
  }
  return absl::OkStatus();
}

Shape OutShape(const cpu::ConvGeometry& g) {
  Shape s{g.n};
  for (int a = 0; a < g.rank; ++a) s.push_back(g.out[static_cast<size_t>(a)]);
  s.push_back(g.c_in);
  return s;
}

}  // namespace

absl::Status PoolForward(GpuContext* ctx, const DeviceTensor& x, const cpu::ConvGeometry& g,
                         PoolKind kind, DeviceTensor* y, DeviceTensor* argmax) {
  const Geo3 g3 = Pad3(g);
  if (x.size() != g3.n * g3.in_size() * g3.c) {
    return absl::InvalidArgumentError("PoolForward: input of " + std::to_string(x.size()) +
                                      " elements does not match the geometry");
  }
  if (absl::Status st = FitsInt32(x.size(), "PoolForward"); !st.ok()) return st;
  if (absl::Status st = y->Resize(ctx, OutShape(g), x.dtype()); !st.ok()) return st;
  const bool max = kind == PoolKind::kMax;
  if (max) {
    if (absl::Status st = argmax->Resize(ctx, y->shape(), DType::kF32); !st.ok()) return st;
  }
  if (y->size() == 0) return absl::OkStatus();
  DispatchDType(x.dtype(), [&](auto t) {
    using T = decltype(t);
    PoolForwardKernel<T><<<Blocks(y->size()), kThreads, 0, ctx->stream()>>>(
        x.as<T>(), g3, max, y->as<T>(), max ? argmax->as<int32_t>() : nullptr);
    return 0;
  });
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status PoolBackward(GpuContext* ctx, const DeviceTensor& dy, const cpu::ConvGeometry& g,
                          PoolKind kind, const DeviceTensor& argmax, DeviceTensor* dx) {
  const Geo3 g3 = Pad3(g);
  if (dy.size() != g3.n * g3.out_size() * g3.c) {
    return absl::InvalidArgumentError("PoolBackward: gradient of " + std::to_string(dy.size()) +
                                      " elements does not match the geometry");
  }
  Shape in{g.n};
  for (int a = 0; a < g.rank; ++a) in.push_back(g.in[static_cast<size_t>(a)]);
  in.push_back(g.c_in);
  if (absl::Status st = dx->Resize(ctx, in, dy.dtype()); !st.ok()) return st;
  if (dx->size() == 0) return absl::OkStatus();
  const bool max = kind == PoolKind::kMax;
  DispatchDType(dy.dtype(), [&](auto t) {
    using T = decltype(t);
    PoolBackwardKernel<T><<<Blocks(dx->size()), kThreads, 0, ctx->stream()>>>(
        dy.as<T>(), g3, max, max ? argmax.as<int32_t>() : nullptr, dx->as<T>());
    return 0;
  });
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status GlobalPoolForward(GpuContext* ctx, const DeviceTensor& x, const DeviceTensor* mask,
                               int64_t n, int64_t steps, int64_t c, PoolKind kind, DeviceTensor* y,
                               DeviceTensor* saved) {
  if (x.size() != n * steps * c || steps <= 0) {
    return absl::InvalidArgumentError("GlobalPoolForward: input does not match [n, steps, c]");
  }
  if (mask != nullptr && (mask->dtype() != DType::kF32 || mask->size() != n * steps)) {
    return absl::InvalidArgumentError("GlobalPoolForward: a mask " + ShapeString(mask->shape()) +
                                      " does not match [n, steps]");
  }
  if (absl::Status st = FitsInt32(x.size(), "GlobalPoolForward"); !st.ok()) return st;
  if (absl::Status st = y->Resize(ctx, {n, c}, x.dtype()); !st.ok()) return st;
  const bool max = kind == PoolKind::kMax;
  const bool weighted = !max && mask != nullptr;
  if (max) {
    if (absl::Status st = saved->Resize(ctx, {n, c}, DType::kF32); !st.ok()) return st;
  } else if (weighted) {
    if (absl::Status st = saved->Resize(ctx, {n, steps}, DType::kF32); !st.ok()) return st;
  } else {
    *saved = DeviceTensor();
  }
  if (n * c == 0) return absl::OkStatus();
  if (weighted) {
    MaskedAverageWeightsKernel<<<Blocks(n), kThreads, 0, ctx->stream()>>>(
        mask->as<float>(), n, steps, saved->as<float>());
  }
  DispatchDType(x.dtype(), [&](auto t) {
    using T = decltype(t);
    GlobalPoolForwardKernel<T><<<Blocks(n * c), kThreads, 0, ctx->stream()>>>(
        x.as<T>(), n, steps, c, max, weighted ? saved->as<float>() : nullptr, y->as<T>(),
        max ? saved->as<int32_t>() : nullptr);
    return 0;
  });
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status GlobalPoolBackward(GpuContext* ctx, const DeviceTensor& dy, int64_t n, int64_t steps,
                                int64_t c, PoolKind kind, const DeviceTensor& saved,
                                DeviceTensor* dx) {
  if (dy.size() != n * c || steps <= 0) {
    return absl::InvalidArgumentError("GlobalPoolBackward: gradient does not match [n, c]");
  }
  if (absl::Status st = dx->Resize(ctx, {n, steps, c}, dy.dtype()); !st.ok()) return st;
  if (dx->size() == 0) return absl::OkStatus();
  const bool max = kind == PoolKind::kMax;
  DispatchDType(dy.dtype(), [&](auto t) {
    using T = decltype(t);
    GlobalPoolBackwardKernel<T><<<Blocks(dx->size()), kThreads, 0, ctx->stream()>>>(
        dy.as<T>(), n, steps, c, max, max ? saved.as<int32_t>() : nullptr,
        !max && saved.data() != nullptr ? saved.as<float>() : nullptr, dx->as<T>());
    return 0;
  });
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace lockstep::trainer::cuda
