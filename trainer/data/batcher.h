#pragma once
// Batcher: epochs of shuffled mini-batches over a Dataset, sharded across workers, with a
// prefetch thread that assembles the next batch while the current one trains.
//
// Order: epoch e visits a permutation drawn from (seed, e); the same for every worker. With
// `shard_count` workers of `global_batch` examples per step, worker `shard_index` takes
// positions [index * local, (index + 1) * local) of each global batch, so the workers of one
// step together see exactly the global batch a single worker would. An epoch has
// floor(size / global_batch) steps (the remainder is dropped, as every worker must take the
// same number of steps). The position (epoch, step) is what a checkpoint saves.
// Thread-safety: one consumer thread; the prefetch thread is internal.

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "trainer/data/dataset.h"

namespace lockstep::trainer {

// A few rows of the data set: every input's and every target's.
struct Batch : Dataset {
  int64_t epoch = 0;
  int64_t step = 0;  // within the epoch
};

struct BatcherOptions {
  int64_t global_batch = 64;
  int64_t shard_index = 0;
  int64_t shard_count = 1;
  uint64_t seed = 1;
  bool shuffle = true;
  bool prefetch = true;
  // Steps per epoch when the workers agreed on fewer than this data gives (each reading its own
  // files); 0: floor(size / global_batch).
  int64_t steps_per_epoch = 0;
};

class Batcher {
 public:
  // `data` must outlive the batcher. Starts at (`epoch`, `step`).
  Batcher(const Dataset* data, BatcherOptions options, int64_t epoch = 0, int64_t step = 0);
  ~Batcher();

  int64_t steps_per_epoch() const { return steps_per_epoch_; }
  int64_t local_batch() const { return local_; }
  // The next batch; epochs follow each other without end.
  Batch Next();
  // Seconds Next() has spent waiting for a batch (with prefetch: the batch not yet made; without
  // it: making the batch), the training loop's time lost to the input pipeline.
  double wait_seconds() const { return wait_seconds_; }

 private:
  Batch Make(int64_t epoch, int64_t step);
  void Produce();

  const Dataset* data_;
  BatcherOptions o_;
  int64_t local_;
  int64_t steps_per_epoch_;
  int64_t epoch_, step_;  // the next batch to make
  double wait_seconds_ = 0;
  std::vector<int64_t> order_;
  int64_t order_epoch_ = -1;
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<Batch> ready_;
  bool stop_ = false;
  std::thread producer_;
};

}  // namespace lockstep::trainer
