// The caching allocator's logic over a host backend that counts and can run out of memory.
#include "trainer/kernels/cuda/caching_allocator.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <set>

namespace lockstep::trainer::cuda {
namespace {

struct FakeDevice {
  size_t capacity = 1 << 20;
  size_t used = 0;
  int allocs = 0;
  int frees = 0;
  std::map<void*, size_t> live;

  CachingAllocator::Backend Backend() {
    return {.allocate = [this](size_t bytes) -> absl::StatusOr<void*> {
              if (used + bytes > capacity) return absl::ResourceExhaustedError("out of memory");
              void* p = std::malloc(bytes);
              used += bytes;
              ++allocs;
              live[p] = bytes;
              return p;
            },
            .release =
                [this](void* p) {
                  used -= live.at(p);
                  live.erase(p);
                  ++frees;
                  std::free(p);
                }};
  }
};

TEST(CachingAllocator, ReusesFreedBlocksOfFittingSize) {
  FakeDevice dev;
  CachingAllocator a(dev.Backend());
  void* p = *a.Allocate(1000);
  a.Free(p);
  EXPECT_EQ(a.stats().bytes_cached, 1024);
  // 900 rounds to 1024 too: the same block, no new device allocation.
  void* q = *a.Allocate(900);
  EXPECT_EQ(q, p);
  EXPECT_EQ(dev.allocs, 1);
  EXPECT_EQ(a.stats().cache_hits, 1);
  EXPECT_EQ(a.stats().bytes_in_use, 1024);
  a.Free(q);
}

TEST(CachingAllocator, DoesNotHandOutBlocksMoreThanTwiceTheRequest) {
  FakeDevice dev;
  CachingAllocator a(dev.Backend());
  void* big = *a.Allocate(64 << 10);
  a.Free(big);
  void* small = *a.Allocate(512);
  EXPECT_NE(small, big);
  EXPECT_EQ(dev.allocs, 2);
  // A request over half the cached block's size takes it.
  void* half = *a.Allocate((32 << 10) + 512);
  EXPECT_EQ(half, big);
  a.Free(small);
  a.Free(half);
}

TEST(CachingAllocator, LiveBlocksAreDistinctAndAligned) {
  FakeDevice dev;
  CachingAllocator a(dev.Backend());
  std::set<void*> seen;
  std::vector<void*> blocks;
  for (int i = 0; i < 50; ++i) {
    void* p = *a.Allocate(static_cast<size_t>(i) * 7);
    EXPECT_TRUE(seen.insert(p).second) << i;
    blocks.push_back(p);
  }
  for (void* p : blocks) a.Free(p);
  EXPECT_EQ(a.stats().bytes_in_use, 0);
  EXPECT_EQ(a.stats().peak_bytes_in_use, 50 * 512);
}

TEST(CachingAllocator, FlushesTheCacheWhenTheDeviceRunsOut) {
  FakeDevice dev;
  dev.capacity = 4096;
  CachingAllocator a(dev.Backend());
  void* p = *a.Allocate(2048);
  void* q = *a.Allocate(1024);
  a.Free(p);
  a.Free(q);
  // 4096 does not fit beside the cached 3072 bytes: the cache goes back, then it fits.
  absl::StatusOr<void*> big = a.Allocate(4096);
  ASSERT_TRUE(big.ok()) << big.status();
  EXPECT_EQ(a.stats().cache_flushes, 1);
  EXPECT_EQ(a.stats().bytes_cached, 0);
  EXPECT_EQ(dev.frees, 2);
  // Beyond the device: a clear error naming the size and what is in use.
  absl::StatusOr<void*> more = a.Allocate(1024);
  ASSERT_FALSE(more.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(more.status()));
  EXPECT_NE(more.status().message().find("1024 bytes failed (4096 bytes in use)"),
            std::string::npos)
      << more.status();
  a.Free(*big);
}

TEST(CachingAllocator, DoubleFreeAndForeignPointersAreIgnored) {
  FakeDevice dev;
  CachingAllocator a(dev.Backend());
  void* p = *a.Allocate(100);
  a.Free(p);
  a.Free(p);
  int local = 0;
  a.Free(&local);
  a.Free(nullptr);
  EXPECT_EQ(a.stats().bytes_cached, 512);
  // Cached once: two allocations get two blocks.
  void* x = *a.Allocate(100);
  void* y = *a.Allocate(100);
  EXPECT_NE(x, y);
  a.Free(x);
  a.Free(y);
}

TEST(CachingAllocator, DestructorReturnsEverythingToTheDevice) {
  FakeDevice dev;
  {
    CachingAllocator a(dev.Backend());
    void* p = *a.Allocate(100);
    (void)*a.Allocate(5000);  // still in use at destruction
    a.Free(p);
    DeviceBuffer owned = *DeviceBuffer::Make(&a, 300);
    EXPECT_NE(owned.get(), nullptr);
    DeviceBuffer moved = std::move(owned);
    EXPECT_EQ(owned.get(), nullptr);
    EXPECT_EQ(moved.bytes(), 300u);
  }
  EXPECT_EQ(dev.used, 0u);
  EXPECT_TRUE(dev.live.empty());
}

}  // namespace
}  // namespace lockstep::trainer::cuda
