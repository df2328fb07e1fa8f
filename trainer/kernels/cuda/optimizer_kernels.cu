#include "trainer/kernels/cuda/check.h"
#include "trainer/kernels/cuda/dtype.cuh"
#include "trainer/kernels/cuda/optimizer_kernels.h"

namespace lockstep::trainer::cuda {
namespace {

// The slots and scales one launch touches.
struct Flat {
  float* __restrict__ p;
  const float* __restrict__ g;
  float* __restrict__ s0;
  float* __restrict__ s1;
  float* __restrict__ s2;
  void* __restrict__ copy;
  const int32_t* __restrict__ chunk_segment;  // null: no per-tensor scale
  const float* __restrict__ scales;
  int64_t n;
  float factor;
};

// One element of rule R, as UpdateRange (kernels/cpu/update.cc) computes it.
template <UpdateRule R>
__device__ __forceinline__ float UpdateOne(const UpdateParams& u, const Flat& f, int64_t j) {
  float* s0 = f.s0;
  float* s1 = f.s1;
  float* s2 = f.s2;
  const float raw = f.g[j] * f.factor;
  if constexpr (R == UpdateRule::kTorchSgd) {
    if (s0 == nullptr) return f.p[j] - u.lr * raw;
    s0[j] = u.momentum * s0[j] + raw;
    return f.p[j] - u.lr * s0[j];
  } else if constexpr (R == UpdateRule::kTorchAdam) {
    s0[j] = u.beta1 * s0[j] + u.a1 * raw;
    s1[j] = u.beta2 * s1[j] + u.a2 * raw * raw;
    return f.p[j] - u.alpha * s0[j] / (sqrtf(s1[j]) + u.eps);
  } else {
    float scale = u.scale;
    if (f.chunk_segment != nullptr) {
      scale *= f.scales[f.chunk_segment[j / ClipScales::kSegmentAlign]];
    }
    // Comparisons, not fminf/fmaxf (which drop a NaN): a NaN gradient stays NaN, as on the CPU.
    const float t = raw * scale;
    const float g = t < -u.clip ? -u.clip : (t > u.clip ? u.clip : t);
    const float p = f.p[j] * u.keep;
    if constexpr (R == UpdateRule::kKerasSgd) {
      return p - u.lr * g;
    } else if constexpr (R == UpdateRule::kKerasMomentum) {
      s0[j] = u.momentum * s0[j] - u.lr * g;
      return p + s0[j];
    } else if constexpr (R == UpdateRule::kKerasNesterov) {
      s0[j] = u.momentum * s0[j] - u.lr * g;
      return p + (u.momentum * s0[j] - u.lr * g);
    } else if constexpr (R == UpdateRule::kKerasAdam || R == UpdateRule::kKerasAmsgrad) {
      s0[j] += (g - s0[j]) * u.a1;
      s1[j] += (g * g - s1[j]) * u.a2;
      float v = s1[j];
      if constexpr (R == UpdateRule::kKerasAmsgrad) {
        s2[j] = s2[j] > s1[j] ? s2[j] : s1[j];
        v = s2[j];
      }
      return p - u.alpha * s0[j] / (sqrtf(v) + u.eps);
    } else if constexpr (R == UpdateRule::kKerasAdagrad) {
      s0[j] += g * g;
      return p - u.lr * g / sqrtf(s0[j] + u.eps);
    } else {
      // RMSprop: s0 the mean square; then the momentum (s1) when there is one; then the mean.
      constexpr bool kMomentum =
          R == UpdateRule::kKerasRmspropMomentum || R == UpdateRule::kKerasRmspropCenteredMomentum;
      constexpr bool kCentred =
          R == UpdateRule::kKerasRmspropCentered || R == UpdateRule::kKerasRmspropCenteredMomentum;
      s0[j] = u.rho * s0[j] + (1 - u.rho) * g * g;
      float denom = s0[j] + u.eps;
      if constexpr (kCentred) {
        float* avg = kMomentum ? s2 : s1;
        avg[j] = u.rho * avg[j] + (1 - u.rho) * g;
        denom = denom - avg[j] * avg[j];
      }
      const float inc = u.lr * g / sqrtf(denom);
      if constexpr (kMomentum) {
        s1[j] = u.momentum * s1[j] + inc;
        return p - s1[j];
      }
      return p - inc;
    }
  }
}

template <UpdateRule R, typename C>
__global__ void UpdateKernel(UpdateParams u, Flat f) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t j = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; j < f.n; j += stride) {
    const float w = UpdateOne<R>(u, f, j);
    f.p[j] = w;
    if (f.copy != nullptr) static_cast<C*>(f.copy)[j] = FromFloat<C>(w);
  }
}

template <UpdateRule R>
void Launch(GpuContext* ctx, const UpdateParams& u, const Flat& f, DType compute) {
  DispatchDType(compute, [&](auto c) {
    using C = decltype(c);
    UpdateKernel<R, C><<<Blocks(f.n), kThreads, 0, ctx->stream()>>>(u, f);
    return 0;
  });
}

// One block per parameter: the sum of (g * factor)^2 over its elements, in a fixed order.
__global__ void SegmentSquaresKernel(const float* __restrict__ g, const int64_t* __restrict__ off,
                                     const int64_t* __restrict__ size, float factor,
                                     float* __restrict__ squares) {
  __shared__ double part[kThreads];
  const int64_t s = blockIdx.x;
  double acc = 0;
  for (int64_t j = threadIdx.x; j < size[s]; j += blockDim.x) {
    const double v = static_cast<double>(g[off[s] + j]) * factor;
    acc += v * v;
  }
  part[threadIdx.x] = acc;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) squares[s] = static_cast<float>(part[0]);
}

// One thread: the global norm in parameter order, then each parameter's scale.
__global__ void ScalesKernel(const float* __restrict__ squares, int64_t segments, float clipnorm,
                             float global_clipnorm, float* __restrict__ scales) {
  double total = 0;
  for (int64_t s = 0; s < segments; ++s) total += squares[s];
  float global = 1.0f;
  const double norm = sqrt(total);
  if (global_clipnorm > 0 && norm > global_clipnorm) {
    global = static_cast<float>(global_clipnorm / norm);
  }
  for (int64_t s = 0; s < segments; ++s) {
    float scale = global;
    if (clipnorm > 0) {
      const double n = sqrt(static_cast<double>(squares[s])) * global;
      if (n > clipnorm) scale *= static_cast<float>(clipnorm / n);
    }
    scales[s] = scale;
  }
}

}  // namespace

absl::StatusOr<ClipScales> ClipScales::Make(GpuContext* ctx, const std::vector<int64_t>& offsets,
                                            const std::vector<int64_t>& sizes, int64_t n) {
  ClipScales c;
  c.segments_ = static_cast<int64_t>(offsets.size());
  const size_t segs = std::max<size_t>(offsets.size(), 1);
  const int64_t chunks = std::max<int64_t>((n + kSegmentAlign - 1) / kSegmentAlign, 1);
  std::vector<int32_t> chunk_segment(static_cast<size_t>(chunks), 0);
  for (size_t i = 0; i < offsets.size(); ++i) {
    if (offsets[i] % kSegmentAlign != 0 || offsets[i] + sizes[i] > n) {
      return absl::InvalidArgumentError("ClipScales: parameter " + std::to_string(i) +
                                        " is not aligned to the flat buffer's segments");
    }
    for (int64_t k = offsets[i] / kSegmentAlign; k * kSegmentAlign < offsets[i] + sizes[i]; ++k) {
      chunk_segment[static_cast<size_t>(k)] = static_cast<int32_t>(i);
    }
  }
  auto make = [&](DeviceBuffer* b, size_t bytes) -> absl::Status {
    absl::StatusOr<DeviceBuffer> m = DeviceBuffer::Make(ctx->allocator(), bytes);
    if (!m.ok()) return m.status();
    *b = std::move(*m);
    return absl::OkStatus();
  };
  for (auto [b, bytes] : {std::pair{&c.offsets_, segs * 8}, std::pair{&c.sizes_, segs * 8},
                          std::pair{&c.chunk_segment_, chunk_segment.size() * 4},
                          std::pair{&c.squares_, segs * 4}, std::pair{&c.scales_, segs * 4}}) {
    if (absl::Status s = make(b, bytes); !s.ok()) return s;
  }
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudaMemcpyAsync(c.offsets_.get(), offsets.data(), offsets.size() * 8,
                                               cudaMemcpyHostToDevice, ctx->stream()));
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudaMemcpyAsync(c.sizes_.get(), sizes.data(), sizes.size() * 8,
                                               cudaMemcpyHostToDevice, ctx->stream()));
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudaMemcpyAsync(c.chunk_segment_.get(), chunk_segment.data(),
                                               chunk_segment.size() * 4, cudaMemcpyHostToDevice,
                                               ctx->stream()));
  // The host vector must outlive the copy.
  if (absl::Status s = ctx->Synchronize(); !s.ok()) return s;
  return c;
}

absl::Status ClipScales::Compute(GpuContext* ctx, const float* grads, float grad_factor,
                                 float clipnorm, float global_clipnorm) {
  if (segments_ == 0) return absl::OkStatus();
  SegmentSquaresKernel<<<static_cast<unsigned int>(segments_), kThreads, 0, ctx->stream()>>>(
      grads, offsets_.as<int64_t>(), sizes_.as<int64_t>(), grad_factor, squares_.as<float>());
  ScalesKernel<<<1, 1, 0, ctx->stream()>>>(squares_.as<float>(), segments_, clipnorm,
                                           global_clipnorm, scales_.as<float>());
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status ApplyUpdate(GpuContext* ctx, const UpdateParams& u, const UpdateArgs& a, float* s0,
                         float* s1, float* s2, const ClipScales* clip) {
  if (a.n == 0) return absl::OkStatus();
  const Flat f{.p = a.params,
               .g = a.grads,
               .s0 = s0,
               .s1 = s1,
               .s2 = s2,
               .copy = a.compute_copy,
               .chunk_segment = clip != nullptr ? clip->chunk_segment() : nullptr,
               .scales = clip != nullptr ? clip->scales() : nullptr,
               .n = a.n,
               .factor = a.grad_factor};
  switch (u.rule) {
#define LOCKSTEP_RULE(r)                              \
  case UpdateRule::r:                                 \
    Launch<UpdateRule::r>(ctx, u, f, a.compute_type); \
    break;
    LOCKSTEP_RULE(kTorchSgd)
    LOCKSTEP_RULE(kTorchAdam)
    LOCKSTEP_RULE(kKerasSgd)
    LOCKSTEP_RULE(kKerasMomentum)
    LOCKSTEP_RULE(kKerasNesterov)
    LOCKSTEP_RULE(kKerasAdam)
    LOCKSTEP_RULE(kKerasAmsgrad)
    LOCKSTEP_RULE(kKerasRmsprop)
    LOCKSTEP_RULE(kKerasRmspropMomentum)
    LOCKSTEP_RULE(kKerasRmspropCentered)
    LOCKSTEP_RULE(kKerasRmspropCenteredMomentum)
    LOCKSTEP_RULE(kKerasAdagrad)
#undef LOCKSTEP_RULE
  }
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace lockstep::trainer::cuda
