#include "trainer/kernels/cuda/check.h"
#include "trainer/kernels/cuda/dtype.cuh"
#include "trainer/kernels/cuda/elementwise.h"

namespace lockstep::trainer::cuda {
namespace {

// The contiguous kernels: each thread takes whole 16-byte packs of the widest type involved
// when every pointer is aligned and n divides, else single elements.
template <typename S, typename D>
__global__ void CastKernel(const S* __restrict__ src, D* __restrict__ dst, int64_t n) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) {
    dst[i] = FromFloat<D>(ToFloat(src[i]));
  }
}

__global__ void ScaleKernel(float* __restrict__ x, int64_t n, float alpha) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) {
    x[i] *= alpha;
  }
}

// l1 * sum|w| + l2 * sum w^2 in one block (a fixed order: the sum repeats bit for bit), and
// grad += grad_scale * (l1 sign(w) + 2 l2 w) when grad is given.
template <typename T>
__global__ void PenaltyKernel(const T* __restrict__ w, int64_t n, float l1, float l2,
                              T* __restrict__ grad, float grad_scale, float* __restrict__ penalty) {
  __shared__ double part[kThreads];
  double acc = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const float v = ToFloat(w[i]);
    acc += static_cast<double>(l1) * fabsf(v) + static_cast<double>(l2) * v * v;
    if (grad != nullptr) {
      grad[i] =
          FromFloat<T>(ToFloat(grad[i]) +
                       grad_scale * (l1 * static_cast<float>((v > 0) - (v < 0)) + 2.0f * l2 * v));
    }
  }
  part[threadIdx.x] = acc;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) *penalty = static_cast<float>(part[0]);
}

template <typename T>
__global__ void AddIntoKernel(T* __restrict__ acc, const T* __restrict__ x, int64_t n) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) {
    acc[i] = FromFloat<T>(ToFloat(acc[i]) + ToFloat(x[i]));
  }
}

template <typename T>
__global__ void AddBiasKernel(T* __restrict__ y, const float* __restrict__ b, int64_t total,
                              int64_t channels, int64_t inner) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < total; i += stride) {
    const int64_t c = (i / inner) % channels;
    y[i] = FromFloat<T>(ToFloat(y[i]) + b[c]);
  }
}

// One block per channel; the block's threads stride over (outer, inner) and reduce in shared
// memory. For Dense (inner 1) consecutive channels are adjacent, so a warp reads 32 rows of
// one column: acceptable for the bias (its gradient is small next to the GEMMs).
template <typename T>
__global__ void BiasGradKernel(const T* __restrict__ dy, float* __restrict__ db, int64_t outer,
                               int64_t channels, int64_t inner) {
  const int64_t c = blockIdx.x;
  const int64_t per = outer * inner;
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j < per; j += blockDim.x) {
    const int64_t o = j / inner, i = j % inner;
    sum += ToFloat(dy[(o * channels + c) * inner + i]);
  }
  __shared__ float partial[kThreads];
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) db[c] = partial[0];
}

__global__ void AllFiniteKernel(const float* __restrict__ x, int64_t n, int* __restrict__ bad) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  bool found = false;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) {
    if (!isfinite(x[i])) found = true;
  }
  if (__syncthreads_or(found) && threadIdx.x == 0) atomicExch(bad, 1);
}

absl::Status Launched() {
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace

absl::Status Cast(GpuContext* ctx, const void* src, DType src_type, void* dst, DType dst_type,
                  int64_t n) {
  if (n == 0) return absl::OkStatus();
  if (src_type == dst_type) {
    LOCKSTEP_GPU_RETURN_IF_ERROR(cudaMemcpyAsync(dst, src,
                                                 static_cast<size_t>(n) * DTypeSize(src_type),
                                                 cudaMemcpyDeviceToDevice, ctx->stream()));
    return absl::OkStatus();
  }
  DispatchDType(src_type, [&](auto s) {
    using S = decltype(s);
    DispatchDType(dst_type, [&](auto d) {
      using D = decltype(d);
      CastKernel<S, D><<<Blocks(n), kThreads, 0, ctx->stream()>>>(static_cast<const S*>(src),
                                                                  static_cast<D*>(dst), n);
      return 0;
    });
    return 0;
  });
  return Launched();
}

absl::Status Scale(GpuContext* ctx, float* x, int64_t n, float alpha) {
  if (n == 0) return absl::OkStatus();
  ScaleKernel<<<Blocks(n), kThreads, 0, ctx->stream()>>>(x, n, alpha);
  return Launched();
}

absl::Status WeightPenalty(GpuContext* ctx, const float* w, int64_t n, float l1, float l2,
                           float* grad, float grad_scale, float* penalty) {
  PenaltyKernel<float><<<1, kThreads, 0, ctx->stream()>>>(w, n, l1, l2, grad, grad_scale, penalty);
  return Launched();
}

absl::Status ActivityPenalty(GpuContext* ctx, const DeviceTensor& y, float l1, float l2,
                             DeviceTensor* dy, float grad_scale, float* penalty) {
  if (dy != nullptr && (dy->size() != y.size() || dy->dtype() != y.dtype())) {
    return absl::InvalidArgumentError("ActivityPenalty: the gradient " + ShapeString(dy->shape()) +
                                      " does not fit the output " + ShapeString(y.shape()));
  }
  DispatchDType(y.dtype(), [&](auto t) {
    using T = decltype(t);
    PenaltyKernel<T><<<1, kThreads, 0, ctx->stream()>>>(
        y.as<T>(), y.size(), l1, l2, dy != nullptr ? dy->as<T>() : nullptr, grad_scale, penalty);
    return 0;
  });
  return Launched();
}

absl::Status AddInto(GpuContext* ctx, DeviceTensor* acc, const DeviceTensor& x) {
  if (acc->size() != x.size() || acc->dtype() != x.dtype()) {
    return absl::InvalidArgumentError("AddInto: " + ShapeString(x.shape()) + " " +
                                      DTypeName(x.dtype()) + " into " + ShapeString(acc->shape()) +
                                      " " + DTypeName(acc->dtype()));
  }
  if (x.size() == 0) return absl::OkStatus();
  DispatchDType(x.dtype(), [&](auto t) {
    using T = decltype(t);
    AddIntoKernel<T>
        <<<Blocks(x.size()), kThreads, 0, ctx->stream()>>>(acc->as<T>(), x.as<T>(), x.size());
    return 0;
  });
  return Launched();
}

absl::Status AddBias(GpuContext* ctx, DeviceTensor* y, const float* b, int64_t outer,
                     int64_t channels, int64_t inner) {
  const int64_t total = outer * channels * inner;
  if (total == 0) return absl::OkStatus();
  DispatchDType(y->dtype(), [&](auto t) {
    using T = decltype(t);
    AddBiasKernel<T>
        <<<Blocks(total), kThreads, 0, ctx->stream()>>>(y->as<T>(), b, total, channels, inner);
    return 0;
  });
  return Launched();
}

absl::Status BiasGrad(GpuContext* ctx, const DeviceTensor& dy, float* db, int64_t outer,
                      int64_t channels, int64_t inner) {
  if (channels == 0) return absl::OkStatus();
  DispatchDType(dy.dtype(), [&](auto t) {
    using T = decltype(t);
    BiasGradKernel<T><<<static_cast<unsigned int>(channels), kThreads, 0, ctx->stream()>>>(
        dy.as<T>(), db, outer, channels, inner);
    return 0;
  });
  return Launched();
}

absl::StatusOr<bool> AllFinite(GpuContext* ctx, const float* x, int64_t n) {
  absl::StatusOr<DeviceBuffer> flag = DeviceBuffer::Make(ctx->allocator(), sizeof(int));
  if (!flag.ok()) return flag.status();
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudaMemsetAsync(flag->get(), 0, sizeof(int), ctx->stream()));
  if (n > 0) {
    AllFiniteKernel<<<std::min(Blocks(n), 1024u), kThreads, 0, ctx->stream()>>>(x, n,
                                                                                flag->as<int>());
    if (absl::Status s = Launched(); !s.ok()) return s;
  }
  int bad = 0;
  LOCKSTEP_GPU_RETURN_IF_ERROR(
      cudaMemcpyAsync(&bad, flag->get(), sizeof(int), cudaMemcpyDeviceToHost, ctx->stream()));
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudaStreamSynchronize(ctx->stream()));
  return bad == 0;
}

// DeviceTensor's storage and transfers live here, beside Cast.
size_t DTypeSize(DType t) { return t == DType::kF32 ? 4 : 2; }

const char* DTypeName(DType t) {
  switch (t) {
    case DType::kF16:
      return "fp16";
    case DType::kBF16:
      return "bf16";
    default:
      return "fp32";
  }
}

absl::StatusOr<DeviceTensor> DeviceTensor::Make(GpuContext* ctx, Shape shape, DType dtype) {
  DeviceTensor t;
  if (absl::Status s = t.Resize(ctx, shape, dtype); !s.ok()) return s;
  return t;
}

DeviceTensor DeviceTensor::View(void* data, Shape shape, DType dtype) {
  DeviceTensor t;
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  t.data_ = data;
  return t;
}

absl::Status DeviceTensor::Resize(GpuContext* ctx, const Shape& shape, DType dtype) {
  const size_t need = static_cast<size_t>(NumElements(shape)) * DTypeSize(dtype);
  if (owned_.get() == nullptr || owned_.bytes() < need) {
    if (data_ != nullptr && owned_.get() == nullptr) {
      return absl::InternalError("DeviceTensor::Resize: a view cannot grow");
    }
    owned_.Reset();
    absl::StatusOr<DeviceBuffer> b = DeviceBuffer::Make(ctx->allocator(), need);
    if (!b.ok()) return b.status();
    owned_ = std::move(*b);
    data_ = owned_.get();
  }
  shape_ = shape;
  dtype_ = dtype;
  return absl::OkStatus();
}

absl::Status Upload(GpuContext* ctx, const Tensor& src, DType dtype, DeviceTensor* dst) {
  if (absl::Status s = dst->Resize(ctx, src.shape(), dtype); !s.ok()) return s;
  const size_t bytes = static_cast<size_t>(src.size()) * sizeof(float);
  if (dtype == DType::kF32) {
    LOCKSTEP_GPU_RETURN_IF_ERROR(
        cudaMemcpyAsync(dst->data(), src.data(), bytes, cudaMemcpyHostToDevice, ctx->stream()));
    // A pageable source is copied before cudaMemcpyAsync returns, so `src` may change after.
    return absl::OkStatus();
  }
  absl::StatusOr<DeviceBuffer> staging = DeviceBuffer::Make(ctx->allocator(), bytes);
  if (!staging.ok()) return staging.status();
  LOCKSTEP_GPU_RETURN_IF_ERROR(
      cudaMemcpyAsync(staging->get(), src.data(), bytes, cudaMemcpyHostToDevice, ctx->stream()));
  return Cast(ctx, staging->get(), DType::kF32, dst->data(), dtype, src.size());
}

absl::Status Download(GpuContext* ctx, const DeviceTensor& src, Tensor* dst) {
  dst->Resize(src.shape());
  const size_t bytes = static_cast<size_t>(src.size()) * sizeof(float);
  if (src.dtype() == DType::kF32) {
    LOCKSTEP_GPU_RETURN_IF_ERROR(
        cudaMemcpyAsync(dst->data(), src.data(), bytes, cudaMemcpyDeviceToHost, ctx->stream()));
  } else {
    absl::StatusOr<DeviceBuffer> staging = DeviceBuffer::Make(ctx->allocator(), bytes);
    if (!staging.ok()) return staging.status();
    if (absl::Status s =
            Cast(ctx, src.data(), src.dtype(), staging->get(), DType::kF32, src.size());
        !s.ok()) {
      return s;
    }
    LOCKSTEP_GPU_RETURN_IF_ERROR(
        cudaMemcpyAsync(dst->data(), staging->get(), bytes, cudaMemcpyDeviceToHost, ctx->stream()));
  }
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudaStreamSynchronize(ctx->stream()));
  return absl::OkStatus();
}

}  // namespace lockstep::trainer::cuda
