#include "trainer/strategy/multi_worker.h"

#include <future>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "trainer/comm/coordination.h"
#include "trainer/comm/nccl.h"
#include "trainer/comm/peer_lost.h"
#include "trainer/comm/ring.h"
#include "trainer/kernels/cpu/threads.h"
#include "trainer/strategy/collective_choice.h"
#include "trainer/strategy/session.h"
#include "trainer/strategy/training_group.h"

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

// "chief 0, worker 2": the TF_CONFIG tasks of `ranks`.
std::string RankTasks(const TfConfig& tf, const std::vector<int>& ranks) {
  std::string out;
  for (int t : ranks) absl::StrAppend(&out, out.empty() ? "" : ", ", RankTask(tf, t));
  return out;
}

// Where the replica runs and which collective backend connects the group: chosen before any
// connection, so a configuration no candidate serves is BadConfig, found without waiting for
// peers. Kept behind a pointer: `choice.chosen` points into `candidates`.
struct Backend {
  Placement place;
  std::vector<CollectiveCandidate> candidates;
  CollectiveChoice choice;
};

absl::StatusOr<std::unique_ptr<Backend>> ChooseBackend(const TrainerConfig& c) {
  auto b = std::make_unique<Backend>();
  absl::StatusOr<Placement> place = PlaceReplicas(c);
  if (!place.ok()) return place.status();
  b->place = *place;
  b->candidates = MultiWorkerCollectives(comm::NcclBuilt());
  absl::StatusOr<CollectiveChoice> choice = ChooseCollective(b->candidates, c.collective, *place);
  if (!choice.ok()) return choice.status();
  b->choice = *choice;
  return b;
}

// This task's coordination server, and the task hosting the service.
struct Coordination {
  std::unique_ptr<comm::CoordinationServer> server;  // null: another task hosts, for good
  int host = 0;
};

// Where the group re-forms in place, every task listens on its TF_CONFIG address as a standby
// (the service moves to the lowest surviving task when its host is lost). A starting process
// first asks the others: it joins a running group's host (it replaces a lost member; the
// group may be waiting for it), waits while members of a running group answer that nobody
// hosts yet (they are moving the service), and otherwise the first task hosts a new group.
// Elsewhere the first task alone serves.
absl::StatusOr<Coordination> StartCoordination(const TrainerConfig& c, const World& world, int port,
                                               absl::Duration setup,
                                               const std::atomic<bool>* stop) {
  const bool elastic = c.elastic_max_workers > 0;
  const bool moves = c.recover_in_place || elastic;
  const int task_id = world.rank;
  Coordination out;
  if (!moves && task_id != 0) return out;
  const int chiefs = static_cast<int>(c.tf_config->Hosts("chief").size());
  auto s = comm::CoordinationServer::Start(
      c.bind_address, port,
      {.world_size = static_cast<int>(world.addresses.size()),
       .token = c.job_token,
       .peer_timeout = absl::Seconds(c.peer_timeout_seconds),
       .recover_in_place = moves,
       .max_world_size = elastic ? chiefs + c.elastic_max_workers : 0,
       .global_batch = elastic ? c.batch_size : 0,
       .standby = moves,
       .task_id = task_id,
       .attempt = c.attempt});
  if (!s.ok()) return absl::UnavailableError(s.status().message());
  out.server = std::move(*s);
  if (!moves) return out;
  common::Clock& clock = common::SystemClock();
  const absl::Time deadline = clock.Monotonic() + setup;
  for (;;) {
    // Every other task at once (one that does not answer costs its deadline).
    std::vector<std::future<absl::StatusOr<comm::ProbeAnswer>>> probes;
    for (const std::string& address : world.addresses) {
      probes.push_back(std::async(std::launch::async, [&c, address] {
        return comm::ProbeCoordination(address, c.job_token, absl::Milliseconds(500));
      }));
    }
    std::string survivors;
    for (int t = 0; t < static_cast<int>(world.addresses.size()); ++t) {
      absl::StatusOr<comm::ProbeAnswer> p = probes[static_cast<size_t>(t)].get();
      if (t == task_id || !p.ok() || p->attempt != c.attempt) continue;
      if (p->hosting) {
        out.host = t;
        return out;
      }
      if (p->in_group) absl::StrAppend(&survivors, survivors.empty() ? "" : ", ", t);
    }
    if (survivors.empty()) {
      if (task_id == 0) out.server->Activate();
      return out;
    }
    if (stop->load() || clock.Monotonic() >= deadline) {
      return comm::PeerLostError(
          absl::StrCat("tasks ", survivors,
                       " of a running group answer, but none hosts the coordination "
                       "service after ",
                       absl::FormatDuration(setup)));
    }
    clock.SleepFor(absl::Milliseconds(100));
  }
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
  const double began = MonotonicSeconds();
  const int task_id = world->rank;  // the TF_CONFIG position; the rank is the epoch's
  const bool elastic = c.elastic_max_workers > 0;
  if (n == 1 && !elastic) return RunOneDevice(c, progress, stop);
  cpu::SetCpuThreads(c.threads);
  const std::string task = absl::StrCat(c.tf_config->task_type, " ", c.tf_config->task_index);
  absl::StatusOr<std::pair<std::string, int>> self = comm::SplitHostPort(world->addresses[task_id]);
  if (!self.ok()) return self.status();

  // 1. The data: an elastic group shards every global batch by record (a membership change
  //    would move files between workers mid-epoch); a fixed one shards the files.
  absl::StatusOr<Datasets> data =
      LoadDatasets(c, elastic ? FileShard{} : FileShard{.index = task_id, .count = n});
  if (!data.ok()) return data.status();
  if (progress != nullptr)
    progress->SetCorruptData(data->corrupt_records_skipped, data->corrupt_bytes_unreadable);

  // 2. The device and the collective backend.
  absl::StatusOr<std::unique_ptr<Backend>> backend = ChooseBackend(c);
  if (!backend.ok()) return backend.status();
  Backend& b = **backend;

  // 3. The first task hosts the coordination service (or a running group's host does: this
  //    process replaces a lost member); every task joins it and connects the first epoch's
  //    collective. Tasks start at different times (scheduling, image pulls): setup waits ten
  //    peer timeouts.
  const absl::Duration setup = absl::Seconds(c.peer_timeout_seconds * 10);
  absl::StatusOr<Coordination> service = StartCoordination(c, *world, self->second, setup, stop);
  if (!service.ok()) return service.status();
  const int host = service->host;
  comm::CoordinationClient coord(world->addresses[static_cast<size_t>(host)], c.job_token, task_id,
                                 n, task, nullptr, c.attempt);
  CollectiveSetup how{.self_host = self->first,
                      .bind_address = c.bind_address,
                      .token = c.job_token,
                      .coord = &coord,
                      .setup_timeout = setup,
                      .collective_timeout = absl::Seconds(c.collective_timeout_seconds)};
  auto setup_for = [how](int rank, int size, absl::Duration timeout) {
    CollectiveSetup s = how;
    s.rank = rank;
    s.world_size = size;
    s.setup_timeout = timeout;
    return s;
  };
  TrainingGroup group(
      {.task = task,
       .elastic = elastic,
       .regroups = c.recover_in_place || elastic,
       .setup_timeout = setup,
       .peer_timeout = absl::Seconds(c.peer_timeout_seconds),
       .rejoin_timeout = absl::Seconds(c.rejoin_timeout_seconds),
       .task_name = [&](int t) { return RankTask(*c.tf_config, t); },
       .candidates = c.recover_in_place || elastic ? world->addresses : std::vector<std::string>{},
       .task_id = task_id,
       .host = host,
       .server = service->server.get(),
       .stop_alone_window = absl::Milliseconds(c.leave_window_ms)},
      &coord,
      [&](int rank, int size, absl::Duration timeout) {
        return b.choice.chosen->connect(setup_for(rank, size, timeout));
      },
      stop);
  // The first connection may fall back to the next candidate (--collective auto).
  absl::StatusOr<comm::Membership> joined =
      group.Form([&](int rank, int size, absl::Duration timeout) {
        return ConnectChosen(b.candidates, c.collective, b.place, setup_for(rank, size, timeout),
                             &b.choice);
      });
  if (!joined.ok()) return joined.status();
  common::LogInfo(
      "collective", "MultiWorkerMirrored rank ", joined->rank, " of ", joined->size(), " (", task,
      "); collectives: ", b.choice.Describe(), b.place.gpu ? "" : " (CPU tensors)",
      elastic ? absl::StrCat("; elastic up to ", c.elastic_max_workers, " workers") : "",
      joined->epoch > 0 ? absl::StrCat("; joined the running group in epoch ", joined->epoch) : "");

  // 4. The replica trains over the group's collective, regrouping in place when allowed.
  Replica r{.comm = group.collective(),
            .placement = b.place,
            .collective_timeout = absl::Seconds(c.collective_timeout_seconds),
            .stop_requested = [&] { return group.StopRequested(); },
            // Every rank tracks the group's progress (the trailer's loss and accuracy are the
            // group's): each serves /progress and /metrics, and the chief's is polled.
            .progress = progress,
            .evaluate = task_id == 0,
            .replacement = joined->epoch > 0
                               ? std::optional<Regrouped>(Regrouped{
                                     .epoch = joined->epoch,
                                     .replaced = RankTasks(*c.tf_config, joined->replaced),
                                     .cause = joined->why,
                                     .since = began})
                               : std::nullopt};
  if (c.recover_in_place || elastic) {
    r.regroup = [&](const absl::Status& why) { return group.Regroup(why); };
  }
  // A planned change (a member joins or leaves, or one stopped alone is replaced) is due at
  // a step boundary.
  if (c.recover_in_place || elastic) {
    r.regroup_due = [&] { return group.RegroupDue(); };
    r.stopped_the_group = [&] { return group.StoppedTheGroup(); };
  }
  absl::StatusOr<TrainResult> result = group.Finish(RunReplica(c, *data, r));
  if (!result.ok()) return result.status();
  // 5. The coordination service stays up until every rank is done with it.
  (void)coord.Barrier("finished", absl::Seconds(60));
  return result;
}

}  // namespace lockstep::trainer
