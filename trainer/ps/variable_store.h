#pragma once
// The plain shard store of one parameter-server task: values and optimizer state per shard, a
// version (updates applied), and the optimizer run here. gRPC-free, so it is tested directly;
// ps_service.h puts it on the network.
//
// Asynchronous mode: every Push is applied at once (the optimizer's learning rate follows the
// store's version) and counts as one update.
// Synchronous mode: gradients computed from the current version accumulate until
// `replicas_to_aggregate` pushes arrived; their average is applied once and the version moves
// on. A push computed from an older version is stale and dropped, so with N+b workers each step
// uses the first N gradients (b backup workers). Pull(min_version) waits for the next version.
// Thread-safety: thread-safe.

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "trainer/optim/optimizer.h"

namespace lockstep::trainer::ps {

struct StoreConfig {
  std::string optimizer = "adam";
  float learning_rate = 0.001f;
  float momentum = 0.9f;
  std::string lr_schedule = "constant";
  std::string keras_optimizer;  // TrainerConfig::keras_optimizer
  int64_t total_steps = 0;
  bool sync = false;
  int replicas_to_aggregate = 1;
};

struct PushResult {
  int64_t version = 0;
  bool dropped = false;
};

class VariableStore {
 public:
  // The first Init creates the shards and returns false for `already`; later ones change
  // nothing. `state` may be empty (fresh optimizer state) or hold each shard's state tensors
  // concatenated.
  absl::StatusOr<bool> Init(const std::map<int, std::vector<float>>& values,
                            const std::map<int, std::vector<float>>& state, StoreConfig config,
                            int64_t version);
  // Values of `ids` once the version is at least `min_version` (or training is over), up to
  // `timeout`; FailedPrecondition before Init, NotFound for an unknown shard.
  absl::StatusOr<std::map<int, std::vector<float>>> Pull(const std::vector<int>& ids,
                                                         int64_t min_version,
                                                         absl::Duration timeout, int64_t* version);
  absl::StatusOr<PushResult> Push(const std::map<int, std::vector<float>>& grads, int64_t version);
  // Values and optimizer state of every shard, and the version.
  absl::Status Save(std::map<int, std::vector<float>>* values,
                    std::map<int, std::vector<float>>* state, int64_t* version);
  int64_t version() const;
  // Wakes waiting pulls (shutdown).
  void Close();

 private:
  struct Shard {
    Tensor value;
    Tensor grad_sum;
    std::unique_ptr<Optimizer> opt;
  };
  void ApplyLocked(const std::map<int, std::vector<float>>& grads, float scale);

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool initialized_ = false;
  bool closed_ = false;
  StoreConfig config_;
  std::optional<LearningRate> rate_;
  int64_t version_ = 0;
  std::map<int, Shard> shards_;
  int pending_ = 0;  // sync mode: pushes accumulated for the current version
};

}  // namespace lockstep::trainer::ps
