#include "trainer/kernels/cuda/device.h"

#include "absl/strings/str_cat.h"
#include "trainer/kernels/cuda/check.h"

namespace lockstep::trainer::cuda {

absl::StatusOr<DeviceInfo> GetDeviceInfo(int device) {
  GpuCountResult n = GpuCount();
  if (device < 0 || device >= n.count) {
    return absl::FailedPreconditionError(
        absl::StrCat("GPU ", device, " does not exist (",
                     n.count > 0 ? absl::StrCat(n.count, " visible") : n.why_none, ")"));
  }
  cudaDeviceProp p{};
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudaGetDeviceProperties(&p, device));
  return DeviceInfo{.index = device,
                    .name = p.name,
                    .compute_major = p.major,
                    .compute_minor = p.minor,
                    .multiprocessors = p.multiProcessorCount,
                    .memory_bytes = static_cast<int64_t>(p.totalGlobalMem),
                    .l2_bytes = p.l2CacheSize};
}

absl::StatusOr<std::unique_ptr<GpuContext>> GpuContext::Create(int device, Options options) {
  absl::StatusOr<DeviceInfo> info = GetDeviceInfo(device);
  if (!info.ok()) return info.status();
  std::unique_ptr<GpuContext> c(new GpuContext(*info, options));
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudaSetDevice(device));
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&c->stream_, cudaStreamNonBlocking));
  c->allocator_ = std::make_unique<CachingAllocator>(
      CachingAllocator::Backend{.allocate = [device](size_t bytes) -> absl::StatusOr<void*> {
                                  void* p = nullptr;
                                  cudaError_t e = cudaSetDevice(device);
                                  if (e == cudaSuccess) e = cudaMalloc(&p, bytes);
                                  if (e != cudaSuccess) {
                                    (void)cudaGetLastError();
                                    return LOCKSTEP_GPU_STATUS(e);
                                  }
                                  return p;
                                },
                                .release =
                                    [device](void* p) {
                                      (void)cudaSetDevice(device);
                                      (void)cudaFree(p);
                                    }});
  LOCKSTEP_GPU_RETURN_IF_ERROR(cublasCreate(&c->cublas_));
  LOCKSTEP_GPU_RETURN_IF_ERROR(cublasSetStream(c->cublas_, c->stream_));
  LOCKSTEP_GPU_RETURN_IF_ERROR(cublasLtCreate(&c->cublaslt_));
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudnnCreate(&c->cudnn_));
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudnnSetStream(c->cudnn_, c->stream_));
  // cuBLAS gets a workspace from the caching allocator, so its GEMMs never allocate.
  constexpr size_t kCublasWorkspace = 32u << 20;
  absl::StatusOr<void*> ws = c->Workspace(kCublasWorkspace);
  if (!ws.ok()) return ws.status();
  LOCKSTEP_GPU_RETURN_IF_ERROR(cublasSetWorkspace(c->cublas_, *ws, kCublasWorkspace));
  return c;
}

GpuContext::~GpuContext() {
  (void)cudaSetDevice(info_.index);
  if (stream_ != nullptr) (void)cudaStreamSynchronize(stream_);
  if (cudnn_ != nullptr) cudnnDestroy(cudnn_);
  if (cublaslt_ != nullptr) cublasLtDestroy(cublaslt_);
  if (cublas_ != nullptr) cublasDestroy(cublas_);
  workspace_.Reset();
  allocator_.reset();
  if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
}

absl::Status GpuContext::Activate() const {
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudaSetDevice(info_.index));
  return absl::OkStatus();
}

absl::Status GpuContext::Synchronize() const {
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  return absl::OkStatus();
}

absl::StatusOr<void*> GpuContext::Workspace(size_t bytes) {
  if (workspace_.get() == nullptr || workspace_.bytes() < bytes) {
    // The old workspace may still be read by queued work: the allocator only hands it to
    // later work on this stream.
    workspace_.Reset();
    absl::StatusOr<DeviceBuffer> b = DeviceBuffer::Make(allocator_.get(), bytes);
    if (!b.ok()) return b.status();
    workspace_ = std::move(*b);
    if (cublas_ != nullptr) {
      LOCKSTEP_GPU_RETURN_IF_ERROR(
          cublasSetWorkspace(cublas_, workspace_.get(), workspace_.bytes()));
    }
  }
  return workspace_.get();
}

PinnedBuffer::~PinnedBuffer() {
  if (p_ != nullptr) (void)cudaFreeHost(p_);
}

PinnedBuffer::PinnedBuffer(PinnedBuffer&& o) noexcept { *this = std::move(o); }

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& o) noexcept {
  if (this != &o) {
    if (p_ != nullptr) (void)cudaFreeHost(p_);
    p_ = o.p_;
    bytes_ = o.bytes_;
    o.p_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

absl::Status PinnedBuffer::Reserve(size_t bytes) {
  if (bytes <= bytes_ && p_ != nullptr) return absl::OkStatus();
  if (p_ != nullptr) {
    LOCKSTEP_GPU_RETURN_IF_ERROR(cudaFreeHost(p_));
    p_ = nullptr;
    bytes_ = 0;
  }
  LOCKSTEP_GPU_RETURN_IF_ERROR(cudaHostAlloc(&p_, bytes, cudaHostAllocDefault));
  bytes_ = bytes;
  return absl::OkStatus();
}

}  // namespace lockstep::trainer::cuda
