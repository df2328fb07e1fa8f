#pragma once
// The CUDA counterparts of the CPU ops (trainer/kernels/cpu/), one per CPU op, with the same
// arguments in the same order, a GpuContext first, and DeviceTensors for Tensors:
//   Gemm            cuBLAS (cublasGemmEx: fp32, TF32, or fp16/bf16 inputs with fp32 sums)
//   Dense           Gemm + bias kernels
//   Conv2d          cuDNN, the fastest algorithm measured once per shape (cudnnFind*)
//   MaxPool         cuDNN (backward reads the input and output instead of arg-maxes)
//   ReLU            CUDA kernels
//   SoftmaxCrossEntropy  one CUDA kernel (fp32 arithmetic whatever the storage dtype)
// Each returns a Status: a library error names the call. Work is queued on the context's
// stream and not waited for, except where a result comes back to the host.
// Thread-safety: reentrant per context; a workspace or plan belongs to one layer.

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/kernels/cpu/conv2d.h"
#include "trainer/kernels/cpu/softmax_xent.h"
#include "trainer/kernels/cuda/device_tensor.h"

namespace lockstep::trainer::cuda {

// C = alpha * op(A) * op(B) + beta * C, row-major, as cpu::Gemm. A and B share a dtype; C is
// that dtype or fp32. fp32 inputs use TF32 tensor cores when the context allows.
absl::Status Gemm(GpuContext* ctx, bool transpose_a, bool transpose_b, int64_t m, int64_t n,
                  int64_t k, float alpha, const void* a, const void* b, DType ab_type, float beta,
                  void* c, DType c_type);
// The fp32 form, argument for argument cpu::Gemm's.
absl::Status Gemm(GpuContext* ctx, bool transpose_a, bool transpose_b, int64_t m, int64_t n,
                  int64_t k, float alpha, const float* a, const float* b, float beta, float* c);

// `batch` fp32 products C_i = alpha op(A_i) op(B_i) + beta C_i, the i-th matrices
// stride_a, stride_b and stride_c elements after the (i-1)-th (attention's per-head products).
absl::Status GemmBatched(GpuContext* ctx, bool transpose_a, bool transpose_b, int64_t m, int64_t n,
                         int64_t k, float alpha, const float* a, int64_t stride_a, const float* b,
                         int64_t stride_b, float beta, float* c, int64_t stride_c, int64_t batch);

// y = x W^T + b: x [N, IN] and w [OUT, IN] in the compute dtype, b fp32, y in x's dtype.
absl::Status DenseForward(GpuContext* ctx, const DeviceTensor& x, const DeviceTensor& w,
                          const float* b, DeviceTensor* y);
// dx = dy W (dx may be null), dW = dy^T x and db = column sums of dy, both fp32.
absl::Status DenseBackward(GpuContext* ctx, const DeviceTensor& x, const DeviceTensor& w,
                           const DeviceTensor& dy, DeviceTensor* dx, float* dw, float* db);

// Descriptors and the chosen algorithms of one convolution layer, made on first use and
// remade when the input shape or dtype changes.
struct Conv2dPlan;
struct Conv2dPlanDeleter {
  void operator()(Conv2dPlan* p) const;
};
using Conv2dWorkspace = std::unique_ptr<Conv2dPlan, Conv2dPlanDeleter>;

// As cpu::Conv2dForward: x [N, C, H, W] and w [K, C, R, S] in the compute dtype, b fp32 [K].
absl::Status Conv2dForward(GpuContext* ctx, const DeviceTensor& x, const DeviceTensor& w,
                           const float* b, const cpu::Conv2dParams& p, DeviceTensor* y,
                           Conv2dWorkspace* ws);
// dx may be null; dw [K*C*R*S] and db [K] are fp32.
absl::Status Conv2dBackward(GpuContext* ctx, const DeviceTensor& x, const DeviceTensor& w,
                            const DeviceTensor& dy, const cpu::Conv2dParams& p, DeviceTensor* dx,
                            float* dw, float* db, Conv2dWorkspace* ws);
// The algorithms a plan chose (for logs and the benchmark): forward, backward data, filter.
std::vector<int> Conv2dAlgorithms(const Conv2dWorkspace& ws);

// As cpu::MaxPoolForward/Backward (window and stride `size`, no padding).
absl::Status MaxPoolForward(GpuContext* ctx, const DeviceTensor& x, int64_t size, DeviceTensor* y);
absl::Status MaxPoolBackward(GpuContext* ctx, const DeviceTensor& x, const DeviceTensor& y,
                             const DeviceTensor& dy, int64_t size, DeviceTensor* dx);

absl::Status ReluForward(GpuContext* ctx, const DeviceTensor& x, DeviceTensor* y);
absl::Status ReluBackward(GpuContext* ctx, const DeviceTensor& x, const DeviceTensor& dy,
                          DeviceTensor* dx);

// As cpu::SoftmaxCrossEntropy over logits [N, C] (any dtype) with int32 labels already on the
// device. dlogits (may be null) = (softmax - onehot) / N * grad_scale, in the logits' dtype:
// grad_scale is the fp16 loss scale (1 otherwise). The loss and count are read back.
absl::StatusOr<cpu::XentResult> SoftmaxCrossEntropy(GpuContext* ctx, const DeviceTensor& logits,
                                                    const int32_t* labels, DeviceTensor* dlogits,
                                                    float grad_scale = 1.0f);

}  // namespace lockstep::trainer::cuda
