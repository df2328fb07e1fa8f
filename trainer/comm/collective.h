#pragma once
// Collectives: the backend interface the strategies reduce gradients and share weights through.
//
// THE CONTRACT: every rank of a group issues the same collectives, in the same order, with the
// same element counts (and the same root). A backend matches operations by their position in
// that sequence, never by name, so a rank that skips or reorders one deadlocks or corrupts the
// group. Strategies keep the order fixed by construction (buckets are computed from the model's
// shapes alone, identically on every rank).
//
// Operations are asynchronous: each returns a Work handle at once and runs on the backend's own
// thread, in issue order, so a caller can go on computing (the next gradients) while earlier
// ones travel. The buffers must stay valid and untouched until the Work is done.
//
// Results are identical on every rank, bit for bit: each element is reduced once, in rank
// order, and the result copied to all.
//
// Failure: an operation that cannot complete (a peer closed its connection, a peer stopped
// answering for longer than the timeout, Abort was called) fails with Unavailable or
// DeadlineExceeded; the backend is then aborted, and every pending and later operation fails
// with the same status, as an NCCL communicator does after an error. Nothing ever blocks
// forever: every wait inside a backend is bounded by its timeout.
//
// Thread-safety: Collective methods may be called from any one thread at a time; Work handles
// from any thread.

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace lockstep::trainer::comm {

// The handle of one issued operation.
class Work {
 public:
  // Blocks until the operation finished or `timeout` passed. A timeout aborts the backend
  // (the operation cannot be taken back from its peers) and returns DeadlineExceeded.
  absl::Status Wait(absl::Duration timeout = absl::InfiniteDuration());
  bool Done() const;

  // For backends.
  explicit Work(std::string what, std::function<void(absl::Status)> abort)
      : what_(std::move(what)), abort_(std::move(abort)) {}
  void Complete(absl::Status status);
  const std::string& what() const { return what_; }

 private:
  const std::string what_;
  const std::function<void(absl::Status)> abort_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::optional<absl::Status> status_;
};
using WorkPtr = std::shared_ptr<Work>;

// How `n` elements split into `parts` chunks: chunk i is [begin, end); the first n % parts
// chunks have one element more. Every backend and ReduceScatter use this split.
struct Range {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
};
Range ChunkRange(int64_t n, int parts, int i);

class Collective {
 public:
  virtual ~Collective() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string name() const = 0;  // "ring", "in-process", "nccl"
  // True when operations take device (GPU) buffers as well as host ones (NCCL); false when
  // every buffer must be in host memory.
  virtual bool device_buffers() const { return false; }

  // data[i] = sum over ranks of data[i], in place.
  virtual WorkPtr AllReduce(float* data, int64_t n) = 0;
  // data = root's data.
  virtual WorkPtr Broadcast(float* data, int64_t n, int root) = 0;
  // out (n * size elements) = the `in` of rank 0, then rank 1, ...
  virtual WorkPtr AllGather(const float* in, int64_t n, float* out) = 0;
  // out (ChunkRange(n, size, rank).size() elements) = this rank's chunk of the sum of `in`.
  virtual WorkPtr ReduceScatter(const float* in, int64_t n, float* out) = 0;
  // Completes when every rank has issued it.
  virtual WorkPtr Barrier() = 0;

  // Fails every pending and later operation with `why` and wakes blocked waits. Idempotent;
  // the first status wins.
  virtual void Abort(absl::Status why) = 0;
};

// The serial executor the backends share: operations queue up and run one at a time on one
// thread, in issue order; after the first failure the backend is aborted and everything else
// fails at once.
class QueuedCollective : public Collective {
 public:
  ~QueuedCollective() override;

  WorkPtr AllReduce(float* data, int64_t n) override;
  WorkPtr Broadcast(float* data, int64_t n, int root) override;
  WorkPtr AllGather(const float* in, int64_t n, float* out) override;
  WorkPtr ReduceScatter(const float* in, int64_t n, float* out) override;
  WorkPtr Barrier() override;
  void Abort(absl::Status why) override;

  // The status the backend was aborted with (OK while it works).
  absl::Status aborted() const;

 protected:
  QueuedCollective() = default;
  // Starts the executor thread; derived constructors call it last.
  void StartExecutor();
  // Stops the executor (failing what is queued); derived destructors call it first.
  void StopExecutor();

  // Run on the executor thread, one at a time.
  virtual absl::Status RunAllReduce(float* data, int64_t n) = 0;
  virtual absl::Status RunBroadcast(float* data, int64_t n, int root) = 0;
  virtual absl::Status RunAllGather(const float* in, int64_t n, float* out) = 0;
  virtual absl::Status RunReduceScatter(const float* in, int64_t n, float* out) = 0;
  virtual absl::Status RunBarrier() = 0;
  // Wakes the executor out of whatever it waits on (called by Abort after the status is set).
  virtual void Interrupt() = 0;

 private:
  WorkPtr Enqueue(std::string what, std::function<absl::Status()> run);
  void Loop();

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<WorkPtr, std::function<absl::Status()>>> queue_;
  absl::Status aborted_;
  bool stopping_ = false;
  int64_t issued_ = 0;
  std::thread thread_;
};

}  // namespace lockstep::trainer::comm
