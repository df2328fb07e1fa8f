#include "trainer/kernels/cuda/merge.h"

#include <cub/cub.cuh>

#include <string>

#include "trainer/kernels/cuda/check.h"
#include "trainer/kernels/cuda/dtype.cuh"
#include "trainer/kernels/cuda/index.cuh"

namespace lockstep::trainer::cuda {
namespace {

static_assert(kMaxMergeRank <= kMaxBroadcastRank);

template <typename T>
struct Inputs {
  int n = 0;
  const T* p[kMaxMergeInputs] = {};
  BShape s[kMaxMergeInputs];
};

__device__ __forceinline__ float Apply(MergeOp op, float a, float b) {
  switch (op) {
    case MergeOp::kAdd:
    case MergeOp::kAverage:
      return a + b;
    case MergeOp::kSubtract:
      return a - b;
    case MergeOp::kMultiply:
      return a * b;
    case MergeOp::kMaximum:
      return fmaxf(a, b);
    case MergeOp::kMinimum:
      return fminf(a, b);
  }
  return a;
}

// y = x0, then y op= xk in order, in fp32 per element (one pass over every input).
template <typename T>
__global__ void MergeForwardKernel(MergeOp op, Inputs<T> in, BShape ys, int64_t n,
                                   T* __restrict__ y) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) {
    float v = ToFloat(in.p[0][BroadcastIndex(ys, in.s[0], i)]);
    for (int k = 1; k < in.n; ++k)
      v = Apply(op, v, ToFloat(in.p[k][BroadcastIndex(ys, in.s[k], i)]));
    if (op == MergeOp::kAverage) v /= static_cast<float>(in.n);
    y[i] = FromFloat<T>(v);
  }
}

// dx_k[j]: the sum over the output elements that read x_k[j] of their share of dy.
template <typename T>
__global__ void MergeBackwardKernel(MergeOp op, Inputs<T> in, int k, BShape ys,
                                    const T* __restrict__ y, const T* __restrict__ dy, int64_t nk,
                                    T* __restrict__ dx) {
  const BShape& xs = in.s[k];
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t j = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; j < nk; j += stride) {
    // j's coordinates; the broadcast axes (x 1, y > 1) are enumerated.
    int64_t coord[kMaxMergeRank];
    int64_t rest = j;
    int64_t count = 1;
    for (int a = xs.rank - 1; a >= 0; --a) {
      coord[a] = rest % xs.d[a];
      rest /= xs.d[a];
      if (xs.d[a] == 1 && ys.d[a] > 1) count *= ys.d[a];
    }
    float sum = 0.0f;
    for (int64_t b = 0; b < count; ++b) {
      int64_t r = b, i = 0, st = 1;
      int64_t c[kMaxMergeRank];
      for (int a = ys.rank - 1; a >= 0; --a) {
        if (xs.d[a] == 1 && ys.d[a] > 1) {
          c[a] = r % ys.d[a];
          r /= ys.d[a];
        } else {
          c[a] = coord[a];
        }
      }
      for (int a = ys.rank - 1; a >= 0; --a) {
        i += c[a] * st;
        st *= ys.d[a];
      }
      const float g = ToFloat(dy[i]);
      switch (op) {
        case MergeOp::kAdd:
          sum += g;
          break;
        case MergeOp::kAverage:
          sum += g / static_cast<float>(in.n);
          break;
        case MergeOp::kSubtract:
          sum += k == 0 ? g : -g;
          break;
        case MergeOp::kMultiply: {
          float p = 1.0f;
          for (int o = 0; o < in.n; ++o) {
            if (o != k) p *= ToFloat(in.p[o][BroadcastIndex(ys, in.s[o], i)]);
          }
          sum += g * p;
          break;
        }
        case MergeOp::kMaximum:
        case MergeOp::kMinimum: {
          const float yi = ToFloat(y[i]);
          if (ToFloat(in.p[k][j]) != yi) break;
          bool earlier = false;
          for (int o = 0; o < k && !earlier; ++o) {
            earlier = ToFloat(in.p[o][BroadcastIndex(ys, in.s[o], i)]) == yi;
          }
          if (!earlier) sum += g;
          break;
        }
      }
    }
    dx[j] = FromFloat<T>(sum);
  }
}

template <typename T>
struct ConcatParts {
  int n = 0;
  int64_t block[kMaxMergeInputs] = {};  // each input's elements per outer index
  int64_t offset[kMaxMergeInputs] = {};
  const T* in[kMaxMergeInputs] = {};
  T* out[kMaxMergeInputs] = {};
};

template <typename T>
__global__ void ConcatForwardKernel(ConcatParts<T> p, int64_t total_block, int64_t n,
                                    T* __restrict__ y) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t r = i / total_block, o = i % total_block;
    int k = 0;
    while (k + 1 < p.n && o >= p.offset[k + 1]) ++k;
    y[i] = p.in[k][r * p.block[k] + (o - p.offset[k])];
  }
}

template <typename T>
__global__ void ConcatBackwardKernel(ConcatParts<T> p, int64_t total_block, int64_t n,
                                     const T* __restrict__ dy) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t r = i / total_block, o = i % total_block;
    int k = 0;
    while (k + 1 < p.n && o >= p.offset[k + 1]) ++k;
    if (p.out[k] != nullptr) p.out[k][r * p.block[k] + (o - p.offset[k])] = dy[i];
  }
}

template <typename T>
__global__ void EmbeddingForwardKernel(const float* __restrict__ ids, int64_t rows,
                                       const T* __restrict__ table, int64_t vocabulary, int64_t dim,
                                       T* __restrict__ y, int* __restrict__ bad) {
  const int64_t total = rows * dim;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < total; i += stride) {
    const int64_t r = i / dim, j = i % dim;
    const float v = ids[r];
    const bool ok = v >= 0 && v < static_cast<float>(vocabulary) && v == floorf(v);
    y[i] = ok ? table[static_cast<int64_t>(v) * dim + j] : FromFloat<T>(0.0f);
    if (!ok && j == 0 && bad != nullptr) atomicAdd(bad, 1);
  }
}

// Keys for the sort: the id, or `vocabulary` (sorted last, skipped) for an id outside the table.
__global__ void EmbeddingKeysKernel(const float* __restrict__ ids, int64_t rows, int64_t vocabulary,
                                    int* __restrict__ keys, int* __restrict__ order) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t r = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; r < rows; r += stride) {
    const float v = ids[r];
    const bool ok = v >= 0 && v < static_cast<float>(vocabulary) && v == floorf(v);
    keys[r] = ok ? static_cast<int>(v) : static_cast<int>(vocabulary);
    order[r] = static_cast<int>(r);
  }
}

// One block per sorted position; a block that starts a run of one id sums the run's rows of
// dy in row order (the sort is stable) into that id's row of the table's gradient.
template <typename T>
__global__ void EmbeddingGradKernel(const int* __restrict__ keys, const int* __restrict__ order,
                                    int64_t rows, int64_t vocabulary, int64_t dim,
                                    const T* __restrict__ dy, float* __restrict__ dtable) {
  const int64_t s = blockIdx.x;
  const int key = keys[s];
  if (key >= vocabulary || (s > 0 && keys[s - 1] == key)) return;
  int64_t end = s + 1;
  while (end < rows && keys[end] == key) ++end;
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
    float sum = 0.0f;
    for (int64_t q = s; q < end; ++q) sum += ToFloat(dy[int64_t{order[q]} * dim + j]);
    dtable[int64_t{key} * dim + j] += sum;
  }
}

absl::Status Launched() {
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace

absl::Status MergeForward(GpuContext* ctx, MergeOp op, const std::vector<const DeviceTensor*>& x,
                          DeviceTensor* y) {
  if (x.empty() || x.size() > static_cast<size_t>(kMaxMergeInputs)) {
    return absl::InvalidArgumentError("MergeForward takes 1 to " + std::to_string(kMaxMergeInputs) +
                                      " inputs, got " + std::to_string(x.size()));
  }
  Shape ys = x[0]->shape();
  if (ys.size() > static_cast<size_t>(kMaxMergeRank)) {
    return absl::InvalidArgumentError("MergeForward: rank above " + std::to_string(kMaxMergeRank));
  }
  for (const DeviceTensor* t : x) {
    if (t->shape().size() != ys.size() || t->dtype() != x[0]->dtype()) {
      return absl::InvalidArgumentError("MergeForward: inputs differ in rank or dtype");
    }
    for (size_t a = 0; a < ys.size(); ++a) {
      if (t->dim(a) != ys[a] && t->dim(a) != 1 && ys[a] != 1) {
        return absl::InvalidArgumentError("MergeForward: shapes " + ShapeString(t->shape()) +
                                          " and " + ShapeString(ys) + " do not broadcast");
      }
      ys[a] = std::max(ys[a], t->dim(a));
    }
  }
  if (absl::Status s = y->Resize(ctx, ys, x[0]->dtype()); !s.ok()) return s;
  if (y->size() == 0) return absl::OkStatus();
  DispatchDType(x[0]->dtype(), [&](auto t) {
    using T = decltype(t);
    Inputs<T> in;
    in.n = static_cast<int>(x.size());
    for (size_t k = 0; k < x.size(); ++k) {
      in.p[k] = x[k]->as<T>();
      in.s[k] = ShapeOf(x[k]->shape());
    }
    MergeForwardKernel<T><<<Blocks(y->size()), kThreads, 0, ctx->stream()>>>(op, in, ShapeOf(ys),
                                                                             y->size(), y->as<T>());
    return 0;
  });
  return Launched();
}

absl::Status MergeBackward(GpuContext* ctx, MergeOp op, const std::vector<const DeviceTensor*>& x,
                           const DeviceTensor& y, const DeviceTensor& dy,
                           const std::vector<DeviceTensor*>& dx) {
  if (x.empty() || x.size() > static_cast<size_t>(kMaxMergeInputs) || dx.size() != x.size() ||
      dy.shape() != y.shape() || dy.dtype() != y.dtype() ||
      y.shape().size() > static_cast<size_t>(kMaxMergeRank)) {
    return absl::InvalidArgumentError("MergeBackward: inputs, gradients and output disagree");
  }
  for (const DeviceTensor* t : x) {
    if (t->shape().size() != y.shape().size() || t->dtype() != y.dtype()) {
      return absl::InvalidArgumentError(
          "MergeBackward: an input differs from the output in "
          "rank or dtype");
    }
  }
  absl::Status st = absl::OkStatus();
  DispatchDType(y.dtype(), [&](auto t) {
    using T = decltype(t);
    Inputs<T> in;
    in.n = static_cast<int>(x.size());
    for (size_t k = 0; k < x.size(); ++k) {
      in.p[k] = x[k]->as<T>();
      in.s[k] = ShapeOf(x[k]->shape());
    }
    for (size_t k = 0; k < x.size() && st.ok(); ++k) {
      if (dx[k] == nullptr) continue;
      st.Update(dx[k]->Resize(ctx, x[k]->shape(), y.dtype()));
      if (!st.ok() || x[k]->size() == 0) continue;
      MergeBackwardKernel<T><<<Blocks(x[k]->size()), kThreads, 0, ctx->stream()>>>(
          op, in, static_cast<int>(k), ShapeOf(y.shape()), y.as<T>(), dy.as<T>(), x[k]->size(),
          dx[k]->as<T>());
    }
    return 0;
  });
  if (!st.ok()) return st;
  return Launched();
}

namespace {

// The outer count and each input's block (its axis length times the inner size).
template <typename T>
absl::StatusOr<ConcatParts<T>> Parts(const std::vector<const DeviceTensor*>& x, int axis,
                                     Shape* out, int64_t* outer, int64_t* total_block) {
  if (x.empty() || x.size() > static_cast<size_t>(kMaxMergeInputs)) {
    return absl::InvalidArgumentError("Concat takes 1 to " + std::to_string(kMaxMergeInputs) +
                                      " inputs");
  }
  const Shape& s0 = x[0]->shape();
  if (axis < 0 || axis >= static_cast<int>(s0.size())) {
    return absl::InvalidArgumentError("Concat: axis " + std::to_string(axis) +
                                      " out of range for " + ShapeString(s0));
  }
  ConcatParts<T> p;
  p.n = static_cast<int>(x.size());
  *out = s0;
  (*out)[static_cast<size_t>(axis)] = 0;
  int64_t inner = 1;
  *outer = 1;
  for (size_t a = 0; a < s0.size(); ++a) {
    if (static_cast<int>(a) < axis) *outer *= s0[a];
    if (static_cast<int>(a) > axis) inner *= s0[a];
  }
  *total_block = 0;
  for (size_t k = 0; k < x.size(); ++k) {
    const Shape& s = x[k]->shape();
    for (size_t a = 0; a < s0.size(); ++a) {
      if (s.size() != s0.size() || (static_cast<int>(a) != axis && s[a] != s0[a])) {
        return absl::InvalidArgumentError("Concat: " + ShapeString(s) + " and " + ShapeString(s0) +
                                          " differ outside the axis");
      }
    }
    p.block[k] = s[static_cast<size_t>(axis)] * inner;
    p.offset[k] = *total_block;
    *total_block += p.block[k];
    (*out)[static_cast<size_t>(axis)] += s[static_cast<size_t>(axis)];
    p.in[k] = x[k]->as<T>();
  }
  return p;
}

}  // namespace

absl::Status ConcatForward(GpuContext* ctx, const std::vector<const DeviceTensor*>& x, int axis,
                           DeviceTensor* y) {
  absl::Status st = absl::OkStatus();
  DispatchDType(x.empty() ? DType::kF32 : x[0]->dtype(), [&](auto t) {
    using T = decltype(t);
    Shape out;
    int64_t outer = 0, block = 0;
    absl::StatusOr<ConcatParts<T>> p = Parts<T>(x, axis, &out, &outer, &block);
    if (!p.ok()) {
      st.Update(p.status());
      return 0;
    }
    st.Update(y->Resize(ctx, out, x[0]->dtype()));
    if (!st.ok() || y->size() == 0) return 0;
    ConcatForwardKernel<T>
        <<<Blocks(y->size()), kThreads, 0, ctx->stream()>>>(*p, block, y->size(), y->as<T>());
    return 0;
  });
  if (!st.ok()) return st;
  return Launched();
}

absl::Status ConcatBackward(GpuContext* ctx, const DeviceTensor& dy,
                            const std::vector<const DeviceTensor*>& x, int axis,
                            const std::vector<DeviceTensor*>& dx) {
  if (dx.size() != x.size()) return absl::InvalidArgumentError("ConcatBackward: dx per input");
  absl::Status st = absl::OkStatus();
  DispatchDType(dy.dtype(), [&](auto t) {
    using T = decltype(t);
    Shape out;
    int64_t outer = 0, block = 0;
    absl::StatusOr<ConcatParts<T>> p = Parts<T>(x, axis, &out, &outer, &block);
    if (!p.ok()) {
      st.Update(p.status());
      return 0;
    }
    if (out != dy.shape()) {
      st.Update(absl::InvalidArgumentError("ConcatBackward: gradient " + ShapeString(dy.shape()) +
                                           ", output " + ShapeString(out)));
      return 0;
    }
    for (size_t k = 0; k < x.size(); ++k) {
      if (dx[k] == nullptr) continue;
      st.Update(dx[k]->Resize(ctx, x[k]->shape(), dy.dtype()));
      p->out[k] = dx[k]->as<T>();
    }
    if (!st.ok() || dy.size() == 0) return 0;
    ConcatBackwardKernel<T>
        <<<Blocks(dy.size()), kThreads, 0, ctx->stream()>>>(*p, block, dy.size(), dy.as<T>());
    return 0;
  });
  if (!st.ok()) return st;
  return Launched();
}

absl::Status EmbeddingForward(GpuContext* ctx, const DeviceTensor& ids, const DeviceTensor& table,
                              DeviceTensor* y, int* bad) {
  if (table.shape().size() != 2 || ids.dtype() != DType::kF32) {
    return absl::InvalidArgumentError("EmbeddingForward: a [vocabulary, dim] table and fp32 ids");
  }
  const int64_t vocabulary = table.dim(0), dim = table.dim(1);
  Shape out = ids.shape();
  out.push_back(dim);
  if (absl::Status s = y->Resize(ctx, out, table.dtype()); !s.ok()) return s;
  if (y->size() == 0) return absl::OkStatus();
  DispatchDType(table.dtype(), [&](auto t) {
    using T = decltype(t);
    EmbeddingForwardKernel<T><<<Blocks(y->size()), kThreads, 0, ctx->stream()>>>(
        ids.as<float>(), ids.size(), table.as<T>(), vocabulary, dim, y->as<T>(), bad);
    return 0;
  });
  return Launched();
}

absl::Status EmbeddingBackward(GpuContext* ctx, const DeviceTensor& ids, const DeviceTensor& dy,
                               int64_t vocabulary, float* dtable) {
  const int64_t rows = ids.size();
  if (rows == 0) return absl::OkStatus();
  if (dy.size() % rows != 0 || vocabulary >= (int64_t{1} << 31) || rows >= (int64_t{1} << 31)) {
    return absl::InvalidArgumentError("EmbeddingBackward: gradient " + ShapeString(dy.shape()) +
                                      " does not fit " + std::to_string(rows) + " ids");
  }
  const int64_t dim = dy.size() / rows;
  // keys, order, and their sorted copies; then cub's scratch.
  absl::StatusOr<DeviceBuffer> buf =
      DeviceBuffer::Make(ctx->allocator(), static_cast<size_t>(4 * rows) * sizeof(int));
  if (!buf.ok()) return buf.status();
  int* keys = static_cast<int*>(buf->get());
  int* order = keys + rows;
  int* keys_sorted = order + rows;
  int* order_sorted = keys_sorted + rows;
  EmbeddingKeysKernel<<<Blocks(rows), kThreads, 0, ctx->stream()>>>(ids.as<float>(), rows,
                                                                    vocabulary, keys, order);
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudaGetLastError());
  int end_bit = 1;
  while ((int64_t{1} << end_bit) <= vocabulary && end_bit < 31) ++end_bit;
  size_t temp = 0;
  LOCKSTEP_GPU_RETURN_IF_ERROR(
      cub::DeviceRadixSort::SortPairs(nullptr, temp, keys, keys_sorted, order, order_sorted,
                                      static_cast<int>(rows), 0, end_bit, ctx->stream()));
  absl::StatusOr<DeviceBuffer> scratch =
      DeviceBuffer::Make(ctx->allocator(), std::max<size_t>(temp, 1));
  if (!scratch.ok()) return scratch.status();
  LOCKSTEP_GPU_RETURN_IF_ERROR(
      cub::DeviceRadixSort::SortPairs(scratch->get(), temp, keys, keys_sorted, order, order_sorted,
                                      static_cast<int>(rows), 0, end_bit, ctx->stream()));
  DispatchDType(dy.dtype(), [&](auto t) {
    using T = decltype(t);
    EmbeddingGradKernel<T><<<static_cast<unsigned int>(rows), kThreads, 0, ctx->stream()>>>(
        keys_sorted, order_sorted, rows, vocabulary, dim, dy.as<T>(), dtable);
    return 0;
  });
  return Launched();
}

}  // namespace lockstep::trainer::cuda
