#include "trainer/strategy/data_parallel.h"

#include <thread>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "trainer/comm/in_process.h"
#include "trainer/comm/nccl.h"
#include "trainer/data/batcher.h"
#include "trainer/kernels/cpu/gemm.h"
#include "trainer/strategy/buckets.h"

namespace lockstep::trainer {
namespace {

int64_t Elements(const std::vector<Tensor*>& ts) {
  int64_t n = 0;
  for (Tensor* t : ts) n += t->size();
  return n;
}

std::vector<float> Pack(const std::vector<Tensor*>& ts) {
  std::vector<float> flat;
  flat.reserve(static_cast<size_t>(Elements(ts)));
  for (Tensor* t : ts) flat.insert(flat.end(), t->data(), t->data() + t->size());
  return flat;
}

void Unpack(const std::vector<float>& flat, const std::vector<Tensor*>& ts) {
  const float* src = flat.data();
  for (Tensor* t : ts) {
    std::copy_n(src, t->size(), t->data());
    src += t->size();
  }
}

absl::Status PeerLost(const absl::Status& s) {
  if (s.ok()) return s;
  return absl::AbortedError(absl::StrCat("peer lost: ", s.message()));
}

}  // namespace

absl::StatusOr<TrainResult> RunReplica(const TrainerConfig& c, const Datasets& data,
                                       const Replica& r) {
  const int rank = r.comm ? r.comm->rank() : 0;
  const int size = r.comm ? r.comm->size() : 1;
  const bool chief = rank == 0;
  if (c.batch_size % size != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--batch-size ", c.batch_size, " does not divide evenly over ", size, " replicas"));
  }
  absl::StatusOr<std::unique_ptr<Engine>> made = MakeEngine(c, r.placement, r.device, r.comm);
  if (!made.ok()) return made.status();
  Engine& engine = **made;
  Model& model = engine.model();
  Optimizer& opt = engine.optimizer();

  TrainResult result;
  Position pos;
  // The chief's state, read from the newest checkpoint, is everybody's.
  std::vector<float> header(4, 0.0f);  // {resumed, step, epoch, epoch_step}
  absl::Status restore;
  if (chief) {
    absl::StatusOr<std::optional<CheckpointState>> latest = NewestCheckpoint(c);
    if (!latest.ok()) {
      restore = latest.status();
    } else if (latest->has_value()) {
      restore = RestoreCheckpoint(**latest, c, &model, &opt);
      pos = {(*latest)->step, (*latest)->epoch, (*latest)->epoch_step};
      header = {1.0f, static_cast<float>(pos.step), static_cast<float>(pos.epoch),
                static_cast<float>(pos.epoch_step)};
    }
    // A chief that cannot restore must still not leave the others waiting in the broadcast:
    // it reports failure through the header.
    if (!restore.ok()) header[0] = -1.0f;
  }
  if (r.comm != nullptr) {
    if (absl::Status s =
            PeerLost(r.comm->Broadcast(header.data(), 4, 0)->Wait(r.collective_timeout));
        !s.ok()) {
      return s;
    }
    if (header[0] < 0) {
      return chief ? restore
                   : absl::FailedPreconditionError("the chief could not restore its checkpoint");
    }
    std::vector<Tensor*> all = model.Params();
    for (Tensor* t : opt.State()) all.push_back(t);
    std::vector<float> flat = Pack(all);
    if (absl::Status s =
            PeerLost(r.comm->Broadcast(flat.data(), static_cast<int64_t>(flat.size()), 0)
                         ->Wait(r.collective_timeout));
        !s.ok()) {
      return s;
    }
    Unpack(flat, all);
    if (absl::Status s = engine.Load(); !s.ok()) return s;
    pos = {static_cast<int64_t>(header[1]), static_cast<int64_t>(header[2]),
           static_cast<int64_t>(header[3])};
  } else if (!restore.ok()) {
    return restore;
  } else if (header[0] > 0) {
    if (absl::Status s = engine.Load(); !s.ok()) return s;
  }
  if (header[0] > 0) {
    result.resumed_from = pos.step;
    if (r.progress) r.progress->Checkpointed(pos.step);
    if (chief) {
      kube::LogInfo("checkpoint", "resumed from step ", pos.step, " (epoch ", pos.epoch, ")");
    }
  }

  Batcher batches(
      &data.train,
      {.global_batch = c.batch_size, .shard_index = rank, .shard_count = size, .seed = c.seed},
      pos.epoch, pos.epoch_step);
  const int64_t per_epoch = batches.steps_per_epoch();
  const int64_t total = c.steps ? *c.steps : c.epochs * per_epoch;
  const int64_t every = c.checkpoint_every ? *c.checkpoint_every : per_epoch;
  if (r.progress) r.progress->SetTotalSteps(total);
  if (chief) {
    kube::LogInfo("trainer", c.model, " (", model.NumParams(), " parameters), ", data.train.size(),
                  " training examples, ", per_epoch, " steps per epoch, ", total,
                  " steps, global batch ", c.batch_size, " over ", size, " replica(s), ",
                  c.optimizer, " lr ", c.learning_rate, "; ", engine.Describe(),
                  r.comm != nullptr ? ", collectives over " + r.comm->name() : "");
  }
  std::vector<Tensor*> params = model.Params();
  auto save = [&]() -> absl::Status {
    if (!chief || c.checkpoint_dir.empty()) return absl::OkStatus();
    if (absl::Status s = engine.Store(); !s.ok()) return s;
    absl::StatusOr<std::string> saved = SaveCheckpoint(c, &model, &opt, pos);
    if (!saved.ok()) return saved.status();
    if (r.progress) r.progress->Checkpointed(pos.step);
    return absl::OkStatus();
  };

  while (pos.step < total) {
    const bool stop_here = r.stop_requested && r.stop_requested();
    Batch b = batches.Next();
    const float lr = ScheduledLearningRate(c.lr_schedule, c.learning_rate, pos.step, total);
    std::vector<float> trailer = {stop_here ? 1.0f : 0.0f, 0, 0,
                                  static_cast<float>(b.labels.size())};
    absl::StatusOr<cpu::XentResult> out = engine.TrainStep(b);
    if (!out.ok()) return out.status();
    trailer[1] = static_cast<float>(out->loss) * trailer[3];
    trailer[2] = static_cast<float>(out->correct);
    if (r.comm != nullptr) {
      comm::WorkPtr tw = r.comm->AllReduce(trailer.data(), 4);
      absl::Status s = engine.FinishGradients(r.collective_timeout);
      if (s.ok()) s = tw->Wait(r.collective_timeout);
      if (!s.ok()) return PeerLost(s);
    }
    if (trailer[0] > 0) {
      // Every replica saw the same trailer: all stop here, before this step's update.
      if (absl::Status s = save(); !s.ok()) return s;
      return absl::CancelledError(
          absl::StrCat("stopped by SIGTERM at step ", pos.step,
                       c.checkpoint_dir.empty()
                           ? ""
                           : (chief ? " after a checkpoint" : " (the chief checkpointed)")));
    }
    if (r.central_variables && r.comm != nullptr) {
      // CentralStorage: one optimizer, on the chief's host variables; the replicas get them
      // back (and copy them to their device).
      if (absl::Status s = engine.GradientsToHost(); !s.ok()) return s;
      if (chief) {
        opt.set_learning_rate(lr);
        opt.Step(params, model.Grads());
      }
      std::vector<float> flat = Pack(params);
      absl::Status s = r.comm->Broadcast(flat.data(), static_cast<int64_t>(flat.size()), 0)
                           ->Wait(r.collective_timeout);
      if (!s.ok()) return PeerLost(s);
      if (!chief) Unpack(flat, params);
      if (s = engine.Load(false); !s.ok()) return s;
    } else if (absl::StatusOr<bool> applied = engine.Apply(lr); !applied.ok()) {
      return applied.status();
    }
    ++pos.step;
    pos.epoch = b.epoch;
    pos.epoch_step = b.step + 1;
    if (pos.epoch_step == per_epoch) {
      pos.epoch_step = 0;
      ++pos.epoch;
    }
    if (r.progress) {
      r.progress->Step(pos.step, b.epoch, trailer[1] / trailer[3], trailer[2] / trailer[3],
                       static_cast<int64_t>(trailer[3]), MonotonicSeconds());
    }
    if (pos.step % every == 0 || pos.step == total) {
      if (absl::Status s = save(); !s.ok()) return s;
    }
  }
  result.steps = pos.step;
  if (r.progress) result.samples_per_second = r.progress->SteadySamplesPerSecond();
  if (engine.skipped_steps() > 0 && chief) {
    kube::LogInfo("strategy", engine.skipped_steps(),
                  " step(s) skipped on fp16 overflow; loss scale now ", engine.loss_scale());
  }
  if (r.evaluate) {
    absl::StatusOr<Evaluation> e = engine.Evaluate(data.test);
    if (!e.ok()) return e.status();
    result.test_accuracy = e->accuracy;
    result.test_loss = e->loss;
  }
  return result;
}

absl::StatusOr<TrainResult> RunOneDevice(const TrainerConfig& c, ProgressTracker* progress,
                                         const std::atomic<bool>* stop) {
  cpu::SetGemmThreads(c.threads);
  absl::StatusOr<Placement> place = PlaceReplicas(c);
  if (!place.ok()) return place.status();
  absl::StatusOr<Datasets> data = LoadDatasets(c);
  if (!data.ok()) return data.status();
  return RunReplica(c, *data,
                    {.placement = *place,
                     .stop_requested = [stop] { return stop->load(); },
                     .progress = progress});
}

absl::StatusOr<TrainResult> RunMirrored(const TrainerConfig& c, ProgressTracker* progress,
                                        const std::atomic<bool>* stop) {
  cpu::SetGemmThreads(c.threads);
  absl::StatusOr<Datasets> data = LoadDatasets(c);
  if (!data.ok()) return data.status();
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
  kube::LogInfo("strategy", StrategyName(c.strategy), " with ", replicas, " replica(s) on ",
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
