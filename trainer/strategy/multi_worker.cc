#include "trainer/strategy/multi_worker.h"

#include <mutex>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "trainer/comm/coordination.h"
#include "trainer/comm/nccl.h"
#include "trainer/comm/ring.h"
#include "trainer/kernels/cpu/threads.h"
#include "trainer/strategy/collective_choice.h"
#include "trainer/strategy/session.h"

namespace lockstep::trainer {

absl::StatusOr<World> TrainingWorld(const TfConfig& tf) {
  World w;
  for (const std::string& h : tf.Hosts("chief")) w.addresses.push_back(h);
  const int chiefs = static_cast<int>(w.addresses.size());
  for (const std::string& h : tf.Hosts("worker")) w.addresses.push_back(h);
  if (tf.task_type == "chief") {
    w.rank = tf.task_index;
  } else if (tf.task_type == "worker") {
    w.rank = chiefs + tf.task_index;
  } else {
    return absl::InvalidArgumentError("TF_CONFIG: task type \"" + tf.task_type +
                                      "\" takes no part in MultiWorkerMirrored training (chief "
                                      "and worker tasks do)");
  }
  if (w.rank < 0 || w.rank >= static_cast<int>(w.addresses.size())) {
    return absl::InvalidArgumentError(absl::StrCat("TF_CONFIG: task ", tf.task_type, " ",
                                                   tf.task_index, " is not in the cluster"));
  }
  return w;
}

absl::StatusOr<TrainResult> RunMultiWorkerMirrored(const TrainerConfig& c,
                                                   ProgressTracker* progress,
                                                   const std::atomic<bool>* stop) {
  if (!c.tf_config) {
    common::LogInfo("strategy", "MultiWorkerMirrored without TF_CONFIG: one worker");
    return RunOneDevice(c, progress, stop);
  }
  absl::StatusOr<World> world = TrainingWorld(*c.tf_config);
  if (!world.ok()) return world.status();
  const int n = static_cast<int>(world->addresses.size());
  const int rank = world->rank;
  if (n == 1) return RunOneDevice(c, progress, stop);
  cpu::SetCpuThreads(c.threads);
  absl::StatusOr<Datasets> data = LoadDatasets(c, {.index = rank, .count = n});
  if (!data.ok()) return data.status();
  if (progress != nullptr) progress->SetCorruptRecordsSkipped(data->corrupt_records_skipped);

  // Tasks start at different times (scheduling, image pulls): setup waits ten peer timeouts.
  const absl::Duration setup = absl::Seconds(c.peer_timeout_seconds * 10);
  const absl::Duration peer_timeout = absl::Seconds(c.peer_timeout_seconds);
  const std::string task = absl::StrCat(c.tf_config->task_type, " ", c.tf_config->task_index);
  absl::StatusOr<std::pair<std::string, int>> self = comm::SplitHostPort(world->addresses[rank]);
  if (!self.ok()) return self.status();

  // The backend is chosen before any connection: a configuration no candidate serves is
  // BadConfig, found without waiting for peers.
  absl::StatusOr<Placement> place = PlaceReplicas(c);
  if (!place.ok()) return place.status();
  const std::vector<CollectiveCandidate> candidates = MultiWorkerCollectives(comm::NcclBuilt());
  absl::StatusOr<CollectiveChoice> choice = ChooseCollective(candidates, c.collective, *place);
  if (!choice.ok()) return choice.status();

  std::unique_ptr<comm::CoordinationServer> server;
  if (rank == 0) {
    auto s = comm::CoordinationServer::Start(
        c.bind_address, self->second,
        {.world_size = n, .token = c.job_token, .peer_timeout = peer_timeout});
    if (!s.ok()) return absl::UnavailableError(s.status().message());
    server = std::move(*s);
  }
  comm::CoordinationClient coord(world->addresses[0], c.job_token, rank, n, task);
  if (absl::Status s = coord.Join(setup); !s.ok()) {
    if (absl::IsPermissionDenied(s)) return absl::PermissionDeniedError(s.message());
    return PeerLost(s);
  }
  absl::StatusOr<std::unique_ptr<comm::Collective>> ring =
      choice->chosen->connect({.rank = rank,
                               .world_size = n,
                               .self_host = self->first,
                               .bind_address = c.bind_address,
                               .token = c.job_token,
                               .coord = &coord,
                               .setup_timeout = setup,
                               .collective_timeout = absl::Seconds(c.collective_timeout_seconds)});
  if (!ring.ok()) return ring.status();
  common::LogInfo("collective", "MultiWorkerMirrored rank ", rank, " of ", n, " (", task,
                  "); collectives: ", choice->Describe(), place->gpu ? "" : " (CPU tensors)");

  std::mutex lost_mu;
  absl::Status lost;
  coord.StartHeartbeats(std::clamp(peer_timeout / 10, absl::Milliseconds(100), absl::Seconds(2)),
                        peer_timeout, [&](absl::Status s) {
                          {
                            std::lock_guard<std::mutex> lock(lost_mu);
                            lost = s;
                          }
                          (*ring)->Abort(s);
                        });
  Replica r{.comm = ring->get(),
            .placement = *place,
            .collective_timeout = absl::Seconds(c.collective_timeout_seconds),
            .stop_requested =
                [&] {
                  if (stop->load()) coord.RequestStop();
                  return stop->load() || coord.StopSeen();
                },
            .progress = rank == 0 ? progress : nullptr,
            .evaluate = rank == 0};
  absl::StatusOr<TrainResult> result = RunReplica(c, *data, r);
  if (!result.ok()) {
    std::lock_guard<std::mutex> lock(lost_mu);
    if (absl::IsAborted(result.status()) && !lost.ok()) return absl::AbortedError(lost.message());
    return result.status();
  }
  // The chief's coordination service stays up until every rank is done with it.
  (void)coord.Barrier("finished", absl::Seconds(60));
  return result;
}

}  // namespace lockstep::trainer
