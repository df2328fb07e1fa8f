// The draws of random.h against libstdc++'s distributions on the same engine: bit for bit.
#include "trainer/tensor/random.h"

#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <random>
#include <utility>

namespace lockstep::trainer {
namespace {

template <typename T>
using Bits = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;

// The same seed through libstdc++'s distribution and ours: the same bits at every draw, and
// the engines left in the same state.
template <typename Engine, typename Want, typename Got>
void ExpectSameDraws(uint64_t seed, Want want, Got got, int n) {
  using T = decltype(want(std::declval<Engine&>()));
  Engine a(seed), b(seed);
  for (int i = 0; i < n; ++i) {
    const T w = want(a), g = got(b);
    ASSERT_EQ(std::bit_cast<Bits<T>>(g), std::bit_cast<Bits<T>>(w))
        << "draw " << i << " of seed " << seed << ": " << g << " != " << w;
  }
  EXPECT_EQ(a, b) << "the engines were advanced differently";
}

template <typename T, typename Engine>
void ExpectNormalsMatch(uint64_t seed, T mean, T stddev, int n) {
  ExpectSameDraws<Engine>(seed, std::normal_distribution<T>(mean, stddev),
                          NormalDraw<T>(mean, stddev), n);
}

template <typename T, typename Engine>
void ExpectUniformsMatch(uint64_t seed, T lo, T hi, int n) {
  UniformDraw<T> draw(lo, hi);
  ExpectSameDraws<Engine>(
      seed, std::uniform_real_distribution<T>(lo, hi),
      [&](Engine& e) {
        const T v = draw(e);
        EXPECT_TRUE(v >= lo && v < hi) << v;
        return v;
      },
      n);
}

TEST(RandomTest, NormalDrawsAreLibstdcxxsBitForBit) {
  for (uint64_t seed : {1u, 7u, 12345u}) {
    ExpectNormalsMatch<float, std::mt19937_64>(seed, 0.0f, 1.0f, 100000);
    ExpectNormalsMatch<float, std::mt19937_64>(seed, -0.5f, 0.05f, 20000);
    ExpectNormalsMatch<double, std::mt19937_64>(seed, 0.0, 1.0, 100000);
    ExpectNormalsMatch<float, std::mt19937>(seed, 2.0f, 3.0f, 20000);
  }
}

TEST(RandomTest, UniformDrawsAreLibstdcxxsBitForBit) {
  for (uint64_t seed : {1u, 99u}) {
    ExpectUniformsMatch<float, std::mt19937_64>(seed, -0.25f, 0.25f, 100000);
    ExpectUniformsMatch<float, std::mt19937>(seed, 0.0f, 6.2831855f, 100000);
    ExpectUniformsMatch<double, std::mt19937_64>(seed, -1.0, 3.0, 100000);
  }
}

TEST(RandomTest, TheLargestEngineOutputStaysBelowOne) {
  // An engine whose every output is its maximum: float(2^64 - 1) rounds to 2^64, which
  // generate_canonical clamps to the float just below 1.
  struct Max {
    using result_type [[maybe_unused]] = uint64_t;
    static constexpr uint64_t min() { return 0; }
    static constexpr uint64_t max() { return ~uint64_t{0}; }
    uint64_t operator()() { return max(); }
  } g;
  EXPECT_EQ(Canonical<float>(g), std::nextafter(1.0f, 0.0f));
  const float canonical = std::generate_canonical<float, 24>(g);
  EXPECT_EQ(Canonical<float>(g), canonical);
  EXPECT_LT(UniformDraw<float>(-1.0f, 1.0f)(g), 1.0f);
}

}  // namespace
}  // namespace lockstep::trainer
