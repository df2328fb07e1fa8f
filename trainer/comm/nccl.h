#pragma once
// The NCCL backend of the collective interface (collective.h), for replicas on GPUs:
//   - operations take device buffers (asynchronous: queued on the backend's stream, the Work
//     completed from the stream when the operation is done) or host buffers (staged through
//     pinned memory and the device, completed before the call returns);
//   - communicators are non-blocking (ncclConfig blocking = 0), so no NCCL call can hang the
//     caller: every wait polls, and a watchdog thread checks ncclCommGetAsyncError and the
//     age of the oldest operation in flight every 100 ms. An error, or an operation older than
//     the collective timeout, aborts the communicator (ncclCommAbort) and fails every pending
//     and later operation with that status, as the contract requires;
//   - results are the sums NCCL computes: identical on every rank, but not bit-identical to
//     the ring's rank-order sums.
// Device buffers must be written before the operation is issued: the caller synchronises the
// stream that produced them (the GPU engine does).
// Without CUDA in the build, the constructors return Unimplemented.
// Thread-safety: as Collective.

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "trainer/comm/collective.h"

namespace lockstep::trainer::comm {

// True when this build has NCCL (it still needs a GPU to run).
bool NcclBuilt();

// One communicator per GPU 0..gpus-1 of this process (Mirrored): member i is rank i on GPU i.
absl::StatusOr<std::vector<std::unique_ptr<Collective>>> MakeLocalNcclGroup(int gpus,
                                                                            absl::Duration timeout);

// Rank `rank` of `size` processes on GPU `device` (MultiWorkerMirrored). Rank 0 creates the
// NCCL unique id and hands it to `publish` (the coordination service's key-value store); the
// others get it from `fetch`. Initialisation is bounded by `timeout`.
absl::StatusOr<std::unique_ptr<Collective>> ConnectNccl(
    int rank, int size, int device, const std::function<absl::Status(const std::string&)>& publish,
    const std::function<absl::StatusOr<std::string>()>& fetch, absl::Duration timeout);

// The unique id as text for the key-value store, and back (hex; InvalidArgument when
// malformed). Pure, so tested without a GPU.
std::string EncodeUniqueId(const std::string& bytes);
absl::StatusOr<std::string> DecodeUniqueId(const std::string& text, size_t size);

}  // namespace lockstep::trainer::comm
