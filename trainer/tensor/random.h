#pragma once
// Uniform and normal draws for weights, noise and synthetic data: for the same engine state,
// bit for bit the values of libstdc++'s std::uniform_real_distribution and
// std::normal_distribution (random_test.cc holds them to that), without their per-draw cost.
// libstdc++'s generate_canonical takes log(2^64) in long double at every draw, which only
// GCC's optimised builds fold away: in the sanitizer build that logarithm was three quarters of
// loading a large Keras model (its weights' initialisation).
// Thread-safety: each object is used by one thread (as the engine it draws from).

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

namespace lockstep::trainer {

// A draw in [0, 1): the engine's output scaled by its range, as generate_canonical computes it
// for one engine call (an engine whose range holds the type's digits).
template <typename T, typename Engine>
T Canonical(Engine& g) {
  static_assert(Engine::min() == 0 &&
                (Engine::max() == ~uint64_t{0} ||
                 (Engine::max() == 0xffffffffu && std::numeric_limits<T>::digits <= 32)));
  constexpr T kRange = Engine::max() == 0xffffffffu ? T(0x1p32) : T(0x1p64);
  const T u = static_cast<T>(g() - Engine::min()) / kRange;
  return u >= T(1) ? std::nextafter(T(1), T(0)) : u;
}

// Uniform on [lo, hi).
template <typename T>
class UniformDraw {
 public:
  UniformDraw(T lo, T hi) : lo_(lo), hi_(hi) {}
  template <typename Engine>
  T operator()(Engine& g) const {
    return Canonical<T>(g) * (hi_ - lo_) + lo_;
  }

 private:
  T lo_, hi_;
};

// Normal with the given mean and deviation, by Marsaglia's polar method: each accepted pair
// gives two draws, the second kept for the next call.
template <typename T>
class NormalDraw {
 public:
  NormalDraw(T mean, T stddev) : mean_(mean), stddev_(stddev) {}
  template <typename Engine>
  T operator()(Engine& g) {
    T z;
    if (saved_available_) {
      saved_available_ = false;
      z = saved_;
    } else {
      T x, y, r2;
      do {
        // As libstdc++ writes it: the subtraction in double, then rounded to T.
        x = static_cast<T>(T(2.0) * Canonical<T>(g) - 1.0);
        y = static_cast<T>(T(2.0) * Canonical<T>(g) - 1.0);
        r2 = x * x + y * y;
      } while (r2 > 1.0 || r2 == 0.0);
      const T mult = std::sqrt(-2 * std::log(r2) / r2);
      saved_ = x * mult;
      saved_available_ = true;
      z = y * mult;
    }
    return z * stddev_ + mean_;
  }

 private:
  T mean_, stddev_;
  T saved_ = 0;
  bool saved_available_ = false;
};

}  // namespace lockstep::trainer
