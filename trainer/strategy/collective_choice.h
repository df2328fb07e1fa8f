#pragma once
// How MultiWorkerMirrored picks its collective backend (house style rule 8): an ordered list of
// candidates, each saying whether it can serve replicas placed so (`enabled`: OK, or a status
// whose message says why not) and how one rank connects (`connect`). --collective auto takes
// the first enabled candidate; an explicit name takes that candidate alone, and is a BadConfig
// (InvalidArgument) when it is not enabled, never a silent fallback. The choice says what was
// skipped and why, so the caller logs the reasons with the choice.
// Every rank runs the same binary with the same flags and placement rules, so every rank
// chooses the same backend; the choice itself does no I/O and is tested as a table.
// Thread-safety: candidates are immutable values; `connect` runs on the caller's thread.

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "trainer/comm/collective.h"
#include "trainer/comm/coordination.h"
#include "trainer/config/trainer_config.h"
#include "trainer/strategy/engine.h"

namespace lockstep::trainer {

// What a candidate needs to connect one rank of the group.
struct CollectiveSetup {
  int rank = 0;
  int world_size = 1;
  std::string self_host;                      // this rank's TF_CONFIG host, which its peers dial
  std::string bind_address;                   // where this rank listens
  std::string token;                          // the job token, presented to and required of peers
  comm::CoordinationClient* coord = nullptr;  // joined; its key-value store is the rendezvous
  absl::Duration setup_timeout = absl::Minutes(5);
  absl::Duration collective_timeout = absl::Minutes(5);
};

struct CollectiveCandidate {
  CollectiveBackend backend = CollectiveBackend::kRing;
  std::string description;  // for the log: "ring all-reduce over TCP"
  std::function<absl::Status(const Placement&)> enabled;
  std::function<absl::StatusOr<std::unique_ptr<comm::Collective>>(const CollectiveSetup&)> connect;
};

// The candidates in order of preference: NCCL (GPU replicas, when the build has it), then the
// TCP ring (always). `nccl_built` is comm::NcclBuilt() outside tests.
std::vector<CollectiveCandidate> MultiWorkerCollectives(bool nccl_built);

struct CollectiveChoice {
  const CollectiveCandidate* chosen = nullptr;  // points into the candidates list
  std::vector<std::string> skipped;             // "nccl: the replicas run on the CPU"
  // "ring (ring all-reduce over TCP); skipped nccl: the replicas run on the CPU"
  std::string Describe() const;
};

// InvalidArgument when `requested` names a candidate that is not enabled or not in the list,
// or when no candidate is enabled.
absl::StatusOr<CollectiveChoice> ChooseCollective(
    const std::vector<CollectiveCandidate>& candidates, CollectiveBackend requested,
    const Placement& placement);

// Connects this rank through `choice->chosen`. A candidate can find only at connection time,
// from the whole group, that it cannot serve it: it then fails with InvalidArgument (NCCL
// when two ranks share a GPU). Under --collective auto (`requested` kAuto) the next enabled
// candidate takes its place, and `choice` records the change; every rank sees the same
// group, so every rank moves alike. With the backend named, the InvalidArgument is returned
// (BadConfig: no retry can help).
absl::StatusOr<std::unique_ptr<comm::Collective>> ConnectChosen(
    const std::vector<CollectiveCandidate>& candidates, CollectiveBackend requested,
    const Placement& placement, const CollectiveSetup& setup, CollectiveChoice* choice);

// NCCL takes one GPU per rank: ranks that share one (two processes on a node's only GPU,
// time-slicing, MPS) fail inside ncclCommInitRank, again on every retry. `gpus[r]` is rank r's
// GPU UUID (empty: unknown, not compared). InvalidArgument naming the first two ranks that share
// a GPU, and the GPU; OK when all differ.
absl::Status OneGpuPerRank(const std::vector<std::string>& gpus);

}  // namespace lockstep::trainer
