#include "trainer/data/batcher.h"

#include <algorithm>
#include <chrono>
#include <numeric>
#include <random>

namespace lockstep::trainer {

Batcher::Batcher(const Dataset* data, BatcherOptions options, int64_t epoch, int64_t step)
    : data_(data),
      o_(options),
      local_(options.global_batch / options.shard_count),
      steps_per_epoch_(options.steps_per_epoch > 0
                           ? std::min(options.steps_per_epoch, data->size() / options.global_batch)
                           : data->size() / options.global_batch),
      epoch_(epoch),
      step_(step) {
  if (o_.prefetch) producer_ = std::thread([this] { Produce(); });
}

Batcher::~Batcher() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (producer_.joinable()) producer_.join();
}

Batch Batcher::Make(int64_t epoch, int64_t step) {
  if (order_epoch_ != epoch) {
    order_.resize(static_cast<size_t>(data_->size()));
    std::iota(order_.begin(), order_.end(), 0);
    if (o_.shuffle) {
      std::mt19937_64 rng(o_.seed * 1000003u + static_cast<uint64_t>(epoch));
      std::shuffle(order_.begin(), order_.end(), rng);
    }
    order_epoch_ = epoch;
  }
  Batch b;
  b.epoch = epoch;
  b.step = step;
  const int64_t first = step * o_.global_batch + o_.shard_index * local_;
  GatherRows(*data_, order_.data() + first, local_, &b);
  return b;
}

void Batcher::Produce() {
  for (;;) {
    int64_t epoch, step;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !ready_; });
      if (stop_) return;
      epoch = epoch_;
      step = step_;
    }
    Batch b = Make(epoch, step);
    {
      std::lock_guard lock(mu_);
      ready_ = std::move(b);
      if (++step_ == steps_per_epoch_) {
        step_ = 0;
        ++epoch_;
      }
    }
    cv_.notify_all();
  }
}

Batch Batcher::Next() {
  const auto start = std::chrono::steady_clock::now();
  auto waited = [&] {
    wait_seconds_ +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  if (!o_.prefetch) {
    Batch b = Make(epoch_, step_);
    if (++step_ == steps_per_epoch_) {
      step_ = 0;
      ++epoch_;
    }
    waited();
    return b;
  }
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return ready_.has_value(); });
  waited();
  Batch b = std::move(*ready_);
  ready_.reset();
  lock.unlock();
  cv_.notify_all();
  return b;
}

}  // namespace lockstep::trainer
