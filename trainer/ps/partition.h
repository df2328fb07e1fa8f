#pragma once
// How the model's variables are placed on the parameter servers: every variable whose size is
// at least `min_shard_bytes` is split on axis 0 into up to `ps_tasks` shards (at least
// min_shard_bytes each, never more shards than rows, like tf.distribute's MinSizePartitioner);
// the shards are then dealt out to the PS tasks round-robin. The plan depends only on the
// shapes and the task count, so every worker computes the same one.
// Thread-safety: pure.

#include <cstdint>
#include <vector>

#include "trainer/tensor/tensor.h"

namespace lockstep::trainer::ps {

struct ShardSpec {
  int id = 0;
  size_t param = 0;       // index into Model::Params()
  int64_t row_begin = 0;  // rows of axis 0
  int64_t row_end = 0;
  int64_t offset = 0;  // first element within the variable
  int64_t elements = 0;
  int task = 0;  // PS task index
};

std::vector<ShardSpec> PlanShards(const std::vector<Shape>& shapes, int ps_tasks,
                                  int64_t min_shard_bytes = 256 << 10);

}  // namespace lockstep::trainer::ps
