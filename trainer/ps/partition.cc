#include "trainer/ps/partition.h"

#include <algorithm>

namespace lockstep::trainer::ps {

std::vector<ShardSpec> PlanShards(const std::vector<Shape>& shapes, int ps_tasks,
                                  int64_t min_shard_bytes) {
  std::vector<ShardSpec> out;
  int next_task = 0;
  for (size_t p = 0; p < shapes.size(); ++p) {
    int64_t elements = 1;
    for (int64_t d : shapes[p]) elements *= d;
    const int64_t rows = shapes[p].empty() ? 1 : shapes[p][0];
    const int64_t row_elems = rows > 0 ? elements / rows : 0;
    const int64_t bytes = elements * static_cast<int64_t>(sizeof(float));
    int64_t parts = std::min<int64_t>(
        {ps_tasks, std::max<int64_t>(1, bytes / min_shard_bytes), std::max<int64_t>(rows, 1)});
    for (int64_t k = 0; k < parts; ++k) {
      ShardSpec s;
      s.id = static_cast<int>(out.size());
      s.param = p;
      s.row_begin = rows * k / parts;
      s.row_end = rows * (k + 1) / parts;
      s.offset = s.row_begin * row_elems;
      s.elements = (s.row_end - s.row_begin) * row_elems;
      s.task = next_task;
      next_task = (next_task + 1) % ps_tasks;
      out.push_back(s);
    }
  }
  return out;
}

}  // namespace lockstep::trainer::ps
