#include "trainer/kernels/cuda/check.h"
#include "trainer/kernels/cuda/dtype.cuh"
#include "trainer/kernels/cuda/ops.h"

namespace lockstep::trainer::cuda {
namespace {

struct XentSums {
  double loss;
  unsigned long long correct;
};

// One warp per row: the lanes stride over the classes; the maximum (first index on ties, as
// the CPU op), the sum of exponentials and the gradient are computed in fp32 (the sum in
// double, as the CPU op).
template <typename T>
__global__ void XentKernel(const T* __restrict__ logits, const int32_t* __restrict__ labels,
                           T* __restrict__ dlogits, int64_t n, int64_t c, float grad_scale,
                           XentSums* __restrict__ sums) {
  const int lane = threadIdx.x & 31;
  const int64_t row = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) / 32;
  if (row >= n) return;
  const T* x = logits + row * c;
  float max = -INFINITY;
  int best = 0x7fffffff;
  for (int64_t j = lane; j < c; j += 32) {
    const float v = ToFloat(x[j]);
    if (v > max || (v == max && j < best)) {
      max = v;
      best = static_cast<int>(j);
    }
  }
  for (int off = 16; off > 0; off >>= 1) {
    const float om = __shfl_xor_sync(0xffffffff, max, off);
    const int ob = __shfl_xor_sync(0xffffffff, best, off);
    if (om > max || (om == max && ob < best)) {
      max = om;
      best = ob;
    }
  }
  double sum = 0;
  for (int64_t j = lane; j < c; j += 32) sum += exp(static_cast<double>(ToFloat(x[j]) - max));
  for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(0xffffffff, sum, off);
  const int32_t label = labels[row];
  if (dlogits != nullptr) {
    const float inv_n = grad_scale / static_cast<float>(n);
    for (int64_t j = lane; j < c; j += 32) {
      const float p = static_cast<float>(exp(static_cast<double>(ToFloat(x[j]) - max)) / sum);
      dlogits[row * c + j] = FromFloat<T>((p - (j == label ? 1.0f : 0.0f)) * inv_n);
    }
  }
  if (lane == 0) {
    atomicAdd(&sums->loss, log(sum) - static_cast<double>(ToFloat(x[label]) - max));
    if (best == label) atomicAdd(&sums->correct, 1ull);
  }
}

}  // namespace

absl::StatusOr<cpu::XentResult> SoftmaxCrossEntropy(GpuContext* ctx, const DeviceTensor& logits,
                                                    const int32_t* labels, DeviceTensor* dlogits,
                                                    float grad_scale) {
  const int64_t n = logits.dim(0), c = logits.dim(1);
  if (dlogits != nullptr) {
    if (absl::Status s = dlogits->Resize(ctx, logits.shape(), logits.dtype()); !s.ok()) return s;
  }
  absl::StatusOr<DeviceBuffer> sums = DeviceBuffer::Make(ctx->allocator(), sizeof(XentSums));
  if (!sums.ok()) return sums.status();
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudaMemsetAsync(sums->get(), 0, sizeof(XentSums), ctx->stream()));
  if (n > 0) {
    constexpr int kRowsPerBlock = kThreads / 32;
    const auto blocks = static_cast<unsigned int>((n + kRowsPerBlock - 1) / kRowsPerBlock);
    DispatchDType(logits.dtype(), [&](auto t) {
      using T = decltype(t);
      XentKernel<T><<<blocks, kThreads, 0, ctx->stream()>>>(logits.as<T>(), labels,
                                                            dlogits ? dlogits->as<T>() : nullptr, n,
                                                            c, grad_scale, sums->as<XentSums>());
      return 0;
    });
    LOCKSTEP_GPU_RETURN_IF_ERROR(cudaGetLastError());
  }
  XentSums host{};
  LOCKSTEP_GPU_RETURN_IF_ERROR(
      cudaMemcpyAsync(&host, sums->get(), sizeof(XentSums), cudaMemcpyDeviceToHost, ctx->stream()));
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudaStreamSynchronize(ctx->stream()));
  cpu::XentResult r;
  r.loss = n > 0 ? host.loss / static_cast<double>(n) : 0.0;
  r.correct = static_cast<int64_t>(host.correct);
  return r;
}

}  // namespace lockstep::trainer::cuda
