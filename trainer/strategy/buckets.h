#pragma once
// Gradient buckets: the gradients of a model packed into a few flat buffers and all-reduced
// while backward is still computing the earlier layers' gradients.
//
// Layout (identical on every rank: it depends only on the parameter shapes): parameters in
// reverse order (backward produces the last layer's gradients first), the first bucket closed
// once it holds `first_bytes` (1 MiB by default, so communication starts early), the others at
// `bytes` (25 MiB). A bucket is packed and its all-reduce issued as soon as every gradient in
// it is final; Finish waits for all of them and writes the averages back.
// Thread-safety: one thread (the training loop).

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "trainer/comm/collective.h"
#include "trainer/tensor/tensor.h"

namespace lockstep::trainer {

struct Bucket {
  std::vector<size_t> params;  // indices into the parameter list, in reverse order
  int64_t elements = 0;
};

std::vector<Bucket> PlanBuckets(const std::vector<int64_t>& param_sizes, int64_t first_bytes,
                                int64_t bytes);

class BucketReducer {
 public:
  // `grads` are the model's gradient tensors (Model::Grads()), which stay valid.
  BucketReducer(std::vector<Tensor*> grads, comm::Collective* comm, int64_t first_bytes = 1 << 20,
                int64_t bytes = 25 << 20);

  // Gradients [first, first + count) are final (Model::GradsReady).
  void Ready(size_t first, size_t count);
  // Issues what is left, waits for every bucket (up to `timeout` each), and replaces each
  // gradient with the average over the ranks.
  absl::Status Finish(absl::Duration timeout);

  const std::vector<Bucket>& buckets() const { return buckets_; }

 private:
  void Launch(size_t b);

  std::vector<Tensor*> grads_;
  comm::Collective* comm_;
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_;  // param -> bucket
  std::vector<size_t> pending_;    // per bucket: gradients not final yet
  std::vector<std::vector<float>> buffers_;
  std::vector<comm::WorkPtr> works_;
};

}  // namespace lockstep::trainer
