#include "trainer/optim/loss_scale.h"

#include <algorithm>

namespace lockstep::trainer {

bool LossScaler::Update(bool grads_finite) {
  if (!o_.dynamic) {
    if (!grads_finite) ++skipped_;
    return grads_finite;
  }
  if (!grads_finite) {
    scale_ = std::max(o_.min_scale, scale_ * 0.5f);
    streak_ = 0;
    ++skipped_;
    return false;
  }
  if (++streak_ >= o_.growth_interval) {
    // Doubling stops where fp32 would overflow (2^127 is still finite).
    if (scale_ < 1.7e38f) scale_ *= 2.0f;
    streak_ = 0;
  }
  return true;
}

}  // namespace lockstep::trainer
