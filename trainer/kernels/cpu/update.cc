#include "trainer/kernels/cpu/update.h"

#include <omp.h>

#include <algorithm>
#include <cmath>

#include "trainer/kernels/cpu/simd.h"
#include "trainer/kernels/cpu/threads.h"

namespace lockstep::trainer {
namespace {

// Below this many elements a tensor's update stays on the calling thread: waking a team costs
// more than the pass.
constexpr int64_t kParallelMin = int64_t{1} << 16;

// One range of one tensor. Each rule is a loop of its own with no test inside, so that every
// loop vectorises.
LOCKSTEP_SIMD_CLONES void UpdateRange(const UpdateParams& u, float* __restrict p,
                                      const float* __restrict graw, float* __restrict s0,
                                      float* __restrict s1, float* __restrict s2, int64_t n) {
  const float lr = u.lr, mu = u.momentum, keep = u.keep, scale = u.scale, cv = u.clip;
  auto grad = [&](int64_t j) {
    const float g = graw[j] * scale;
    return g < -cv ? -cv : (g > cv ? cv : g);
  };
  switch (u.rule) {
    case UpdateRule::kTorchSgd:
      if (mu == 0) {
        for (int64_t j = 0; j < n; ++j) p[j] -= lr * graw[j];
      } else {
        for (int64_t j = 0; j < n; ++j) {
          s0[j] = mu * s0[j] + graw[j];
          p[j] -= lr * s0[j];
        }
      }
      return;
    case UpdateRule::kTorchAdam: {
      const float b1 = u.beta1, b2 = u.beta2, a1 = u.a1, a2 = u.a2, alpha = u.alpha, eps = u.eps;
      for (int64_t j = 0; j < n; ++j) {
        const float g = graw[j];
        s0[j] = b1 * s0[j] + a1 * g;
        s1[j] = b2 * s1[j] + a2 * g * g;
        p[j] -= alpha * s0[j] / (std::sqrt(s1[j]) + eps);
      }
      return;
    }
    case UpdateRule::kKerasSgd:
      for (int64_t j = 0; j < n; ++j) p[j] = p[j] * keep - lr * grad(j);
      return;
    case UpdateRule::kKerasMomentum:
      for (int64_t j = 0; j < n; ++j) {
        s0[j] = mu * s0[j] - lr * grad(j);
        p[j] = p[j] * keep + s0[j];
      }
      return;
    case UpdateRule::kKerasNesterov:
      for (int64_t j = 0; j < n; ++j) {
        const float g = grad(j);
        s0[j] = mu * s0[j] - lr * g;
        p[j] = p[j] * keep + (mu * s0[j] - lr * g);
      }
      return;
    case UpdateRule::kKerasAdam: {
      const float a1 = u.a1, a2 = u.a2, alpha = u.alpha, eps = u.eps;
      for (int64_t j = 0; j < n; ++j) {
        const float g = grad(j);
        s0[j] += (g - s0[j]) * a1;
        s1[j] += (g * g - s1[j]) * a2;
        p[j] = p[j] * keep - alpha * s0[j] / (std::sqrt(s1[j]) + eps);
      }
      return;
    }
    case UpdateRule::kKerasAmsgrad: {
      const float a1 = u.a1, a2 = u.a2, alpha = u.alpha, eps = u.eps;
      for (int64_t j = 0; j < n; ++j) {
        const float g = grad(j);
        s0[j] += (g - s0[j]) * a1;
        s1[j] += (g * g - s1[j]) * a2;
        s2[j] = s2[j] > s1[j] ? s2[j] : s1[j];
        p[j] = p[j] * keep - alpha * s0[j] / (std::sqrt(s2[j]) + eps);
      }
      return;
    }
    case UpdateRule::kKerasRmsprop:
    case UpdateRule::kKerasRmspropMomentum:
    case UpdateRule::kKerasRmspropCentered:
    case UpdateRule::kKerasRmspropCenteredMomentum: {
      const float rho = u.rho, eps = u.eps;
      // s0 the mean square; then the momentum (s1) when there is one; then the mean (last).
      float* __restrict mom = s1;
      float* __restrict avg = u.rule == UpdateRule::kKerasRmspropCenteredMomentum ? s2 : s1;
      auto square = [&](int64_t j, float g) {
        s0[j] = rho * s0[j] + (1 - rho) * g * g;
        return s0[j] + eps;
      };
      auto centred = [&](int64_t j, float g, float denom) {
        avg[j] = rho * avg[j] + (1 - rho) * g;
        return denom - avg[j] * avg[j];
      };
      if (u.rule == UpdateRule::kKerasRmsprop) {
        for (int64_t j = 0; j < n; ++j) {
          const float g = grad(j);
          p[j] = p[j] * keep - lr * g / std::sqrt(square(j, g));
        }
      } else if (u.rule == UpdateRule::kKerasRmspropMomentum) {
        for (int64_t j = 0; j < n; ++j) {
          const float g = grad(j);
          mom[j] = mu * mom[j] + lr * g / std::sqrt(square(j, g));
          p[j] = p[j] * keep - mom[j];
        }
      } else if (u.rule == UpdateRule::kKerasRmspropCentered) {
        for (int64_t j = 0; j < n; ++j) {
          const float g = grad(j);
          p[j] = p[j] * keep - lr * g / std::sqrt(centred(j, g, square(j, g)));
        }
      } else {
        for (int64_t j = 0; j < n; ++j) {
          const float g = grad(j);
          mom[j] = mu * mom[j] + lr * g / std::sqrt(centred(j, g, square(j, g)));
          p[j] = p[j] * keep - mom[j];
        }
      }
      return;
    }
    case UpdateRule::kKerasAdagrad: {
      const float eps = u.eps;
      for (int64_t j = 0; j < n; ++j) {
        const float g = grad(j);
        s0[j] += g * g;
        p[j] = p[j] * keep - lr * g / std::sqrt(s0[j] + eps);
      }
      return;
    }
  }
}

float* At(float* s, int64_t off) { return s == nullptr ? nullptr : s + off; }

}  // namespace

void ApplyUpdate(const UpdateParams& u, float* p, const float* g, float* s0, float* s1, float* s2,
                 int64_t n) {
  const int threads = cpu::CpuThreads();
  if (threads <= 1 || n < kParallelMin) {
    UpdateRange(u, p, g, s0, s1, s2, n);
    return;
  }
  // Equal ranges, each a multiple of 16 floats (a cache line) but the last.
  cpu::UseCpuThreads();
  const int64_t per = ((n + threads - 1) / threads + 15) / 16 * 16;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int t = 0; t < threads; ++t) {
    const int64_t b = std::min(n, t * per), e = std::min(n, b + per);
    if (e > b) UpdateRange(u, p + b, g + b, At(s0, b), At(s1, b), At(s2, b), e - b);
  }
}

}  // namespace lockstep::trainer
