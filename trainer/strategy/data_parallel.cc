#include "trainer/strategy/data_parallel.h"

#include <array>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/log.h"
#include "trainer/comm/in_process.h"
#include "trainer/comm/nccl.h"
#include "trainer/comm/peer_lost.h"
#include "trainer/data/batcher.h"
#include "trainer/kernels/cpu/threads.h"
#include "trainer/strategy/initial_state.h"
#include "trainer/strategy/updater.h"
#include "trainer/summary/training_summaries.h"

namespace lockstep::trainer {
namespace {

// What one replica trains with, fixed for the run.
struct Run {
  const TrainerConfig& c;
  const Replica& r;
  Engine& engine;
  Updater& updater;
  comm::Collective* comm = nullptr;  // r.comm, or the group's after a regroup
  int rank = 0;
  int size = 1;
  // The chief's TensorBoard runs (null elsewhere, or without --tensorboard-dir), and the data
  // each epoch is evaluated on for them.
  TrainingSummaries* summaries = nullptr;
  const Dataset* validation = nullptr;
  bool chief() const { return rank == 0; }
  // A recovery whose first step has not completed yet (the chief records it then).
  std::optional<RecoveryRecord> recovering;
  double recovering_since = 0;  // monotonic seconds when the failure was seen
  // A run resumed from a checkpoint (a group restart) says when its first step completes.
  std::optional<int64_t> resumed_from;
  // RunSteps stopped at a step boundary for a planned membership change.
  bool membership_change = false;
};

// The step trailer every replica all-reduces (so each slot is a sum over replicas): a stop
// request on any replica ends every replica at the same step, a planned membership change
// regroups every replica after the same step, and the chief reports the global batch's loss
// and accuracy (NaN when no prediction is judged: a regression).
enum TrailerSlot { kStop, kRegroup, kLossSum, kCorrect, kJudged, kSamples, kTrailerSlots };
using Trailer = std::array<float, kTrailerSlots>;

// The chief's checkpoint of the engine's state at `pos` (nothing elsewhere, or without
// --checkpoint-dir).
absl::Status Save(const Run& run, const Position& pos) {
  if (!run.chief() || run.c.checkpoint_dir.empty()) return absl::OkStatus();
  if (absl::Status s = run.engine.Store(); !s.ok()) return s;
  absl::StatusOr<std::string> saved =
      SaveCheckpoint(run.c, &run.engine.model(), &run.engine.optimizer(), pos);
  if (!saved.ok()) return saved.status();
  if (run.r.progress) run.r.progress->Checkpointed(pos.step);
  return absl::OkStatus();
}

// The chief's TensorBoard record of the step that ended at `pos` (in epoch `epoch`), and at an
// epoch's end the epoch's, with its evaluation.
absl::Status Summarize(const Run& run, const Position& pos, int64_t epoch, const Trailer& trailer,
                       float lr) {
  const double samples = trailer[kSamples];
  if (absl::Status s = run.summaries->Step(pos.step, trailer[kLossSum] / samples,
                                           Accuracy(trailer[kCorrect], trailer[kJudged]), lr,
                                           static_cast<int64_t>(samples), MonotonicSeconds());
      !s.ok()) {
    return s;
  }
  if (pos.epoch_step != 0) return absl::OkStatus();  // mid-epoch
  std::optional<Scores> validation;
  if (run.validation != nullptr && run.validation->size() > 0) {
    absl::StatusOr<Evaluation> e = run.engine.Evaluate(*run.validation);
    if (!e.ok()) return e.status();
    validation = Scores{.loss = e->loss, .accuracy = e->accuracy};
  }
  return run.summaries->Epoch(epoch, validation);
}

// The step loop from `pos` to `total`: forward and backward, the gradient average and the
// trailer, the update, progress, and checkpoints every `every` steps and at the end. Returns
// Cancelled, after the chief's checkpoint, when any replica was asked to stop.
absl::Status RunSteps(Run& run, Batcher& batches, int64_t total, int64_t every, Position& pos) {
  const TrainerConfig& c = run.c;
  const Replica& r = run.r;
  const int64_t per_epoch = batches.steps_per_epoch();
  absl::StatusOr<LearningRate> rate =
      LearningRate::Make(c.lr_schedule, c.learning_rate, c.keras_optimizer);
  if (!rate.ok()) return rate.status();
  while (pos.step < total) {
    const bool stop_here = r.stop_requested && r.stop_requested();
    const bool regroup_here = r.regroup_due && r.regroup_due();
    Batch b = batches.Next();
    const float lr = rate->At(pos.step, total);
    absl::StatusOr<StepResult> out = run.engine.TrainStep(b);
    if (!out.ok()) return out.status();
    const auto samples = static_cast<float>(b.size());
    Trailer trailer;
    trailer[kStop] = stop_here ? 1.0f : 0.0f;
    trailer[kRegroup] = regroup_here ? 1.0f : 0.0f;
    trailer[kLossSum] = static_cast<float>(out->loss) * samples;  // loss x samples
    trailer[kCorrect] = static_cast<float>(out->correct);
    trailer[kJudged] = static_cast<float>(out->judged);
    trailer[kSamples] = samples;
    if (run.comm != nullptr) {
      comm::WorkPtr tw = run.comm->AllReduce(trailer.data(), kTrailerSlots);
      absl::Status s = run.engine.FinishGradients(r.collective_timeout);
      if (s.ok()) s = tw->Wait(r.collective_timeout);
      if (!s.ok()) return comm::AsPeerLost(s);
    }
    if (trailer[kStop] > 0) {
      // Every replica saw the same trailer: all stop here, before this step's update.
      if (absl::Status s = Save(run, pos); !s.ok()) return s;
      return absl::CancelledError(
          absl::StrCat("stopped by SIGTERM at step ", pos.step,
                       c.checkpoint_dir.empty()
                           ? ""
                           : (run.chief() ? " after a checkpoint" : " (the chief checkpointed)")));
    }
    if (absl::Status s = run.updater.Apply(lr); !s.ok()) return s;
    ++pos.step;
    pos.epoch = b.epoch;
    pos.epoch_step = b.step + 1;
    if (pos.epoch_step == per_epoch) {
      pos.epoch_step = 0;
      ++pos.epoch;
    }
    if (r.progress) {
      r.progress->Step(pos.step, b.epoch, trailer[kLossSum] / trailer[kSamples],
                       Accuracy(trailer[kCorrect], trailer[kJudged]),
                       static_cast<int64_t>(trailer[kSamples]), MonotonicSeconds());
    }
    if (run.resumed_from && run.chief()) {
      common::LogInfo("checkpoint", "every rank is stepping again at step ", pos.step,
                      " (resumed from the checkpoint of step ", *run.resumed_from, ")");
    }
    run.resumed_from.reset();
    if (run.recovering) {
      run.recovering->seconds = MonotonicSeconds() - run.recovering_since;
      common::LogInfo(
          "recovery", "every rank is stepping again at step ", pos.step, ", ",
          absl::StrFormat("%.2f", run.recovering->seconds),
          run.recovering->planned ? " s after the change began" : " s after the failure was seen");
      if (r.progress) r.progress->Recovered(*run.recovering);
      run.recovering.reset();
    }
    if (run.summaries != nullptr) {
      if (absl::Status s = Summarize(run, pos, b.epoch, trailer, lr); !s.ok()) {
        common::LogWarning("tensorboard", "no more TensorBoard events this run: ", s.message());
        run.summaries = nullptr;
      }
    }
    if (pos.step % every == 0 || pos.step == total) {
      if (absl::Status s = Save(run, pos); !s.ok()) return s;
    }
    if (trailer[kRegroup] > 0 && pos.step < total) {
      run.membership_change = true;
      return absl::OkStatus();
    }
  }
  return absl::OkStatus();
}

// What a member of the group (as it is now) batches: its shard of every global batch, or, for
// a replica reading its own files (Datasets::train_sharded), its own data alone, the replicas
// taking the fewest steps per epoch any of them can. Collective when sharded: every member
// calls it at the same point.
absl::StatusOr<BatcherOptions> BatchingFor(const Run& run, const Datasets& data) {
  const TrainerConfig& c = run.c;
  if (c.batch_size % run.size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--batch-size ", c.batch_size, " does not divide evenly over ", run.size, " replicas"));
  }
  BatcherOptions bo{.global_batch = c.batch_size,
                    .shard_index = run.rank,
                    .shard_count = run.size,
                    .seed = c.seed};
  if (!data.train_sharded || run.comm == nullptr) return bo;
  const int64_t local = c.batch_size / run.size;
  // Each member's steps per epoch and examples, side by side.
  const size_t n = static_cast<size_t>(run.size);
  std::vector<float> counts(2 * n, 0.0f);
  counts[static_cast<size_t>(run.rank)] = static_cast<float>(data.train.size() / local);
  counts[n + static_cast<size_t>(run.rank)] = static_cast<float>(data.train.size());
  comm::WorkPtr w = run.comm->AllReduce(counts.data(), 2 * run.size);
  if (absl::Status s = w->Wait(run.r.collective_timeout); !s.ok()) return comm::AsPeerLost(s);
  const auto fewest =
      static_cast<int64_t>(*std::min_element(counts.begin(), counts.begin() + run.size));
  if (fewest == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a worker's share of the training files holds fewer than a batch of ", local,
        " examples (files are split between workers; use fewer workers or a smaller batch)"));
  }
  double total = 0;
  for (size_t k = n; k < 2 * n; ++k) total += counts[k];
  const double unread = total - static_cast<double>(fewest * local) * run.size;
  if (run.rank == 0 && unread > 0) {
    // The files divide evenly, their records do not: what the workers cannot match step for
    // step is not read in an epoch (a different part each epoch, as each worker shuffles).
    common::LogWarning("data", "the workers' training files hold unequal numbers of examples: ",
                       static_cast<int64_t>(unread), " of ", static_cast<int64_t>(total), " (",
                       absl::StrFormat("%.1f", 100.0 * unread / total),
                       "%) are not read in each epoch, as every worker takes ", fewest,
                       " steps of ", local, "; files of equal sizes read them all");
  }
  return BatcherOptions{.global_batch = local,
                        .shard_index = 0,
                        .shard_count = 1,
                        .seed = c.seed + static_cast<uint64_t>(run.rank),
                        .steps_per_epoch = fewest};
}

// In-place recovery after `failed` (an OK status: a planned membership change at a step
// boundary): the group re-forms, every member takes over the state of the one furthest along,
// and the replica goes on from there. On success `pos` is where training goes on and run.comm
// the new group's collective.
absl::Status Recover(Run& run, const absl::Status& failed, Position& pos) {
  const bool planned = failed.ok();
  const double seen = MonotonicSeconds();
  const int64_t before = pos.step;
  RecoveryRecord rec{.detected_unix = absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch())};
  if (planned) {
    common::LogInfo("recovery", "the group's membership changes at step ", pos.step,
                    "; regrouping");
  } else {
    common::LogWarning("recovery", "a collective failed at step ", pos.step, " (", failed.message(),
                       "); keeping this replica's state and waiting for the group to re-form");
  }
  absl::Status last = failed;
  for (;;) {
    absl::StatusOr<Regrouped> g = run.r.regroup(last);
    if (!g.ok()) {
      // Stopped while the group re-forms (the whole job is stopping: its members left first,
      // or it is suspended while waiting for a replacement): the state is the step boundary's
      // (a failed step's update was never applied), so the task that stopped the group (the
      // coordination service's host; the chief where unset) checkpoints it.
      const bool saves = run.r.stopped_the_group ? run.r.stopped_the_group() : run.chief();
      if (absl::IsCancelled(g.status()) && saves) {
        if (absl::Status s = Save(run, pos); !s.ok()) return s;
      }
      return g.status();
    }
    const double formed = MonotonicSeconds();
    run.comm = g->comm;
    run.rank = g->comm->rank();
    run.size = g->comm->size();
    if (absl::Status s = run.engine.Rebind(g->comm); !s.ok()) return s;
    absl::StatusOr<RecoveredState> st =
        SyncRecoveredState(run.engine, g->comm, pos, run.r.collective_timeout);
    if (!st.ok() && comm::IsPeerLost(st.status())) {
      last = st.status();  // lost again while taking the state over: regroup again
      common::LogInfo("recovery", "the group failed while taking the state over: ", last.message());
      continue;
    }
    if (!st.ok()) return st.status();
    pos = st->at;
    rec.epoch = g->epoch;
    rec.replaced = g->replaced;
    rec.cause = g->cause;
    rec.rendezvous_seconds = formed - seen;
    rec.transfer_seconds = MonotonicSeconds() - formed;
    rec.resumed_step = pos.step;
    rec.steps_lost = std::max<int64_t>(0, before - pos.step);
    // A change at a step boundary that replaced a member (one stopped alone, taken in by its
    // replacement) is a recovery; one that only added or removed members is a planned change.
    rec.planned = planned && g->replaced.empty();
    rec.replicas = run.size;
    common::LogInfo("recovery", "the group re-formed in epoch ", g->epoch, " (", g->cause, "), ",
                    run.size, " replicas", g->replaced.empty() ? "" : " with a new " + g->replaced,
                    " after ", absl::StrFormat("%.2f", rec.rendezvous_seconds), " s; rank ",
                    st->source, "'s state taken over in ",
                    absl::StrFormat("%.2f", rec.transfer_seconds), " s; going on from step ",
                    pos.step, " (", rec.steps_lost, " completed steps lost)");
    run.recovering = rec;
    run.recovering_since = seen;
    return absl::OkStatus();
  }
}

// Step 1: the chief's state (resumed from the newest checkpoint, or the seed's), or, joining
// a running group, the group's.
absl::StatusOr<Position> StartPosition(const TrainerConfig& c, Engine& engine, const Replica& r,
                                       int rank, TrainResult& result) {
  if (r.replacement) {
    absl::StatusOr<RecoveredState> st =
        SyncRecoveredState(engine, r.comm, std::nullopt, r.collective_timeout);
    if (!st.ok()) return st.status();
    common::LogInfo("recovery", "joined the running group: rank ", st->source,
                    "'s state taken over at step ", st->at.step);
    return st->at;
  }
  absl::StatusOr<InitialState> start = SyncInitialState(c, engine, r.comm, r.collective_timeout);
  if (!start.ok()) return start.status();
  if (start->resumed) {
    result.resumed_from = start->at.step;
    if (r.progress) r.progress->Checkpointed(start->at.step);
    if (rank == 0) {
      common::LogInfo("checkpoint", "resumed from step ", start->at.step, " (epoch ",
                      start->at.epoch, ")");
    }
  }
  return start->at;
}

// Step 3: the steps from `pos` to `total`. In place, a lost peer's replacement joins and the
// group goes on from the same position; an elastic group's members change at a step boundary,
// likewise, each time with a new batcher. `waited`: the seconds spent waiting for batches.
absl::Status TrainSteps(Run& run, const Datasets& data, int64_t total, int64_t every,
                        std::unique_ptr<Batcher> batches, Position& pos, double& waited) {
  absl::Status trained = RunSteps(run, *batches, total, every, pos);
  for (;;) {
    const bool planned = trained.ok() && run.membership_change;
    const bool lost = !trained.ok() && run.r.regroup && comm::IsPeerLost(trained);
    if (!planned && !lost) break;
    run.membership_change = false;
    if (absl::Status s = Recover(run, trained, pos); !s.ok()) {
      trained = s;
      break;
    }
    if (run.r.progress) run.r.progress->SetGroup(run.size, run.c.batch_size);
    absl::StatusOr<BatcherOptions> again = BatchingFor(run, data);
    if (!again.ok()) {
      trained = again.status();
      continue;  // lost again while agreeing on the batching: regroup again
    }
    waited += batches->wait_seconds();
    batches = std::make_unique<Batcher>(&data.train, *again, pos.epoch, pos.epoch_step);
    trained = RunSteps(run, *batches, total, every, pos);
  }
  waited += batches->wait_seconds();
  return trained;
}

// Step 4: the chief's export of the trained model, then the test set (where asked).
absl::Status Conclude(const Run& run, const Datasets& data, TrainResult& result) {
  if (run.chief() && !run.c.model_dir.empty()) {
    if (absl::Status s = run.engine.Store(); !s.ok()) return s;
    if (absl::Status s = ExportTrainedModel(run.c, run.engine.model()); !s.ok()) return s;
  }
  result.no_test_data = run.r.evaluate && data.test.size() == 0;
  if (run.r.evaluate && data.test.size() > 0) {  // no validation data: nothing to evaluate
    absl::StatusOr<Evaluation> e = run.engine.Evaluate(data.test);
    if (!e.ok()) return e.status();
    result.evaluated = true;
    result.test_accuracy = e->accuracy;
    result.test_loss = e->loss;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TrainResult> RunReplica(const TrainerConfig& c, const Datasets& data,
                                       const Replica& r) {
  const int rank = r.comm ? r.comm->rank() : 0;
  const int size = r.comm ? r.comm->size() : 1;
  absl::StatusOr<std::unique_ptr<Engine>> made = MakeEngine(c, r.placement, r.device, r.comm);
  if (!made.ok()) return made.status();
  Engine& engine = **made;

  // 1. Everybody starts from the chief's state, or, joining a running group, from the group's.
  const double joined_at = MonotonicSeconds();
  TrainResult result;
  absl::StatusOr<Position> start = StartPosition(c, engine, r, rank, result);
  if (!start.ok()) return start.status();
  Position pos = *start;

  // The variables are updated on every replica, or centrally.
  std::unique_ptr<Updater> updater = r.central_variables && r.comm != nullptr
                                         ? MakeCentralUpdater(&engine, r.comm, r.collective_timeout)
                                         : MakeReplicatedUpdater(&engine);
  Run run{.c = c,
          .r = r,
          .engine = engine,
          .updater = *updater,
          .comm = r.comm,
          .rank = rank,
          .size = size,
          .validation = &data.test};
  if (result.resumed_from > 0) run.resumed_from = result.resumed_from;
  if (r.replacement) {
    run.recovering = RecoveryRecord{
        .epoch = r.replacement->epoch,
        .replaced = r.replacement->replaced,
        .cause = r.replacement->cause,
        .detected_unix = absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()) -
                         (MonotonicSeconds() - r.replacement->since),
        .rendezvous_seconds = joined_at - r.replacement->since,
        .transfer_seconds = MonotonicSeconds() - joined_at,
        .resumed_step = pos.step,
        .planned = r.replacement->replaced.empty(),  // a newcomer to an elastic group
        .replicas = size};
    run.recovering_since = r.replacement->since;
  }

  // 2. This replica's shard of every global batch, and how long the run is.
  absl::StatusOr<BatcherOptions> bo = BatchingFor(run, data);
  if (!bo.ok()) return bo.status();
  auto batches = std::make_unique<Batcher>(&data.train, *bo, pos.epoch, pos.epoch_step);
  const int64_t per_epoch = batches->steps_per_epoch();
  const int64_t total = c.steps ? *c.steps : c.epochs * per_epoch;
  const int64_t every = c.checkpoint_every ? *c.checkpoint_every : per_epoch;
  if (r.progress) {
    r.progress->SetTotalSteps(total);
    r.progress->SetGroup(size, c.batch_size);
  }
  if (rank == 0) {
    common::LogInfo("trainer", c.model, " (", engine.model().NumParams(), " parameters), ",
                    data.train.size(), " training examples, ", per_epoch, " steps per epoch, ",
                    total, " steps, global batch ", c.batch_size, " over ", size, " replica(s), ",
                    c.optimizer, " lr ", c.learning_rate, "; ", engine.Describe(),
                    r.comm != nullptr ? ", collectives over " + r.comm->name() : "");
  }
  std::unique_ptr<TrainingSummaries> summaries;
  if (rank == 0 && !c.tensorboard_dir.empty()) {
    absl::StatusOr<std::unique_ptr<TrainingSummaries>> runs =
        TrainingSummaries::Create(c.tensorboard_dir, c.tensorboard_every);
    if (!runs.ok()) return runs.status();
    summaries = std::move(*runs);
    common::LogInfo("tensorboard", "events in ", c.tensorboard_dir, "/train and ",
                    c.tensorboard_dir, "/validation");
  }
  run.summaries = summaries.get();

  // 3. The steps.
  const double loop_start = MonotonicSeconds();
  double waited = 0;
  absl::Status trained = TrainSteps(run, data, total, every, std::move(batches), pos, waited);
  const double loop_seconds = MonotonicSeconds() - loop_start;
  if (summaries != nullptr) {
    if (absl::Status s = summaries->Close(); !s.ok()) {
      common::LogWarning("tensorboard", s.message());
    }
  }
  if (!trained.ok()) return trained;
  result.steps = pos.step;
  if (loop_seconds > 0) result.data_wait_share = waited / loop_seconds;
  if (r.progress) result.samples_per_second = r.progress->SteadySamplesPerSecond();
  if (engine.skipped_steps() > 0 && run.rank == 0) {
    common::LogInfo("strategy", engine.skipped_steps(),
                    " step(s) skipped on fp16 overflow; loss scale now ", engine.loss_scale());
  }

  // 4. The chief's export of the trained model, then the test set.
  if (absl::Status s = Conclude(run, data, result); !s.ok()) return s;
  return result;
}

absl::StatusOr<TrainResult> RunOneDevice(const TrainerConfig& c, ProgressTracker* progress,
                                         const std::atomic<bool>* stop) {
  cpu::SetCpuThreads(c.threads);
  absl::StatusOr<Placement> place = PlaceReplicas(c);
  if (!place.ok()) return place.status();
  absl::StatusOr<Datasets> data = LoadDatasets(c);
  if (!data.ok()) return data.status();
  if (progress != nullptr)
    progress->SetCorruptData(data->corrupt_records_skipped, data->corrupt_bytes_unreadable);
  return RunReplica(c, *data,
                    {.placement = *place,
                     .stop_requested = [stop] { return stop->load(); },
                     .progress = progress});
}

absl::StatusOr<TrainResult> RunMirrored(const TrainerConfig& c, ProgressTracker* progress,
                                        const std::atomic<bool>* stop) {
  cpu::SetCpuThreads(c.threads);
  absl::StatusOr<Datasets> data = LoadDatasets(c);
  if (!data.ok()) return data.status();
  if (progress != nullptr)
    progress->SetCorruptData(data->corrupt_records_skipped, data->corrupt_bytes_unreadable);
  const bool central = c.strategy == Strategy::kCentralStorage;
  comm::ReduceAlgorithm algo = comm::ReduceAlgorithm::kAllReduce;
  if (central || c.cross_device_ops == CrossDeviceOps::kReduceToOneDevice) {
    algo = comm::ReduceAlgorithm::kReduceToOne;
  } else if (c.cross_device_ops == CrossDeviceOps::kHierarchicalCopy) {
    algo = comm::ReduceAlgorithm::kHierarchicalCopy;
  }
  const absl::Duration timeout = absl::Seconds(c.collective_timeout_seconds);
  absl::StatusOr<Placement> place = PlaceReplicas(c);
  if (!place.ok()) return place.status();
  // On GPUs: one replica per visible GPU, all-reduce through NCCL; the other algorithms (and
  // CentralStorage's host variables) go through the in-process backend, staged via the host.
  const int replicas = place->gpu ? place->gpus : c.replicas;
  std::vector<std::unique_ptr<comm::Collective>> members;
  std::string how;
  if (place->gpu && algo == comm::ReduceAlgorithm::kAllReduce) {
    absl::StatusOr<std::vector<std::unique_ptr<comm::Collective>>> nccl =
        comm::MakeLocalNcclGroup(replicas, timeout);
    if (!nccl.ok()) return nccl.status();
    members = std::move(*nccl);
    how = "NCCL all-reduce";
  } else {
    auto group = comm::InProcessGroup::Create(replicas, timeout, algo);
    for (int i = 0; i < replicas; ++i) members.push_back(group->Member(i));
    how = central ? "reduce-to-one-device (variables on the host)"
                  : CrossDeviceOpsName(c.cross_device_ops);
    if (place->gpu) how += ", staged through the host";
  }
  common::LogInfo("strategy", StrategyName(c.strategy), " with ", replicas, " replica(s) on ",
                  place->gpu ? "GPUs" : "CPU threads", ", gradients reduced by ", how);
  std::vector<absl::StatusOr<TrainResult>> results(replicas, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int i = 0; i < replicas; ++i) {
    threads.emplace_back([&, i] {
      Replica r{.comm = members[i].get(),
                .placement = *place,
                .device = i,
                .central_variables = central,
                .collective_timeout = timeout,
                .stop_requested = [stop] { return stop->load(); },
                .progress = i == 0 ? progress : nullptr,
                .evaluate = i == 0};
      results[i] = RunReplica(c, *data, r);
      // A replica that failed must not leave the others waiting for it.
      if (!results[i].ok() && !absl::IsCancelled(results[i].status())) {
        members[i]->Abort(results[i].status());
      }
    });
  }
  for (auto& t : threads) t.join();
  // The first replica's own error explains best; others only saw the group fail.
  for (auto& res : results) {
    if (!res.ok() && !absl::IsAborted(res.status())) return res.status();
  }
  return results[0];
}

}  // namespace lockstep::trainer
