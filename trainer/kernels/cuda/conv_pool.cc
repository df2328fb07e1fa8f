// Convolution and max pooling through cuDNN.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "trainer/kernels/cuda/check.h"
#include "trainer/kernels/cuda/cudnn_util.h"
#include "trainer/kernels/cuda/elementwise.h"
#include "trainer/kernels/cuda/ops.h"

namespace lockstep::trainer::cuda {
namespace {

absl::Status SetTensor4d(cudnnTensorDescriptor_t d, const Shape& s, DType t) {
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudnnSetTensor4dDescriptor(
      d, CUDNN_TENSOR_NCHW, CudnnType(t), static_cast<int>(s[0]), static_cast<int>(s[1]),
      static_cast<int>(s[2]), static_cast<int>(s[3])));
  return absl::OkStatus();
}

}  // namespace

struct Conv2dPlan {
  Shape x_shape;
  Shape w_shape;
  DType dtype = DType::kF32;
  int64_t pad = -1;
  cudnnTensorDescriptor_t x = nullptr;
  cudnnTensorDescriptor_t y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  cudnnConvolutionFwdAlgo_t fwd{};
  cudnnConvolutionBwdDataAlgo_t bwd_data{};
  cudnnConvolutionBwdFilterAlgo_t bwd_filter{};
  size_t fwd_bytes = 0, bwd_data_bytes = 0, bwd_filter_bytes = 0;
  DeviceBuffer dw16;  // the filter gradient in the compute dtype, before its fp32 copy

  ~Conv2dPlan() {
    if (x) cudnnDestroyTensorDescriptor(x);
    if (y) cudnnDestroyTensorDescriptor(y);
    if (w) cudnnDestroyFilterDescriptor(w);
    if (conv) cudnnDestroyConvolutionDescriptor(conv);
  }
};

void Conv2dPlanDeleter::operator()(Conv2dPlan* p) const { delete p; }

namespace {

// Builds the descriptors and measures the algorithms (cudnnFind*: each candidate is run once
// and the fastest that fits the workspace limit kept) for this shape.
absl::Status MakePlan(GpuContext* ctx, const DeviceTensor& x, const DeviceTensor& w,
                      const cpu::Conv2dParams& p, Conv2dWorkspace* ws) {
  Conv2dPlan* have = ws->get();
  if (have != nullptr && have->x_shape == x.shape() && have->w_shape == w.shape() &&
      have->dtype == x.dtype() && have->pad == p.pad) {
    return absl::OkStatus();
  }
  Conv2dWorkspace plan(new Conv2dPlan);
  plan->x_shape = x.shape();
  plan->w_shape = w.shape();
  plan->dtype = x.dtype();
  plan->pad = p.pad;
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudnnCreateTensorDescriptor(&plan->x));
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudnnCreateTensorDescriptor(&plan->y));
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudnnCreateFilterDescriptor(&plan->w));
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudnnCreateConvolutionDescriptor(&plan->conv));
  if (absl::Status s = SetTensor4d(plan->x, x.shape(), x.dtype()); !s.ok()) return s;
  const Shape& ws4 = w.shape();
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudnnSetFilter4dDescriptor(
      plan->w, CudnnType(w.dtype()), CUDNN_TENSOR_NCHW, static_cast<int>(ws4[0]),
      static_cast<int>(ws4[1]), static_cast<int>(ws4[2]), static_cast<int>(ws4[3])));
  const int pad = static_cast<int>(p.pad);
  // fp32 accumulation for every storage dtype.
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudnnSetConvolution2dDescriptor(
      plan->conv, pad, pad, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  const cudnnMathType_t math = x.dtype() != DType::kF32
                                   ? CUDNN_TENSOR_OP_MATH
                                   : (ctx->tf32() ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH);
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudnnSetConvolutionMathType(plan->conv, math));
  const Shape ys = cpu::Conv2dOutputShape(x.shape(), w.shape(), p);
  if (absl::Status s = SetTensor4d(plan->y, ys, x.dtype()); !s.ok()) return s;

  constexpr int kCandidates = 8;
  int found = 0;
  cudnnConvolutionFwdAlgoPerf_t fwd[kCandidates];
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudnnFindConvolutionForwardAlgorithm(
      ctx->cudnn(), plan->x, plan->w, plan->conv, plan->y, kCandidates, &found, fwd));
  const bool ok = Fastest(fwd, found, &plan->fwd, &plan->fwd_bytes);
  cudnnConvolutionBwdDataAlgoPerf_t bd[kCandidates];
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudnnFindConvolutionBackwardDataAlgorithm(
      ctx->cudnn(), plan->w, plan->y, plan->conv, plan->x, kCandidates, &found, bd));
  const bool ok_bd = Fastest(bd, found, &plan->bwd_data, &plan->bwd_data_bytes);
  cudnnConvolutionBwdFilterAlgoPerf_t bf[kCandidates];
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudnnFindConvolutionBackwardFilterAlgorithm(
      ctx->cudnn(), plan->x, plan->y, plan->conv, plan->w, kCandidates, &found, bf));
  const bool ok_bf = Fastest(bf, found, &plan->bwd_filter, &plan->bwd_filter_bytes);
  if (!ok || !ok_bd || !ok_bf) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuDNN has no convolution algorithm for x ", ShapeString(x.shape()), " w ",
                     ShapeString(w.shape()), " in ", DTypeName(x.dtype())));
  }
  *ws = std::move(plan);
  return absl::OkStatus();
}

}  // namespace

std::vector<int> Conv2dAlgorithms(const Conv2dWorkspace& ws) {
  if (!ws) return {};
  return {static_cast<int>(ws->fwd), static_cast<int>(ws->bwd_data),
          static_cast<int>(ws->bwd_filter)};
}

absl::Status Conv2dForward(GpuContext* ctx, const DeviceTensor& x, const DeviceTensor& w,
                           const float* b, const cpu::Conv2dParams& p, DeviceTensor* y,
                           Conv2dWorkspace* ws) {
  if (x.shape().size() != 4 || w.shape().size() != 4 || x.dim(1) != w.dim(1) ||
      x.dtype() != w.dtype()) {
    return absl::InvalidArgumentError(absl::StrCat("Conv2dForward: x ", ShapeString(x.shape()),
                                                   " does not match w ", ShapeString(w.shape())));
  }
  if (absl::Status s = MakePlan(ctx, x, w, p, ws); !s.ok()) return s;
  Conv2dPlan& plan = **ws;
  const Shape ys = cpu::Conv2dOutputShape(x.shape(), w.shape(), p);
  if (absl::Status s = y->Resize(ctx, ys, x.dtype()); !s.ok()) return s;
  absl::StatusOr<void*> scratch = ctx->Workspace(std::max<size_t>(plan.fwd_bytes, 1));
  if (!scratch.ok()) return scratch.status();
  const float one = 1.0f, zero = 0.0f;
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudnnConvolutionForward(ctx->cudnn(), &one, plan.x, x.data(), plan.w,
                                                       w.data(), plan.conv, plan.fwd, *scratch,
                                                       plan.fwd_bytes, &zero, plan.y, y->data()));
  return AddBias(ctx, y, b, ys[0], ys[1], ys[2] * ys[3]);
}

absl::Status Conv2dBackward(GpuContext* ctx, const DeviceTensor& x, const DeviceTensor& w,
                            const DeviceTensor& dy, const cpu::Conv2dParams& p, DeviceTensor* dx,
                            float* dw, float* db, Conv2dWorkspace* ws) {
  if (absl::Status s = MakePlan(ctx, x, w, p, ws); !s.ok()) return s;
  Conv2dPlan& plan = **ws;
  const float one = 1.0f, zero = 0.0f;
  absl::StatusOr<void*> scratch =
      ctx->Workspace(std::max<size_t>({plan.bwd_data_bytes, plan.bwd_filter_bytes, size_t{1}}));
  if (!scratch.ok()) return scratch.status();
  if (dx != nullptr) {
    if (absl::Status s = dx->Resize(ctx, x.shape(), x.dtype()); !s.ok()) return s;
    LOCKSTEP_GPU_RETURN_IF_ERROR(cudnnConvolutionBackwardData(
        ctx->cudnn(), &one, plan.w, w.data(), plan.y, dy.data(), plan.conv, plan.bwd_data, *scratch,
        plan.bwd_data_bytes, &zero, plan.x, dx->data()));
  }
  // cuDNN writes the filter gradient in the filter's dtype: fp32 directly, else through a
  // 16-bit buffer converted to the fp32 gradient.
  void* dw_out = dw;
  const int64_t wn = w.size();
  if (w.dtype() != DType::kF32) {
    const size_t bytes = static_cast<size_t>(wn) * DTypeSize(w.dtype());
    if (plan.dw16.bytes() < bytes) {
      absl::StatusOr<DeviceBuffer> b16 = DeviceBuffer::Make(ctx->allocator(), bytes);
      if (!b16.ok()) return b16.status();
      plan.dw16 = std::move(*b16);
    }
    dw_out = plan.dw16.get();
  }
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudnnConvolutionBackwardFilter(
      ctx->cudnn(), &one, plan.x, x.data(), plan.y, dy.data(), plan.conv, plan.bwd_filter, *scratch,
      plan.bwd_filter_bytes, &zero, plan.w, dw_out));
  if (w.dtype() != DType::kF32) {
    if (absl::Status s = Cast(ctx, dw_out, w.dtype(), dw, DType::kF32, wn); !s.ok()) return s;
  }
  const Shape& ys = dy.shape();
  return BiasGrad(ctx, dy, db, ys[0], ys[1], ys[2] * ys[3]);
}

namespace {

struct PoolDescriptors {
  cudnnPoolingDescriptor_t pool = nullptr;
  cudnnTensorDescriptor_t x = nullptr;
  cudnnTensorDescriptor_t y = nullptr;
  ~PoolDescriptors() {
    if (pool) cudnnDestroyPoolingDescriptor(pool);
    if (x) cudnnDestroyTensorDescriptor(x);
    if (y) cudnnDestroyTensorDescriptor(y);
  }
};

absl::Status MakePool(const DeviceTensor& x, int64_t size, const Shape& ys, PoolDescriptors* d) {
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudnnCreatePoolingDescriptor(&d->pool));
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudnnCreateTensorDescriptor(&d->x));
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudnnCreateTensorDescriptor(&d->y));
  const int k = static_cast<int>(size);
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudnnSetPooling2dDescriptor(
      d->pool, CUDNN_POOLING_MAX_DETERMINISTIC, CUDNN_NOT_PROPAGATE_NAN, k, k, 0, 0, k, k));
  if (absl::Status s = SetTensor4d(d->x, x.shape(), x.dtype()); !s.ok()) return s;
  return SetTensor4d(d->y, ys, x.dtype());
}

Shape PoolShape(const Shape& x, int64_t size) { return {x[0], x[1], x[2] / size, x[3] / size}; }

}  // namespace

absl::Status MaxPoolForward(GpuContext* ctx, const DeviceTensor& x, int64_t size, DeviceTensor* y) {
  const Shape ys = PoolShape(x.shape(), size);
  if (absl::Status s = y->Resize(ctx, ys, x.dtype()); !s.ok()) return s;
  PoolDescriptors d;
  if (absl::Status s = MakePool(x, size, ys, &d); !s.ok()) return s;
  const float one = 1.0f, zero = 0.0f;
  LOCKSTEP_GPU_RETURN_IF_ERROR(
      cudnnPoolingForward(ctx->cudnn(), d.pool, &one, d.x, x.data(), &zero, d.y, y->data()));
  return absl::OkStatus();
}

absl::Status MaxPoolBackward(GpuContext* ctx, const DeviceTensor& x, const DeviceTensor& y,
                             const DeviceTensor& dy, int64_t size, DeviceTensor* dx) {
  if (absl::Status s = dx->Resize(ctx, x.shape(), x.dtype()); !s.ok()) return s;
  PoolDescriptors d;
  if (absl::Status s = MakePool(x, size, y.shape(), &d); !s.ok()) return s;
  const float one = 1.0f, zero = 0.0f;
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudnnPoolingBackward(ctx->cudnn(), d.pool, &one, d.y, y.data(), d.y,
                                                    dy.data(), d.x, x.data(), &zero, d.x,
                                                    dx->data()));
  return absl::OkStatus();
}

}  // namespace lockstep::trainer::cuda
