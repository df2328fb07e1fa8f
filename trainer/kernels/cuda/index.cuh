#pragma once
// Index arithmetic the graph's CUDA kernels share: broadcasting (merges, dropout's noise shape)
// and channels-last positions with three spatial axes (pooling, padding, upsampling; missing
// leading axes have length 1).

#include <cstdint>

#include "trainer/tensor/tensor.h"

namespace lockstep::trainer::cuda {

inline constexpr int kMaxBroadcastRank = 6;

// A shape passed to kernels by value.
struct BShape {
  int rank = 0;
  int64_t d[kMaxBroadcastRank] = {};
};

// The caller checks the rank (<= kMaxBroadcastRank).
inline BShape ShapeOf(const Shape& s) {
  BShape b;
  b.rank = static_cast<int>(s.size());
  for (size_t a = 0; a < s.size(); ++a) b.d[a] = s[a];
  return b;
}

// The index in `x` (same rank, whose size-1 axes broadcast) of element i of shape `y`.
__device__ __forceinline__ int64_t BroadcastIndex(const BShape& y, const BShape& x, int64_t i) {
  int64_t j = 0, stride = 1;
  for (int a = y.rank - 1; a >= 0; --a) {
    const int64_t c = i % y.d[a];
    i /= y.d[a];
    if (x.d[a] != 1) j += c * stride;
    stride *= x.d[a];
  }
  return j;
}

// Flat index i of an [n, d0, d1, d2, c] array as (b, q[3], j).
__device__ __forceinline__ void Coords(int64_t i, const int64_t* d, int64_t c, int64_t* j,
                                       int64_t* q, int64_t* b) {
  *j = i % c;
  int64_t p = i / c;
  for (int k = 2; k >= 0; --k) {
    q[k] = p % d[k];
    p /= d[k];
  }
  *b = p;
}

// The flat index of (b, q[3], j) in an [n, d0, d1, d2, c] array.
__device__ __forceinline__ int64_t Flat(int64_t b, const int64_t* q, const int64_t* d, int64_t c,
                                        int64_t j) {
  return (((b * d[0] + q[0]) * d[1] + q[1]) * d[2] + q[2]) * c + j;
}

}  // namespace lockstep::trainer::cuda
