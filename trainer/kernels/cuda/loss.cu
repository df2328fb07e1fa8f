#include "trainer/kernels/cuda/loss.h"

#include <string>

#include "trainer/kernels/cuda/check.h"
#include "trainer/kernels/cuda/dtype.cuh"

namespace lockstep::trainer::cuda {
namespace {

constexpr float kEps = 1e-7f;  // Keras's backend epsilon, as loss.cc clips with it

struct LossArgs {
  LossKind kind;
  bool from_logits;
  float label_smoothing;
  float delta;
};

// The first index of the largest value over the warp's (value, index) pairs.
__device__ __forceinline__ int64_t WarpArgMax(float v, int64_t i) {
  for (int o = kWarp / 2; o > 0; o /= 2) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, o);
    const int64_t oi = __shfl_xor_sync(0xffffffffu, i, o);
    if (oi >= 0 && (i < 0 || ov > v || (ov == v && oi < i))) {
      v = ov;
      i = oi;
    }
  }
  return i;
}

// Cross-entropies, one warp per row: the row's loss, its gradient, a bad class id.
template <typename T>
__global__ void CrossEntropyRowsKernel(LossArgs a, const T* __restrict__ pred,
                                       const float* __restrict__ target, int64_t rows, int64_t c,
                                       float inv_rows, T* __restrict__ dpred,
                                       double* __restrict__ row_loss, int* __restrict__ bad) {
  const int64_t row = int64_t{blockIdx.x} * kWarpsPerBlock + threadIdx.x / kWarp;
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  if (row >= rows) return;
  const bool sparse = a.kind == LossKind::kSparseCategoricalCrossentropy;
  const T* pr = pred + row * c;
  float id = 0;
  if (sparse) {
    id = target[row];
    if (!(id >= 0 && id < static_cast<float>(c)) || id != floorf(id)) {
      if (lane == 0) {
        bad[row] = 1;
        row_loss[row] = 0.0;
      }
      if (dpred != nullptr) {
        for (int64_t j = lane; j < c; j += kWarp) dpred[row * c + j] = FromFloat<T>(0.0f);
      }
      return;
    }
  }
  if (lane == 0) bad[row] = 0;
  const float ls = a.label_smoothing;
  auto y = [&](int64_t j) {
    float v = sparse ? (j == static_cast<int64_t>(id) ? 1.0f : 0.0f) : target[row * c + j];
    if (ls > 0) v = v * (1 - ls) + ls / static_cast<float>(c);
    return v;
  };
  double total = 0;
  if (a.from_logits) {
    float m = -INFINITY;
    for (int64_t j = lane; j < c; j += kWarp) m = fmaxf(m, ToFloat(pr[j]));
    m = WarpMax(m);
    double sum = 0;
    for (int64_t j = lane; j < c; j += kWarp) sum += exp(static_cast<double>(ToFloat(pr[j]) - m));
    const double lse = m + log(WarpSum(sum));
    double ysum = 0;
    for (int64_t j = lane; j < c; j += kWarp) {
      total -= y(j) * (ToFloat(pr[j]) - lse);
      ysum += y(j);
    }
    ysum = WarpSum(ysum);
    if (dpred != nullptr) {
      for (int64_t j = lane; j < c; j += kWarp) {
        const auto sm = static_cast<float>(exp(ToFloat(pr[j]) - lse));
        dpred[row * c + j] = FromFloat<T>((sm * static_cast<float>(ysum) - y(j)) * inv_rows);
      }
    }
  } else {
    // Keras normalises the probabilities to sum to one, then clips them.
    double sum = 0;
    for (int64_t j = lane; j < c; j += kWarp) sum += ToFloat(pr[j]);
    sum = WarpSum(sum);
    const double s = sum > 0 ? sum : 1.0;
    const double lo = static_cast<double>(kEps), hi = 1.0 - static_cast<double>(kEps);
    double dot = 0;
    for (int64_t j = lane; j < c; j += kWarp) {
      const double q = ToFloat(pr[j]) / s;
      const double qc = q < lo ? lo : (q > hi ? hi : q);
      total -= y(j) * log(qc);
      const double g = (q > kEps && q < 1 - kEps) ? -y(j) / qc : 0.0;
      dot += g * q;
    }
    dot = WarpSum(dot);
    if (dpred != nullptr) {
      for (int64_t j = lane; j < c; j += kWarp) {
        const double q = ToFloat(pr[j]) / s;
        const double qc = q < lo ? lo : (q > hi ? hi : q);
        const auto g = static_cast<float>((q > kEps && q < 1 - kEps) ? -y(j) / qc : 0.0);
        dpred[row * c + j] = FromFloat<T>(static_cast<float>((g - dot) / s) * inv_rows);
      }
    }
  }
  total = WarpSum(total);
  if (lane == 0) row_loss[row] = total;
}

// Binary cross-entropy and the regression losses, per element.
template <typename T>
__global__ void ElementLossKernel(LossArgs a, const T* __restrict__ pred,
                                  const float* __restrict__ target, int64_t n, double inv,
                                  T* __restrict__ dpred, double* __restrict__ loss) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) {
    double total = 0, g = 0;
    if (a.kind == LossKind::kBinaryCrossentropy) {
      float yv = target[i];
      if (a.label_smoothing > 0) yv = yv * (1 - a.label_smoothing) + 0.5f * a.label_smoothing;
      const double x = ToFloat(pred[i]);
      if (a.from_logits) {
        total = fmax(x, 0.0) - x * yv + log1p(exp(-fabs(x)));
        g = (1.0 / (1.0 + exp(-x)) - yv) * inv;
      } else {
        const double lo = static_cast<double>(kEps), hi = 1.0 - static_cast<double>(kEps);
        const double qc = x < lo ? lo : (x > hi ? hi : x);
        total = -(yv * log(qc) + (1 - yv) * log(1 - qc));
        g = (x > kEps && x < 1 - kEps) ? (-(yv / qc) + (1 - yv) / (1 - qc)) * inv : 0.0;
      }
    } else {
      const double e = static_cast<double>(ToFloat(pred[i])) - target[i];
      if (a.kind == LossKind::kMeanSquaredError) {
        total = e * e;
        g = 2 * e;
      } else if (a.kind == LossKind::kMeanAbsoluteError) {
        total = fabs(e);
        g = (e > 0) - (e < 0);
      } else {
        const double ae = fabs(e);
        total = ae <= a.delta ? 0.5 * e * e : a.delta * (ae - 0.5 * a.delta);
        g = ae <= a.delta ? e : a.delta * static_cast<double>((e > 0) - (e < 0));
      }
      g *= inv;
    }
    loss[i] = total;
    if (dpred != nullptr) dpred[i] = FromFloat<T>(static_cast<float>(g));
  }
}

// Right or wrong per row (arg-max against the class id or the target's arg-max; first maximum
// wins, as std::max_element), one warp per row.
template <typename T>
__global__ void ArgMaxCorrectKernel(const T* __restrict__ pred, const float* __restrict__ target,
                                    int64_t rows, int64_t c, bool sparse,
                                    int* __restrict__ correct) {
  const int64_t row = int64_t{blockIdx.x} * kWarpsPerBlock + threadIdx.x / kWarp;
  const int lane = static_cast<int>(threadIdx.x % kWarp);
  if (row >= rows) return;
  float best = 0;
  int64_t arg = -1;
  float tbest = 0;
  int64_t targ = -1;
  for (int64_t j = lane; j < c; j += kWarp) {
    const float v = ToFloat(pred[row * c + j]);
    if (arg < 0 || v > best) {
      best = v;
      arg = j;
    }
    if (!sparse) {
      const float t = target[row * c + j];
      if (targ < 0 || t > tbest) {
        tbest = t;
        targ = j;
      }
    }
  }
  arg = WarpArgMax(best, arg);
  if (!sparse) targ = WarpArgMax(tbest, targ);
  if (lane == 0) {
    const int64_t want = sparse ? static_cast<int64_t>(target[row]) : targ;
    correct[row] = arg == want ? 1 : 0;
  }
}

template <typename T>
__global__ void ThresholdCorrectKernel(const T* __restrict__ pred, const float* __restrict__ target,
                                       int64_t n, float threshold, int* __restrict__ correct) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) {
    correct[i] = (ToFloat(pred[i]) > threshold) == (target[i] > 0.5f) ? 1 : 0;
  }
}

struct Totals {
  double loss;
  long long correct;
  long long bad;
};

// One block: each thread sums a fixed stride of the arrays, then a tree in shared memory, so
// the order is the same every run.
__global__ void TotalsKernel(const double* __restrict__ loss, int64_t nl,
                             const int* __restrict__ correct, int64_t nc,
                             const int* __restrict__ bad, int64_t nb, Totals* __restrict__ out) {
  __shared__ double sl[kThreads];
  __shared__ long long sc[kThreads], sb[kThreads];
  double l = 0;
  long long cc = 0, bb = 0;
  for (int64_t i = threadIdx.x; i < nl; i += kThreads) l += loss[i];
  for (int64_t i = threadIdx.x; i < nc; i += kThreads) cc += correct[i];
  for (int64_t i = threadIdx.x; i < nb; i += kThreads) bb += bad[i];
  sl[threadIdx.x] = l;
  sc[threadIdx.x] = cc;
  sb[threadIdx.x] = bb;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) {
      sl[threadIdx.x] += sl[threadIdx.x + s];
      sc[threadIdx.x] += sc[threadIdx.x + s];
      sb[threadIdx.x] += sb[threadIdx.x + s];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = Totals{sl[0], sc[0], sb[0]};
}

unsigned int RowBlocks(int64_t rows) {
  return static_cast<unsigned int>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
}

}  // namespace

absl::StatusOr<LossResult> ComputeLoss(GpuContext* ctx, const Loss& l, const DeviceTensor& pred,
                                       const DeviceTensor& target, DeviceTensor* dpred,
                                       float grad_scale) {
  const int64_t c = pred.shape().empty() ? 1 : pred.shape().back();
  const int64_t rows = pred.size() / std::max<int64_t>(c, 1);
  const bool sparse = l.kind == LossKind::kSparseCategoricalCrossentropy;
  const bool xent = sparse || l.kind == LossKind::kCategoricalCrossentropy;
  if ((sparse ? target.size() != rows : target.size() != pred.size()) ||
      target.dtype() != DType::kF32) {
    return absl::InvalidArgumentError(
        "targets of shape " + ShapeString(target.shape()) + " do not fit outputs of shape " +
        ShapeString(pred.shape()) +
        (sparse ? " (one fp32 class id per output row)" : " (one fp32 target per output value)"));
  }
  if (dpred != nullptr) {
    if (absl::Status s = dpred->Resize(ctx, pred.shape(), pred.dtype()); !s.ok()) return s;
  }
  const int64_t nl = xent ? rows : pred.size();
  const bool threshold = l.kind == LossKind::kBinaryCrossentropy || c == 1;
  const int64_t nc = threshold ? pred.size() : rows;
  // Scratch: per-row or per-element losses, right/wrong flags, bad ids, the totals.
  const size_t bytes = static_cast<size_t>(nl) * sizeof(double) +
                       static_cast<size_t>(nc + rows) * sizeof(int) + sizeof(Totals) + 16;
  absl::StatusOr<DeviceBuffer> scratch = DeviceBuffer::Make(ctx->allocator(), bytes);
  if (!scratch.ok()) return scratch.status();
  auto* loss = static_cast<double*>(scratch->get());
  auto* correct = reinterpret_cast<int*>(loss + nl);
  int* bad = correct + nc;
  auto* totals =
      reinterpret_cast<Totals*>((reinterpret_cast<uintptr_t>(bad + rows) + 15) / 16 * 16);
  const LossArgs a{l.kind, l.from_logits, l.label_smoothing, l.delta};
  if (pred.size() > 0) {
    DispatchDType(pred.dtype(), [&](auto t) {
      using T = decltype(t);
      T* d = dpred != nullptr ? dpred->as<T>() : nullptr;
      if (xent) {
        CrossEntropyRowsKernel<T><<<RowBlocks(rows), kThreads, 0, ctx->stream()>>>(
            a, pred.as<T>(), target.as<float>(), rows, c,
            static_cast<float>(grad_scale / static_cast<double>(rows)), d, loss, bad);
      } else {
        ElementLossKernel<T><<<Blocks(pred.size()), kThreads, 0, ctx->stream()>>>(
            a, pred.as<T>(), target.as<float>(), pred.size(),
            grad_scale / static_cast<double>(pred.size()), d, loss);
      }
      if (threshold) {
        ThresholdCorrectKernel<T><<<Blocks(pred.size()), kThreads, 0, ctx->stream()>>>(
            pred.as<T>(), target.as<float>(), pred.size(), l.from_logits ? 0.0f : 0.5f, correct);
      } else {
        ArgMaxCorrectKernel<T><<<RowBlocks(rows), kThreads, 0, ctx->stream()>>>(
            pred.as<T>(), target.as<float>(), rows, c, sparse, correct);
      }
      return 0;
    });
    LOCKSTEP_GPU_RETURN_IF_ERROR(cudaGetLastError());
  }
  TotalsKernel<<<1, kThreads, 0, ctx->stream()>>>(loss, pred.size() > 0 ? nl : 0, correct,
                                                  pred.size() > 0 ? nc : 0, bad,
                                                  xent && pred.size() > 0 ? rows : 0, totals);
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudaGetLastError());
  Totals host{};
  LOCKSTEP_GPU_RETURN_IF_ERROR(
      cudaMemcpyAsync(&host, totals, sizeof(Totals), cudaMemcpyDeviceToHost, ctx->stream()));
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudaStreamSynchronize(ctx->stream()));
  if (host.bad > 0) {
    return absl::InvalidArgumentError(std::to_string(host.bad) + " of " + std::to_string(rows) +
                                      " rows have a class id outside [0, " + std::to_string(c) +
                                      ")");
  }
  LossResult r;
  r.loss = nl > 0 ? host.loss / static_cast<double>(nl) : 0.0;
  r.correct = host.correct;
  r.judged = nc;
  return r;
}

}  // namespace lockstep::trainer::cuda
