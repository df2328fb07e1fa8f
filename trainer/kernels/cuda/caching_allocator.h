#pragma once
// CachingAllocator: device memory reused across training steps instead of returned to the
// driver (cudaMalloc and cudaFree synchronise the device and cost tens of microseconds each).
// Freed blocks go to a cache keyed by size; an allocation takes the smallest cached block that
// fits and wastes at most half of it, else asks the backend. When the backend is out of memory
// every cached block is released and the allocation tried once more, so a cache never causes an
// out-of-memory error that the device alone would not.
//
// One allocator serves one stream: a block freed while kernels queued on that stream still use
// it is only handed to work queued later on the same stream, so the reuse is stream-ordered and
// needs no synchronisation. (Work on other streams must not use the allocator's memory.)
//
// The logic is plain C++ over a Backend (cudaMalloc/cudaFree on a GPU; malloc in the tests), so
// it is tested without a GPU.
// Thread-safety: thread-safe.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <unordered_map>

#include "absl/status/statusor.h"

namespace lockstep::trainer::cuda {

class CachingAllocator {
 public:
  struct Backend {
    // ResourceExhausted when the device is out of memory; other errors are passed on.
    std::function<absl::StatusOr<void*>(size_t bytes)> allocate;
    std::function<void(void*)> release;
  };
  struct Stats {
    int64_t bytes_in_use = 0;
    int64_t bytes_cached = 0;  // held in the cache, free for reuse
    int64_t peak_bytes_in_use = 0;
    int64_t allocations = 0;          // Allocate calls that succeeded
    int64_t cache_hits = 0;           // ... served from the cache
    int64_t backend_allocations = 0;  // ... that reached the backend
    int64_t cache_flushes = 0;        // releases of the whole cache after an out-of-memory
  };
  // Sizes are rounded up to this (so blocks of nearby sizes are interchangeable).
  static constexpr size_t kGranularity = 512;

  explicit CachingAllocator(Backend backend);
  // Releases the cache. Blocks still in use are the caller's bug: they are released too.
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // A block of at least `bytes` (0 is allowed and gives a distinct valid block). The error
  // names the size and what is in use when the device is out of memory.
  absl::StatusOr<void*> Allocate(size_t bytes);
  // Returns a block from Allocate to the cache; null is ignored.
  void Free(void* p);
  // Gives every cached block back to the backend.
  void ReleaseCached();
  Stats stats() const;

 private:
  void ReleaseCachedLocked();

  Backend backend_;
  mutable std::mutex mu_;
  std::multimap<size_t, void*> cached_;       // size -> free block
  std::unordered_map<void*, size_t> in_use_;  // block -> size
  Stats stats_;
};

// Owns one block of a CachingAllocator (move-only).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(CachingAllocator* alloc, void* p, size_t bytes)
      : alloc_(alloc), p_(p), bytes_(bytes) {}
  ~DeviceBuffer() { Reset(); }
  DeviceBuffer(DeviceBuffer&& o) noexcept { *this = std::move(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  static absl::StatusOr<DeviceBuffer> Make(CachingAllocator* alloc, size_t bytes);
  void Reset();
  void* get() const { return p_; }
  size_t bytes() const { return bytes_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(p_);
  }

 private:
  CachingAllocator* alloc_ = nullptr;
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace lockstep::trainer::cuda
