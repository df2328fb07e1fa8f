#include "trainer/kernels/cuda/caching_allocator.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace lockstep::trainer::cuda {

CachingAllocator::CachingAllocator(Backend backend) : backend_(std::move(backend)) {}

CachingAllocator::~CachingAllocator() {
  std::lock_guard<std::mutex> lock(mu_);
  ReleaseCachedLocked();
  for (auto& [p, size] : in_use_) backend_.release(p);
}

absl::StatusOr<void*> CachingAllocator::Allocate(size_t bytes) {
  const size_t size =
      std::max(kGranularity, (bytes + kGranularity - 1) / kGranularity * kGranularity);
  std::lock_guard<std::mutex> lock(mu_);
  // The smallest cached block that fits, unless it is more than twice the request.
  auto it = cached_.lower_bound(size);
  if (it != cached_.end() && it->first <= 2 * size) {
    void* p = it->second;
    const size_t got = it->first;
    cached_.erase(it);
    stats_.bytes_cached -= static_cast<int64_t>(got);
    in_use_.emplace(p, got);
    stats_.bytes_in_use += static_cast<int64_t>(got);
    stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
    ++stats_.allocations;
    ++stats_.cache_hits;
    return p;
  }
  absl::StatusOr<void*> p = backend_.allocate(size);
  if (!p.ok() && absl::IsResourceExhausted(p.status()) && !cached_.empty()) {
    ReleaseCachedLocked();
    ++stats_.cache_flushes;
    p = backend_.allocate(size);
  }
  if (!p.ok()) {
    return absl::Status(p.status().code(), absl::StrCat("device allocation of ", size,
                                                        " bytes failed (", stats_.bytes_in_use,
                                                        " bytes in use): ", p.status().message()));
  }
  in_use_.emplace(*p, size);
  stats_.bytes_in_use += static_cast<int64_t>(size);
  stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
  ++stats_.allocations;
  ++stats_.backend_allocations;
  return *p;
}

void CachingAllocator::Free(void* p) {
  if (p == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = in_use_.find(p);
  if (it == in_use_.end()) return;  // not ours (a double free is ignored, never cached twice)
  const size_t size = it->second;
  in_use_.erase(it);
  stats_.bytes_in_use -= static_cast<int64_t>(size);
  cached_.emplace(size, p);
  stats_.bytes_cached += static_cast<int64_t>(size);
}

void CachingAllocator::ReleaseCached() {
  std::lock_guard<std::mutex> lock(mu_);
  ReleaseCachedLocked();
}

void CachingAllocator::ReleaseCachedLocked() {
  for (auto& [size, p] : cached_) backend_.release(p);
  cached_.clear();
  stats_.bytes_cached = 0;
}

CachingAllocator::Stats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    Reset();
    alloc_ = o.alloc_;
    p_ = o.p_;
    bytes_ = o.bytes_;
    o.alloc_ = nullptr;
    o.p_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

absl::StatusOr<DeviceBuffer> DeviceBuffer::Make(CachingAllocator* alloc, size_t bytes) {
  absl::StatusOr<void*> p = alloc->Allocate(bytes);
  if (!p.ok()) return p.status();
  return DeviceBuffer(alloc, *p, bytes);
}

void DeviceBuffer::Reset() {
  if (alloc_ != nullptr) alloc_->Free(p_);
  alloc_ = nullptr;
  p_ = nullptr;
  bytes_ = 0;
}

}  // namespace lockstep::trainer::cuda
