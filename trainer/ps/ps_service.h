#pragma once
// The variable service on the network (trainer/proto/variables.proto): PsServer serves one
// task's VariableStore; PsClient talks to every PS task of the job. Every call carries the job
// token; the server refuses calls without it.
// Thread-safety: PsServer is thread-safe; PsClient's calls may run from one thread at a time.

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/ps/variable_store.h"

namespace lockstep::trainer::ps {

class PsServer {
 public:
  static absl::StatusOr<std::unique_ptr<PsServer>> Start(const std::string& host, int port,
                                                         std::string token);
  ~PsServer();
  int port() const;
  VariableStore& store();

  struct Impl;

 private:
  explicit PsServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

using ShardValues = std::map<int, std::vector<float>>;

class PsClient {
 public:
  PsClient(const std::vector<std::string>& addresses, std::string token);
  ~PsClient();
  int tasks() const;

  // Returns whether the task was already initialized, and at which version.
  absl::StatusOr<std::pair<bool, int64_t>> Init(int task, const ShardValues& values,
                                                const ShardValues& state, const StoreConfig& config,
                                                int64_t version);
  absl::StatusOr<ShardValues> Pull(int task, const std::vector<int>& ids, int64_t min_version,
                                   absl::Duration timeout, int64_t* version);
  absl::StatusOr<PushResult> Push(int task, const ShardValues& grads, int64_t version, int worker);
  absl::Status Save(int task, ShardValues* values, ShardValues* state, int64_t* version);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace lockstep::trainer::ps
