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

namespace {

// "chief 0" or "worker 2": the TF_CONFIG task of a rank (TrainingWorld's order).
std::string RankTask(const TfConfig& tf, int rank) {
  const int chiefs = static_cast<int>(tf.Hosts("chief").size());
  return rank < chiefs ? absl::StrCat("chief ", rank) : absl::StrCat("worker ", rank - chiefs);
}

}  // namespace

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
  const int task_id = world->rank;  // the TF_CONFIG position; the rank is the epoch's
  const bool elastic = c.elastic_max_workers > 0;
  if (n == 1 && !elastic) return RunOneDevice(c, progress, stop);
  cpu::SetCpuThreads(c.threads);
  // An elastic group shards every global batch by record: a membership change would move
  // files between workers mid-epoch.
  absl::StatusOr<Datasets> data =
      LoadDatasets(c, elastic ? FileShard{} : FileShard{.index = task_id, .count = n});
  if (!data.ok()) return data.status();
  if (progress != nullptr) progress->SetCorruptRecordsSkipped(data->corrupt_records_skipped);

  // Tasks start at different times (scheduling, image pulls): setup waits ten peer timeouts.
  const absl::Duration setup = absl::Seconds(c.peer_timeout_seconds * 10);
  const absl::Duration peer_timeout = absl::Seconds(c.peer_timeout_seconds);
  const std::string task = absl::StrCat(c.tf_config->task_type, " ", c.tf_config->task_index);
  absl::StatusOr<std::pair<std::string, int>> self = comm::SplitHostPort(world->addresses[task_id]);
  if (!self.ok()) return self.status();

  // The backend is chosen before any connection: a configuration no candidate serves is
  // BadConfig, found without waiting for peers.
  absl::StatusOr<Placement> place = PlaceReplicas(c);
  if (!place.ok()) return place.status();
  const std::vector<CollectiveCandidate> candidates = MultiWorkerCollectives(comm::NcclBuilt());
  absl::StatusOr<CollectiveChoice> choice = ChooseCollective(candidates, c.collective, *place);
  if (!choice.ok()) return choice.status();

  std::unique_ptr<comm::CoordinationServer> server;
  const int chiefs = static_cast<int>(c.tf_config->Hosts("chief").size());
  if (task_id == 0) {
    auto s = comm::CoordinationServer::Start(
        c.bind_address, self->second,
        {.world_size = n,
         .token = c.job_token,
         .peer_timeout = peer_timeout,
         .recover_in_place = c.recover_in_place || elastic,
         .max_world_size = elastic ? chiefs + c.elastic_max_workers : 0,
         .global_batch = elastic ? c.batch_size : 0});
    if (!s.ok()) return absl::UnavailableError(s.status().message());
    server = std::move(*s);
  }
  comm::CoordinationClient coord(world->addresses[0], c.job_token, task_id, n, task);
  absl::StatusOr<comm::Membership> joined = coord.Join(setup);
  // A worker added to an elastic group waits while its admission would make a size that does
  // not divide the global batch.
  while (!joined.ok() && absl::IsResourceExhausted(joined.status()) && !stop->load()) {
    common::LogWarning("collective", task, " waits to join the group: ", joined.status().message());
    joined = coord.Join(setup);
  }
  if (!joined.ok()) {
    if (absl::IsPermissionDenied(joined.status())) {
      return absl::PermissionDeniedError(joined.status().message());
    }
    return PeerLost(joined.status());
  }
  CollectiveSetup how{.rank = joined->rank,
                      .world_size = joined->size(),
                      .self_host = self->first,
                      .bind_address = c.bind_address,
                      .token = c.job_token,
                      .coord = &coord,
                      .setup_timeout = setup,
                      .collective_timeout = absl::Seconds(c.collective_timeout_seconds)};
  absl::StatusOr<std::unique_ptr<comm::Collective>> first =
      ConnectChosen(candidates, c.collective, *place, how, &*choice);
  if (!first.ok()) return first.status();
  common::LogInfo(
      "collective", "MultiWorkerMirrored rank ", joined->rank, " of ", joined->size(), " (", task,
      "); collectives: ", choice->Describe(), place->gpu ? "" : " (CPU tensors)",
      elastic ? absl::StrCat("; elastic up to ", c.elastic_max_workers, " workers") : "",
      joined->epoch > 0 ? absl::StrCat("; joined the running group in epoch ", joined->epoch) : "");

  // The group's collective now, and the epoch it belongs to: the heartbeat thread aborts it
  // when the group is lost or moves on to a newer epoch.
  struct Current {
    std::mutex mu;
    std::unique_ptr<comm::Collective> comm;
    int64_t epoch = 0;
    absl::Status lost;  // the group is lost for good (the coordinator is gone)
  } cur;
  cur.comm = std::move(*first);
  cur.epoch = joined->epoch;
  // A planned membership change is due (a worker joins or leaves an elastic group): every
  // member finishes its step and regroups at the same step boundary.
  std::atomic<bool> change_due{false};
  // This worker was asked to stop (SIGTERM) in an elastic group: it leaves at the next step
  // boundary and the others go on. The task hosting the coordinator stops the group instead.
  std::atomic<bool> leaving{false};
  coord.StartHeartbeats(
      std::clamp(peer_timeout / 10, absl::Milliseconds(100), absl::Seconds(2)), peer_timeout,
      [&](absl::Status s) {
        std::lock_guard<std::mutex> lock(cur.mu);
        cur.lost = s;
        cur.comm->Abort(s);
      },
      [&](int64_t epoch, const std::string& why, bool planned) {
        std::lock_guard<std::mutex> lock(cur.mu);
        if (cur.epoch >= epoch) return;
        if (planned) {
          change_due = true;
        } else {
          cur.comm->Abort(absl::UnavailableError("the group is re-forming: " + why));
        }
      });
  auto stop_requested = [&] {
    if (stop->load() && elastic && task_id != 0) {
      leaving = true;
      return coord.StopSeen();
    }
    if (stop->load()) coord.RequestStop();
    return stop->load() || coord.StopSeen();
  };

  // In place: rejoin the coordination service for the next epoch and connect its collective,
  // again until it holds or --rejoin-timeout passes.
  const absl::Time never = absl::InfiniteFuture();
  absl::Time regroup_deadline = never;
  auto regroup = [&](const absl::Status& why) -> absl::StatusOr<Regrouped> {
    if (regroup_deadline == never) {
      regroup_deadline = absl::Now() + absl::Seconds(c.rejoin_timeout_seconds);
    }
    absl::Status last = why;
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(cur.mu);
        if (!cur.lost.ok()) return absl::AbortedError(cur.lost.message());
      }
      if (stop_requested()) {
        return absl::CancelledError("stopped by SIGTERM while the group was re-forming");
      }
      if (leaving) {
        if (absl::Status s = coord.Leave(); !s.ok()) {
          common::LogWarning("collective", task,
                             " could not tell the group it leaves: ", s.message());
        }
        return absl::CancelledError(
            absl::StrCat(task,
                         " left the group at a step boundary (stopped by SIGTERM; the "
                         "other members go on without it)"));
      }
      const absl::Duration left = regroup_deadline - absl::Now();
      if (left <= absl::ZeroDuration()) {
        return PeerLost(absl::DeadlineExceededError(absl::StrCat(
            "the group did not re-form within --rejoin-timeout=", c.rejoin_timeout_seconds,
            "s; last: ", last.message())));
      }
      // An OK `why`: a planned change at a step boundary (elastic), not a failure.
      absl::StatusOr<comm::Membership> m =
          coord.Join(std::min(left, absl::Seconds(5)), /*planned=*/why.ok());
      if (!m.ok()) {
        if (absl::IsPermissionDenied(m.status()) || absl::IsFailedPrecondition(m.status())) {
          return absl::AbortedError(m.status().message());  // taken over: this process ends
        }
        last = m.status();
        common::LogInfo("collective", "joining the group again: ", last.message());
        continue;
      }
      if (leaving) continue;  // asked to go while joining: leave (above) rather than connect
      change_due = false;
      CollectiveSetup again = how;
      again.rank = m->rank;
      again.world_size = m->size();
      again.setup_timeout = std::min(left, peer_timeout);
      absl::StatusOr<std::unique_ptr<comm::Collective>> next = choice->chosen->connect(again);
      if (!next.ok()) {
        last = next.status();
        common::LogInfo("collective", "connecting the group of epoch ", m->epoch,
                        " failed; joining again: ", last.message());
        continue;
      }
      std::string replaced;
      for (int r : m->replaced) {
        absl::StrAppend(&replaced, replaced.empty() ? "" : ", ", RankTask(*c.tf_config, r));
      }
      std::unique_ptr<comm::Collective> old;
      {
        std::lock_guard<std::mutex> lock(cur.mu);
        old = std::move(cur.comm);
        cur.comm = std::move(*next);
        cur.epoch = m->epoch;
      }
      regroup_deadline = never;
      return Regrouped{
          .comm = cur.comm.get(), .epoch = m->epoch, .replaced = replaced, .cause = m->why};
    }
  };

  Replica r{.comm = cur.comm.get(),
            .placement = *place,
            .collective_timeout = absl::Seconds(c.collective_timeout_seconds),
            .stop_requested = stop_requested,
            .progress = task_id == 0 ? progress : nullptr,
            .evaluate = task_id == 0,
            .replacement = joined->epoch > 0};
  if (c.recover_in_place || elastic) r.regroup = regroup;
  if (elastic) r.regroup_due = [&] { return change_due.load() || leaving.load(); };
  absl::StatusOr<TrainResult> result = RunReplica(c, *data, r);
  if (!result.ok()) {
    std::lock_guard<std::mutex> lock(cur.mu);
    if (absl::IsAborted(result.status()) && !cur.lost.ok()) {
      return absl::AbortedError(cur.lost.message());
    }
    return result.status();
  }
  // The chief's coordination service stays up until every rank is done with it.
  (void)coord.Barrier("finished", absl::Seconds(60));
  return result;
}

}  // namespace lockstep::trainer
