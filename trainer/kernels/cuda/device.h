#pragma once
// The GPU runtime a replica computes with: device discovery, and one GpuContext per device
// holding its stream, caching allocator and library handles (cuBLAS, cuBLASLt, cuDNN). All work
// of a context goes to its one stream, in order, so the allocator's reuse is safe and a
// replica needs no other synchronisation. Pinned host buffers make uploads asynchronous.
// Thread-safety: a context is used by one thread at a time; that thread calls Activate() first
// (the CUDA current device is per thread).

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "trainer/kernels/cuda/caching_allocator.h"
#include "trainer/kernels/cuda/gpu_available.h"

namespace lockstep::trainer::cuda {

struct DeviceInfo {
  int index = 0;
  std::string name;
  int compute_major = 0;
  int compute_minor = 0;
  int multiprocessors = 0;
  int64_t memory_bytes = 0;
  int64_t l2_bytes = 0;
};

absl::StatusOr<DeviceInfo> GetDeviceInfo(int device);

class GpuContext {
 public:
  struct Options {
    bool tf32 = true;  // fp32 GEMMs and convolutions may use TF32 tensor cores
  };
  static absl::StatusOr<std::unique_ptr<GpuContext>> Create(int device, Options options);
  ~GpuContext();
  GpuContext(const GpuContext&) = delete;
  GpuContext& operator=(const GpuContext&) = delete;

  // Makes this context's device current for the calling thread.
  absl::Status Activate() const;
  // Waits for everything queued on the stream; the first asynchronous error surfaces here.
  absl::Status Synchronize() const;

  int device() const { return info_.index; }
  const DeviceInfo& info() const { return info_; }
  bool tf32() const { return options_.tf32; }
  cudaStream_t stream() const { return stream_; }
  CachingAllocator* allocator() { return allocator_.get(); }
  cublasHandle_t cublas() const { return cublas_; }
  cublasLtHandle_t cublaslt() const { return cublaslt_; }
  cudnnHandle_t cudnn() const { return cudnn_; }
  // A scratch buffer of at least `bytes` for library workspaces (grown, never shrunk).
  absl::StatusOr<void*> Workspace(size_t bytes);

 private:
  GpuContext(DeviceInfo info, Options options) : info_(std::move(info)), options_(options) {}

  DeviceInfo info_;
  Options options_;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<CachingAllocator> allocator_;
  cublasHandle_t cublas_ = nullptr;
  cublasLtHandle_t cublaslt_ = nullptr;
  cudnnHandle_t cudnn_ = nullptr;
  DeviceBuffer workspace_;
};

// Page-locked host memory (cudaHostAlloc), for asynchronous copies (move-only).
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer();
  PinnedBuffer(PinnedBuffer&& o) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  // Grows to at least `bytes` (contents are not kept).
  absl::Status Reserve(size_t bytes);
  void* get() const { return p_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(p_);
  }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace lockstep::trainer::cuda
