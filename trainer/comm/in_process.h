#pragma once
// The in-process backend: the ranks are threads of one process (Mirrored and CentralStorage
// replicas, and tests). Each operation is a rendezvous: every rank posts its buffers, then rank
// r reduces (or copies) chunk r of the result for everybody, straight between the ranks'
// buffers, and a second rendezvous ends it. No copies through a shared staging area.
// A rank that does not arrive within the timeout fails the operation for all; aborting one
// member aborts the group.
// Thread-safety: the group is shared by its members' executor threads; one member per rank.

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/comm/collective.h"

namespace lockstep::trainer::comm {

// How AllReduce combines the replicas' buffers (tf.distribute's cross-device ops):
//   kAllReduce        every rank reduces one chunk for all (NcclAllReduce's role on CPU);
//   kHierarchicalCopy the ranks split in two halves; the first rank of each half sums its
//                     half, rank 0 adds the two partial sums, and every rank copies the result;
//   kReduceToOne      rank 0 sums everything and every rank copies from it
//                     (ReductionToOneDevice; CentralStorage's reduction).
enum class ReduceAlgorithm { kAllReduce, kHierarchicalCopy, kReduceToOne };

class InProcessGroup : public std::enable_shared_from_this<InProcessGroup> {
 public:
  static std::shared_ptr<InProcessGroup> Create(
      int size, absl::Duration timeout = absl::Minutes(5),
      ReduceAlgorithm algorithm = ReduceAlgorithm::kAllReduce);
  // The collective for `rank`; each rank's member is made once.
  std::unique_ptr<Collective> Member(int rank);
  int size() const { return size_; }
  ReduceAlgorithm algorithm() const { return algorithm_; }

  // For members.
  struct Slot {
    const float* in = nullptr;
    float* out = nullptr;
    int64_t n = 0;
  };
  // Posts this rank's slot and waits until every rank has; returns every slot.
  absl::StatusOr<std::vector<Slot>> Rendezvous(int rank, Slot slot);
  void Abort(absl::Status why);

 private:
  InProcessGroup(int size, absl::Duration timeout, ReduceAlgorithm algorithm);
  const int size_;
  const ReduceAlgorithm algorithm_;
  const absl::Duration timeout_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Slot> slots_;
  std::vector<Slot> published_;  // the slots of the last completed rendezvous
  int arrived_ = 0;
  int64_t generation_ = 0;
  absl::Status aborted_;
};

}  // namespace lockstep::trainer::comm
