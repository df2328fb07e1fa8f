#pragma once
// What the cuDNN convolution plans share (conv_pool.cc: the built-in models' NCHW convolution;
// conv_nd.cu: the graph models' channels-last ones): the cuDNN type of a storage dtype, and the
// choice among the algorithms cudnnFind* measured.
// Thread-safety: stateless.

#include <cudnn.h>

#include <cstddef>

#include "trainer/kernels/cuda/device_tensor.h"

namespace lockstep::trainer::cuda {

inline cudnnDataType_t CudnnType(DType t) {
  switch (t) {
    case DType::kF16:
      return CUDNN_DATA_HALF;
    case DType::kBF16:
      return CUDNN_DATA_BFLOAT16;
    default:
      return CUDNN_DATA_FLOAT;
  }
}

// Workspaces beyond this are not considered when choosing an algorithm.
inline constexpr size_t kMaxConvWorkspace = size_t{256} << 20;

// The first (fastest: cudnnFind* sorts by time) of `found` results that ran and fits the
// workspace limit; false when none does.
template <typename Perf, typename Algo>
bool Fastest(const Perf* results, int found, Algo* algo, size_t* bytes) {
  for (int i = 0; i < found; ++i) {
    if (results[i].status == CUDNN_STATUS_SUCCESS && results[i].memory <= kMaxConvWorkspace) {
      *algo = results[i].algo;
      *bytes = results[i].memory;
      return true;
    }
  }
  return false;
}

}  // namespace lockstep::trainer::cuda
