#pragma once
// Dynamic loss scaling for fp16 training (as Keras' LossScaleOptimizer and torch.amp's
// GradScaler): the loss is multiplied by the scale before backward so small fp16 gradients do
// not flush to zero, and the gradients are divided by it before the update. A step whose
// gradients hold an Inf or NaN is skipped and the scale halved (never below `min_scale`); after
// `growth_interval` finite steps in a row the scale doubles. bf16 has fp32's range and needs
// none of this: Fixed(1) applies every step and never changes.
// Thread-safety: one thread.

#include <cstdint>

namespace lockstep::trainer {

class LossScaler {
 public:
  struct Options {
    float initial_scale = 32768.0f;  // 2^15
    int64_t growth_interval = 2000;
    float min_scale = 1.0f;
    bool dynamic = true;
  };
  LossScaler() : LossScaler(Options{}) {}
  explicit LossScaler(Options o) : o_(o), scale_(o.initial_scale) {}
  static LossScaler Fixed(float scale) {
    return LossScaler({.initial_scale = scale, .dynamic = false});
  }

  float scale() const { return scale_; }
  // Records one step's gradient check; true when the update is to be applied.
  bool Update(bool grads_finite);
  int64_t skipped_steps() const { return skipped_; }
  int64_t finite_streak() const { return streak_; }

  // What a replica joining a running group takes over (in-place recovery).
  struct State {
    float scale = 1.0f;
    int64_t streak = 0;
    int64_t skipped = 0;
  };
  State state() const { return {scale_, streak_, skipped_}; }
  void set_state(const State& s) {
    scale_ = s.scale;
    streak_ = s.streak;
    skipped_ = s.skipped;
  }

 private:
  Options o_;
  float scale_;
  int64_t streak_ = 0;
  int64_t skipped_ = 0;
};

}  // namespace lockstep::trainer
