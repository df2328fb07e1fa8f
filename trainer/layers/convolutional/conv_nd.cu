#include "trainer/layers/convolutional/conv_nd_kernels.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "trainer/kernels/cuda/check.h"
#include "trainer/kernels/cuda/cudnn_util.h"
#include "trainer/kernels/cuda/dtype.cuh"
#include "trainer/kernels/cuda/elementwise.h"
#include "trainer/kernels/cuda/spatial.h"

namespace lockstep::trainer::cuda {
namespace {

// Where element (s, ci, co) of a Keras kernel [taps, c_in, cols] goes in cuDNN's
// [k_out, taps, c_group]: a plain kernel has k_out = co and c_group = c_in; a depthwise one
// k_out = ci * cols + co and c_group = 1.
__device__ __forceinline__ int64_t CudnnIndex(int64_t idx, int64_t taps, int64_t c_in, int64_t cols,
                                              bool depthwise) {
  const int64_t co = idx % cols;
  const int64_t ci = (idx / cols) % c_in;
  const int64_t s = idx / (cols * c_in);
  if (depthwise) return (ci * cols + co) * taps + s;
  return (co * taps + s) * c_in + ci;
}

template <typename T>
__global__ void KerasToCudnnKernel(const T* __restrict__ keras, int64_t taps, int64_t c_in,
                                   int64_t cols, bool depthwise, T* __restrict__ cudnn) {
  const int64_t total = taps * c_in * cols;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < total; i += stride) {
    cudnn[CudnnIndex(i, taps, c_in, cols, depthwise)] = keras[i];
  }
}

template <typename T>
__global__ void CudnnToKerasF32Kernel(const T* __restrict__ cudnn, int64_t taps, int64_t c_in,
                                      int64_t cols, bool depthwise, float* __restrict__ keras) {
  const int64_t total = taps * c_in * cols;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < total; i += stride) {
    keras[i] = ToFloat(cudnn[CudnnIndex(i, taps, c_in, cols, depthwise)]);
  }
}

absl::Status SetNhwc(cudnnTensorDescriptor_t d, DType t, int64_t n, int64_t c,
                     const std::vector<int64_t>& spatial) {
  std::vector<int> dims{static_cast<int>(n), static_cast<int>(c)};
  for (int64_t s : spatial) dims.push_back(static_cast<int>(s));
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudnnSetTensorNdDescriptorEx(
      d, CUDNN_TENSOR_NHWC, CudnnType(t), static_cast<int>(dims.size()), dims.data()));
  return absl::OkStatus();
}

}  // namespace

struct CudnnConv::Plan {
  GpuContext* ctx = nullptr;
  cpu::ConvGeometry g;
  DType dtype = DType::kF32;
  bool bias = false;
  // Keras's padding per axis when cuDNN cannot do it (asymmetric): the input is copied into a
  // zero-padded buffer first.
  bool padded = false;
  Axes3 before{}, after{};
  int64_t taps = 1, cols = 1;
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  cudnnConvolutionFwdAlgo_t fwd{};
  cudnnConvolutionBwdDataAlgo_t bwd_data{};
  cudnnConvolutionBwdFilterAlgo_t bwd_filter{};
  size_t fwd_bytes = 0, bwd_data_bytes = 0, bwd_filter_bytes = 0;
  DeviceTensor xp, dxp, wc, dwc;  // padded input and its gradient; the kernel in cuDNN's layout

  ~Plan() {
    if (x) cudnnDestroyTensorDescriptor(x);
    if (y) cudnnDestroyTensorDescriptor(y);
    if (w) cudnnDestroyFilterDescriptor(w);
    if (conv) cudnnDestroyConvolutionDescriptor(conv);
  }

  Shape InShape() const {
    Shape s{g.n};
    for (int a = 0; a < g.rank; ++a) s.push_back(g.in[static_cast<size_t>(a)]);
    s.push_back(g.c_in);
    return s;
  }
  Shape OutShape() const {
    Shape s{g.n};
    for (int a = 0; a < g.rank; ++a) s.push_back(g.out[static_cast<size_t>(a)]);
    s.push_back(g.c_out);
    return s;
  }
  // The input cuDNN reads: the padded one when Keras's padding is asymmetric.
  Shape CudnnInShape() const {
    Shape s = InShape();
    for (int a = 0; a < g.rank; ++a) {
      const auto i = static_cast<size_t>(a);
      s[i + 1] += before[i] + after[i];
    }
    return padded ? s : InShape();
  }
  int64_t rows() const {
    int64_t r = g.n;
    for (int a = 0; a < g.rank; ++a) r *= g.out[static_cast<size_t>(a)];
    return r;
  }

  // The input as cuDNN reads it: x itself, or its zero-padded copy.
  absl::StatusOr<const void*> Input(const DeviceTensor& x_in) {
    if (!padded) return static_cast<const void*>(x_in.data());
    if (absl::Status s = PadOrCrop(ctx, x_in, g.rank, before, after, &xp); !s.ok()) return s;
    return static_cast<const void*>(xp.data());
  }

  // The kernel in cuDNN's layout.
  absl::StatusOr<const void*> Kernel(const DeviceTensor& w_in) {
    if (w_in.size() != taps * g.c_in * cols || w_in.dtype() != dtype) {
      return absl::InvalidArgumentError("CudnnConv: kernel " + ShapeString(w_in.shape()) + " in " +
                                        DTypeName(w_in.dtype()) + " does not match the plan's " +
                                        std::to_string(taps * g.c_in * cols) + " values in " +
                                        DTypeName(dtype));
    }
    if (absl::Status s = wc.Resize(ctx, {w_in.size()}, dtype); !s.ok()) return s;
    DispatchDType(dtype, [&](auto t) {
      using T = decltype(t);
      KerasToCudnnKernel<T><<<Blocks(w_in.size()), kThreads, 0, ctx->stream()>>>(
          w_in.as<T>(), taps, g.c_in, cols, g.depthwise, wc.as<T>());
      return 0;
    });
    LOCKSTEP_GPU_RETURN_IF_ERROR(cudaGetLastError());
    return static_cast<const void*>(wc.data());
  }
};

CudnnConv::CudnnConv(std::unique_ptr<Plan> plan) : plan_(std::move(plan)) {}
CudnnConv::~CudnnConv() = default;

absl::StatusOr<std::unique_ptr<CudnnConv>> CudnnConv::Make(GpuContext* ctx,
                                                           const cpu::ConvGeometry& g, DType dtype,
                                                           bool bias) {
  if (!g.valid()) return absl::InvalidArgumentError("CudnnConv: convolution geometry out of range");
  auto plan = std::make_unique<Plan>();
  Plan& p = *plan;
  p.ctx = ctx;
  p.g = g;
  p.dtype = dtype;
  p.bias = bias;
  p.cols = g.depthwise ? g.c_out / g.c_in : g.c_out;
  // Padding per axis: Keras's before, and after whatever makes `out` windows.
  for (int a = 0; a < g.rank; ++a) {
    const auto i = static_cast<size_t>(a);
    p.before[i] = g.pad_before[i];
    p.after[i] = g.pad_after(i);
    if (p.after[i] != p.before[i]) p.padded = true;
    p.taps *= g.kernel[i];
  }
  // cuDNN's view: at least two spatial axes (1D as height 1), padding symmetric or done above.
  std::vector<int64_t> in_sp, out_sp, k, stride, dilation, pad;
  if (g.rank == 1) {
    in_sp.push_back(1);
    out_sp.push_back(1);
    k.push_back(1);
    stride.push_back(1);
    dilation.push_back(1);
    pad.push_back(0);
  }
  for (int a = 0; a < g.rank; ++a) {
    const auto i = static_cast<size_t>(a);
    in_sp.push_back(p.padded ? g.in[i] + p.before[i] + p.after[i] : g.in[i]);
    out_sp.push_back(g.out[i]);
    k.push_back(g.kernel[i]);
    stride.push_back(g.stride[i]);
    dilation.push_back(g.dilation[i]);
    pad.push_back(p.padded ? 0 : g.pad_before[i]);
  }
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudnnCreateTensorDescriptor(&p.x));
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudnnCreateTensorDescriptor(&p.y));
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudnnCreateFilterDescriptor(&p.w));
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudnnCreateConvolutionDescriptor(&p.conv));
  if (absl::Status s = SetNhwc(p.x, dtype, g.n, g.c_in, in_sp); !s.ok()) return s;
  if (absl::Status s = SetNhwc(p.y, dtype, g.n, g.c_out, out_sp); !s.ok()) return s;
  const int64_t groups = g.depthwise ? g.c_in : 1;
  std::vector<int> wd{static_cast<int>(g.c_out), static_cast<int>(g.c_in / groups)};
  for (int64_t v : k) wd.push_back(static_cast<int>(v));
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudnnSetFilterNdDescriptor(p.w, CudnnType(dtype), CUDNN_TENSOR_NHWC,
                                                          static_cast<int>(wd.size()), wd.data()));
  std::vector<int> pa(pad.begin(), pad.end()), sa(stride.begin(), stride.end()),
      da(dilation.begin(), dilation.end());
  LOCKSTEP_GPU_RETURN_IF_ERROR(
      cudnnSetConvolutionNdDescriptor(p.conv, static_cast<int>(pa.size()), pa.data(), sa.data(),
                                      da.data(), CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudnnSetConvolutionGroupCount(p.conv, static_cast<int>(groups)));
  const cudnnMathType_t math = dtype != DType::kF32
                                   ? CUDNN_TENSOR_OP_MATH
                                   : (ctx->tf32() ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH);
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudnnSetConvolutionMathType(p.conv, math));
  // cuDNN's own output shape must be the geometry's.
  std::vector<int> got(out_sp.size() + 2);
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudnnGetConvolutionNdForwardOutputDim(
      p.conv, p.x, p.w, static_cast<int>(got.size()), got.data()));
  for (size_t i = 0; i < out_sp.size(); ++i) {
    if (got[i + 2] != out_sp[i]) {
      return absl::InternalError(absl::StrCat("CudnnConv: cuDNN computes ", got[i + 2],
                                              " outputs on spatial axis ", i, ", the geometry ",
                                              out_sp[i]));
    }
  }

  // The fastest algorithms, measured on scratch tensors of the right sizes.
  absl::StatusOr<DeviceTensor> xs = DeviceTensor::Make(ctx, p.CudnnInShape(), dtype);
  absl::StatusOr<DeviceTensor> ys = DeviceTensor::Make(ctx, p.OutShape(), dtype);
  absl::StatusOr<DeviceTensor> ws = DeviceTensor::Make(ctx, {p.taps * g.c_in * p.cols}, dtype);
  if (!xs.ok()) return xs.status();
  if (!ys.ok()) return ys.status();
  if (!ws.ok()) return ws.status();
  absl::StatusOr<void*> scratch = ctx->Workspace(kMaxConvWorkspace);
  if (!scratch.ok()) return scratch.status();
  constexpr int kCandidates = 8;
  int found = 0;
  cudnnConvolutionFwdAlgoPerf_t fwd[kCandidates];
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudnnFindConvolutionForwardAlgorithmEx(
      ctx->cudnn(), p.x, xs->data(), p.w, ws->data(), p.conv, p.y, ys->data(), kCandidates, &found,
      fwd, *scratch, kMaxConvWorkspace));
  const bool ok_f = Fastest(fwd, found, &p.fwd, &p.fwd_bytes);
  cudnnConvolutionBwdDataAlgoPerf_t bd[kCandidates];
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudnnFindConvolutionBackwardDataAlgorithmEx(
      ctx->cudnn(), p.w, ws->data(), p.y, ys->data(), p.conv, p.x, xs->data(), kCandidates, &found,
      bd, *scratch, kMaxConvWorkspace));
  const bool ok_d = Fastest(bd, found, &p.bwd_data, &p.bwd_data_bytes);
  cudnnConvolutionBwdFilterAlgoPerf_t bf[kCandidates];
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudnnFindConvolutionBackwardFilterAlgorithmEx(
      ctx->cudnn(), p.x, xs->data(), p.y, ys->data(), p.conv, p.w, ws->data(), kCandidates, &found,
      bf, *scratch, kMaxConvWorkspace));
  const bool ok_w = Fastest(bf, found, &p.bwd_filter, &p.bwd_filter_bytes);
  if (!ok_f || !ok_d || !ok_w) {
    return absl::UnimplementedError(absl::StrCat("cuDNN has no convolution algorithm for input ",
                                                 ShapeString(p.InShape()), " in ",
                                                 DTypeName(dtype)));
  }
  return std::unique_ptr<CudnnConv>(new CudnnConv(std::move(plan)));
}

absl::Status CudnnConv::Forward(const DeviceTensor& x, const DeviceTensor& w, const float* b,
                                DeviceTensor* y) {
  Plan& p = *plan_;
  GpuContext* ctx = p.ctx;
  if (x.size() != NumElements(p.InShape()) || x.dtype() != p.dtype || w.dtype() != p.dtype) {
    return absl::InvalidArgumentError("CudnnConv::Forward: input " + ShapeString(x.shape()) +
                                      " does not match the plan's " + ShapeString(p.InShape()));
  }
  absl::StatusOr<const void*> in = p.Input(x);
  if (!in.ok()) return in.status();
  absl::StatusOr<const void*> kernel = p.Kernel(w);
  if (!kernel.ok()) return kernel.status();
  if (absl::Status s = y->Resize(ctx, p.OutShape(), p.dtype); !s.ok()) return s;
  absl::StatusOr<void*> scratch = ctx->Workspace(std::max<size_t>(p.fwd_bytes, 1));
  if (!scratch.ok()) return scratch.status();
  const float one = 1.0f, zero = 0.0f;
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudnnConvolutionForward(ctx->cudnn(), &one, p.x, *in, p.w, *kernel,
                                                       p.conv, p.fwd, *scratch, p.fwd_bytes, &zero,
                                                       p.y, y->data()));
  if (p.bias) return AddBias(ctx, y, b, p.rows(), p.g.c_out, 1);
  return absl::OkStatus();
}

absl::Status CudnnConv::BackwardData(const DeviceTensor& dy, const DeviceTensor& w,
                                     DeviceTensor* dx) {
  Plan& p = *plan_;
  GpuContext* ctx = p.ctx;
  if (dy.size() != NumElements(p.OutShape()) || dy.dtype() != p.dtype) {
    return absl::InvalidArgumentError("CudnnConv::BackwardData: gradient " +
                                      ShapeString(dy.shape()) + " does not match the plan's " +
                                      ShapeString(p.OutShape()));
  }
  absl::StatusOr<const void*> kernel = p.Kernel(w);
  if (!kernel.ok()) return kernel.status();
  if (absl::Status s = dx->Resize(ctx, p.InShape(), p.dtype); !s.ok()) return s;
  void* target = dx->data();
  if (p.padded) {
    if (absl::Status s = p.dxp.Resize(ctx, p.CudnnInShape(), p.dtype); !s.ok()) return s;
    target = p.dxp.data();
  }
  absl::StatusOr<void*> scratch = ctx->Workspace(std::max<size_t>(p.bwd_data_bytes, 1));
  if (!scratch.ok()) return scratch.status();
  const float one = 1.0f, zero = 0.0f;
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudnnConvolutionBackwardData(ctx->cudnn(), &one, p.w, *kernel, p.y,
                                                            dy.data(), p.conv, p.bwd_data, *scratch,
                                                            p.bwd_data_bytes, &zero, p.x, target));
  if (!p.padded) return absl::OkStatus();
  // The input's gradient is the padded one with the padding cut off.
  Axes3 cut_before{}, cut_after{};
  for (size_t a = 0; a < 3; ++a) {
    cut_before[a] = -p.before[a];
    cut_after[a] = -p.after[a];
  }
  return PadOrCrop(ctx, p.dxp, p.g.rank, cut_before, cut_after, dx);
}

absl::Status CudnnConv::BackwardWeights(const DeviceTensor& x, const DeviceTensor& dy, float* dw,
                                        float* db) {
  Plan& p = *plan_;
  GpuContext* ctx = p.ctx;
  if (x.size() != NumElements(p.InShape()) || dy.size() != NumElements(p.OutShape()) ||
      x.dtype() != p.dtype || dy.dtype() != p.dtype) {
    return absl::InvalidArgumentError("CudnnConv::BackwardWeights: input " +
                                      ShapeString(x.shape()) + " or gradient " +
                                      ShapeString(dy.shape()) + " does not match the plan");
  }
  absl::StatusOr<const void*> in = p.Input(x);
  if (!in.ok()) return in.status();
  const int64_t wn = p.taps * p.g.c_in * p.cols;
  if (absl::Status s = p.dwc.Resize(ctx, {wn}, p.dtype); !s.ok()) return s;
  absl::StatusOr<void*> scratch = ctx->Workspace(std::max<size_t>(p.bwd_filter_bytes, 1));
  if (!scratch.ok()) return scratch.status();
  const float one = 1.0f, zero = 0.0f;
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudnnConvolutionBackwardFilter(
      ctx->cudnn(), &one, p.x, *in, p.y, dy.data(), p.conv, p.bwd_filter, *scratch,
      p.bwd_filter_bytes, &zero, p.w, p.dwc.data()));
  DispatchDType(p.dtype, [&](auto t) {
    using T = decltype(t);
    CudnnToKerasF32Kernel<T><<<Blocks(wn), kThreads, 0, ctx->stream()>>>(
        p.dwc.as<T>(), p.taps, p.g.c_in, p.cols, p.g.depthwise, dw);
    return 0;
  });
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudaGetLastError());
  if (p.bias) return BiasGrad(ctx, dy, db, p.rows(), p.g.c_out, 1);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<CudnnConvTranspose>> CudnnConvTranspose::Make(
    GpuContext* ctx, const cpu::ConvGeometry& g, DType dtype, bool bias) {
  if (g.depthwise) {
    return absl::InvalidArgumentError("CudnnConvTranspose: no depthwise transposed convolution");
  }
  absl::StatusOr<std::unique_ptr<CudnnConv>> conv = CudnnConv::Make(ctx, g, dtype, false);
  if (!conv.ok()) return conv.status();
  return std::unique_ptr<CudnnConvTranspose>(
      new CudnnConvTranspose(std::move(*conv), ctx, g.c_in, bias));
}

absl::Status CudnnConvTranspose::Forward(const DeviceTensor& x, const DeviceTensor& w,
                                         const float* b, DeviceTensor* y) {
  if (absl::Status s = conv_->BackwardData(x, w, y); !s.ok()) return s;
  if (!bias_) return absl::OkStatus();
  return AddBias(ctx_, y, b, y->size() / filters_, filters_, 1);
}

absl::Status CudnnConvTranspose::BackwardData(const DeviceTensor& dy, const DeviceTensor& w,
                                              DeviceTensor* dx) {
  return conv_->Forward(dy, w, nullptr, dx);
}

absl::Status CudnnConvTranspose::BackwardWeights(const DeviceTensor& x, const DeviceTensor& dy,
                                                 float* dw, float* db) {
  if (absl::Status s = conv_->BackwardWeights(dy, x, dw, nullptr); !s.ok()) return s;
  if (!bias_) return absl::OkStatus();
  return BiasGrad(ctx_, dy, db, dy.size() / filters_, filters_, 1);
}

}  // namespace lockstep::trainer::cuda
