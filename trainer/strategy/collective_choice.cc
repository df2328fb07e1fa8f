#include "trainer/strategy/collective_choice.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "trainer/comm/nccl.h"
#include "trainer/comm/peer_lost.h"
#include "trainer/comm/ring.h"
#include "trainer/kernels/cuda/gpu_available.h"
#include "trainer/strategy/session.h"

namespace lockstep::trainer {
namespace {

// A rendezvous that fails means a peer (or the coordinator) is gone: retryable, as PeerLost
// (session.h).

absl::StatusOr<std::unique_ptr<comm::Collective>> ConnectNcclRank(const CollectiveSetup& s) {
  // Each process trains on its first visible GPU. Every rank publishes that GPU's UUID and
  // checks the group's before NCCL starts: ranks that share a GPU are a configuration NCCL
  // cannot serve, found at once rather than as a failed (and retried) communicator.
  if (absl::Status st = s.coord->Set(absl::StrCat("nccl/gpu/", s.rank), cuda::GpuUuid(0));
      !st.ok()) {
    return comm::AsPeerLost(st);
  }
  std::vector<std::string> gpus;
  for (int r = 0; r < s.world_size; ++r) {
    absl::StatusOr<std::string> g = s.coord->Get(absl::StrCat("nccl/gpu/", r), s.setup_timeout);
    if (!g.ok()) return comm::AsPeerLost(g.status());
    gpus.push_back(*g);
  }
  if (absl::Status st = OneGpuPerRank(gpus); !st.ok()) return st;
  // The NCCL unique id travels through the coordination service.
  absl::StatusOr<std::unique_ptr<comm::Collective>> c = comm::ConnectNccl(
      s.rank, s.world_size, 0, [&](const std::string& id) { return s.coord->Set("nccl/id", id); },
      [&] { return s.coord->Get("nccl/id", s.setup_timeout); }, s.setup_timeout);
  if (!c.ok()) return comm::AsPeerLost(c.status());
  return c;
}

absl::StatusOr<std::unique_ptr<comm::Collective>> ConnectRingRank(const CollectiveSetup& s) {
  // Every rank listens on a free port and publishes "<TF_CONFIG host>:<port>" under
  // ring/<rank>, then reads everybody's.
  auto listener = comm::RingListener::Bind(s.bind_address, 0);
  if (!listener.ok()) return listener.status();
  if (absl::Status st = s.coord->Set(absl::StrCat("ring/", s.rank),
                                     absl::StrCat(s.self_host, ":", (*listener)->port()));
      !st.ok()) {
    return comm::AsPeerLost(st);
  }
  comm::RingOptions ro;
  ro.rank = s.rank;
  ro.token = s.token;
  ro.listener = std::move(*listener);
  ro.connect_timeout = s.setup_timeout;
  ro.timeout = s.collective_timeout;
  for (int r = 0; r < s.world_size; ++r) {
    absl::StatusOr<std::string> a = s.coord->Get(absl::StrCat("ring/", r), s.setup_timeout);
    if (!a.ok()) return comm::AsPeerLost(a.status());
    ro.addresses.push_back(*a);
  }
  absl::StatusOr<std::unique_ptr<comm::Collective>> ring = comm::ConnectRing(std::move(ro));
  if (!ring.ok()) return comm::AsPeerLost(ring.status());
  return ring;
}

}  // namespace

std::vector<CollectiveCandidate> MultiWorkerCollectives(bool nccl_built) {
  std::vector<CollectiveCandidate> out;
  out.push_back({.backend = CollectiveBackend::kNccl,
                 .description = "NCCL (GPU replicas)",
                 .enabled = [nccl_built](const Placement& p) -> absl::Status {
                   if (!p.gpu) return absl::FailedPreconditionError("the replicas run on the CPU");
                   if (!nccl_built) return absl::FailedPreconditionError("this build has no NCCL");
                   return absl::OkStatus();
                 },
                 .connect = ConnectNcclRank});
  out.push_back({.backend = CollectiveBackend::kRing,
                 .description = "ring all-reduce over TCP",
                 .enabled = [](const Placement&) { return absl::OkStatus(); },
                 .connect = ConnectRingRank});
  return out;
}

std::string CollectiveChoice::Describe() const {
  std::string out = chosen == nullptr ? "none"
                                      : absl::StrCat(CollectiveBackendName(chosen->backend), " (",
                                                     chosen->description, ")");
  for (size_t i = 0; i < skipped.size(); ++i) {
    absl::StrAppend(&out, i == 0 ? "; skipped " : ", ", skipped[i]);
  }
  return out;
}

absl::Status OneGpuPerRank(const std::vector<std::string>& gpus) {
  std::map<std::string, int> first_rank;
  for (int r = 0; r < static_cast<int>(gpus.size()); ++r) {
    if (gpus[r].empty()) continue;
    auto [it, fresh] = first_rank.emplace(gpus[r], r);
    if (!fresh) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ranks ", it->second, " and ", r, " share GPU ", gpus[r],
          ": NCCL takes one GPU per rank (give each replica its own GPU, or use --collective "
          "ring or auto)"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<comm::Collective>> ConnectChosen(
    const std::vector<CollectiveCandidate>& candidates, CollectiveBackend requested,
    const Placement& placement, const CollectiveSetup& setup, CollectiveChoice* choice) {
  for (;;) {
    absl::StatusOr<std::unique_ptr<comm::Collective>> c = choice->chosen->connect(setup);
    if (c.ok() || requested != CollectiveBackend::kAuto || !absl::IsInvalidArgument(c.status())) {
      return c;
    }
    // The next enabled candidate after the one that cannot serve this group.
    auto refused = std::find_if(candidates.begin(), candidates.end(),
                                [&](const CollectiveCandidate& k) { return &k == choice->chosen; });
    choice->skipped.push_back(
        absl::StrCat(CollectiveBackendName(choice->chosen->backend), ": ", c.status().message()));
    if (refused != candidates.end()) ++refused;
    auto next = std::find_if(refused, candidates.end(), [&](const CollectiveCandidate& k) {
      return k.enabled(placement).ok();
    });
    choice->chosen = next == candidates.end() ? nullptr : &*next;
    if (choice->chosen == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("no collective backend can serve these replicas: ", choice->Describe()));
    }
  }
}

absl::StatusOr<CollectiveChoice> ChooseCollective(
    const std::vector<CollectiveCandidate>& candidates, CollectiveBackend requested,
    const Placement& placement) {
  CollectiveChoice choice;
  const bool automatic = requested == CollectiveBackend::kAuto;
  for (const CollectiveCandidate& c : candidates) {
    if (!automatic && c.backend != requested) continue;
    const absl::Status enabled = c.enabled(placement);
    if (enabled.ok()) {
      choice.chosen = &c;
      return choice;
    }
    if (!automatic) {
      return absl::InvalidArgumentError(
          absl::StrCat("--collective ", CollectiveBackendName(requested), ": ", enabled.message()));
    }
    choice.skipped.push_back(
        absl::StrCat(CollectiveBackendName(c.backend), ": ", enabled.message()));
  }
  if (!automatic) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--collective ", CollectiveBackendName(requested), ": this build offers no such backend"));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("no collective backend can serve these replicas: ", choice.Describe()));
}

}  // namespace lockstep::trainer
