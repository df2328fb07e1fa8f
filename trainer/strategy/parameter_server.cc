#include "trainer/strategy/parameter_server.h"

#include <thread>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "trainer/comm/peer_lost.h"
#include "trainer/comm/ring.h"
#include "trainer/data/batcher.h"
#include "trainer/kernels/cpu/threads.h"
#include "trainer/ps/partition.h"
#include "trainer/ps/ps_service.h"
#include "trainer/strategy/multi_worker.h"
#include "trainer/strategy/session.h"
#include "trainer/summary/training_summaries.h"

namespace lockstep::trainer {
namespace {

using ps::PlanShards;
using ps::PsClient;
using ps::PsServer;
using ps::PushResult;
using ps::ShardSpec;
using ps::ShardValues;
using ps::StoreConfig;

// Slices of the model's parameters by shard.
ShardValues Slice(const std::vector<ShardSpec>& specs, const std::vector<Tensor*>& ts, int task) {
  ShardValues out;
  for (const ShardSpec& s : specs) {
    if (task >= 0 && s.task != task) continue;
    const float* p = ts[s.param]->data() + s.offset;
    out[s.id].assign(p, p + s.elements);
  }
  return out;
}

void Scatter(const std::vector<ShardSpec>& specs, const ShardValues& v,
             const std::vector<Tensor*>& ts) {
  for (const ShardSpec& s : specs) {
    auto it = v.find(s.id);
    if (it != v.end())
      std::copy(it->second.begin(), it->second.end(), ts[s.param]->data() + s.offset);
  }
}

}  // namespace

int64_t PsTotalSteps(const TrainerConfig& c, int64_t train_size, int trainers) {
  const int64_t per_epoch = train_size / (c.batch_size * trainers);
  return (c.steps ? *c.steps : c.epochs * per_epoch) * trainers;
}

absl::StatusOr<TrainResult> RunPsTask(const TrainerConfig& c, const std::atomic<bool>* stop) {
  absl::StatusOr<std::pair<std::string, int>> self =
      comm::SplitHostPort(c.tf_config->SelfAddress());
  if (!self.ok()) return self.status();
  absl::StatusOr<std::unique_ptr<PsServer>> server =
      PsServer::Start(c.bind_address, self->second, c.job_token);
  if (!server.ok()) return server.status();
  common::LogInfo("ps", "parameter server ", c.tf_config->task_index, " serving on ",
                  c.bind_address, ":", (*server)->port());
  while (!stop->load()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  return absl::CancelledError(absl::StrCat("parameter server stopped by SIGTERM at version ",
                                           (*server)->store().version()));
}

absl::StatusOr<TrainResult> RunPsTrainer(const TrainerConfig& c, ProgressTracker* progress,
                                         const std::atomic<bool>* stop) {
  if (!c.tf_config || c.tf_config->Hosts("ps").empty()) {
    return absl::InvalidArgumentError("ParameterServer needs ps tasks in TF_CONFIG");
  }
  absl::StatusOr<World> world = TrainingWorld(*c.tf_config);
  if (!world.ok()) return world.status();
  const int trainers = static_cast<int>(world->addresses.size());
  const int rank = world->rank;
  const bool coordinator = rank == 0;
  const bool sync = c.ps_mode == PsMode::kSync;
  if (sync && c.backup_workers >= trainers) {
    return absl::InvalidArgumentError(absl::StrCat("--backup-workers ", c.backup_workers,
                                                   " leaves no gradient to aggregate from ",
                                                   trainers, " training tasks"));
  }
  cpu::SetCpuThreads(c.threads);
  absl::StatusOr<Datasets> data = LoadDatasets(c);
  if (!data.ok()) return data.status();
  if (progress != nullptr) progress->SetCorruptRecordsSkipped(data->corrupt_records_skipped);
  if (c.batch_size * trainers > data->train.size()) {
    return absl::InvalidArgumentError("--batch-size times the training tasks exceeds the data");
  }
  absl::StatusOr<std::unique_ptr<Model>> model = MakeModel(c);
  if (!model.ok()) return model.status();
  std::vector<Tensor*> params = (*model)->Params();
  std::vector<Shape> shapes;
  for (Tensor* t : params) shapes.push_back(t->shape());
  const std::vector<std::string>& ps_hosts = c.tf_config->Hosts("ps");
  const int nps = static_cast<int>(ps_hosts.size());
  const std::vector<ShardSpec> specs = PlanShards(shapes, nps);
  std::vector<std::vector<int>> ids_of(nps);
  for (const ShardSpec& s : specs) ids_of[s.task].push_back(s.id);
  PsClient client(ps_hosts, c.job_token);
  const absl::Duration peer_timeout = absl::Seconds(c.peer_timeout_seconds);

  const int64_t per_epoch = data->train.size() / (c.batch_size * trainers);  // per trainer
  const int64_t total = PsTotalSteps(c, data->train.size(), trainers);
  const int64_t every = (c.checkpoint_every ? *c.checkpoint_every : per_epoch) * trainers;
  StoreConfig sc{.optimizer = c.optimizer,
                 .learning_rate = c.learning_rate,
                 .momentum = c.momentum,
                 .lr_schedule = c.lr_schedule,
                 .keras_optimizer = c.keras_optimizer,
                 .total_steps = total,
                 .sync = sync,
                 .replicas_to_aggregate = sync ? trainers - c.backup_workers : 1};
  TrainResult result;
  int64_t version = 0;

  auto save = [&](int64_t step) -> absl::Status {
    if (!coordinator || c.checkpoint_dir.empty()) return absl::OkStatus();
    ShardValues values, state;
    int64_t v = 0;
    for (int t = 0; t < nps; ++t) {
      if (absl::Status s = client.Save(t, &values, &state, &v); !s.ok()) return comm::AsPeerLost(s);
    }
    std::vector<Tensor> copy;
    for (Tensor* p : params) copy.push_back(*p);
    std::vector<Tensor*> ptrs;
    for (Tensor& t : copy) ptrs.push_back(&t);
    Scatter(specs, values, ptrs);
    // The parameters, then this trainer's kept state (moving statistics), as every strategy's
    // checkpoints hold them.
    for (Tensor* t : (*model)->State()) copy.push_back(*t);
    CheckpointState st{.step = step,
                       .epoch = step / (per_epoch * trainers),
                       .epoch_step = 0,
                       .model = c.model,
                       .optimizer = c.optimizer,
                       .params = std::move(copy)};
    for (const ShardSpec& s : specs) {
      Tensor t({static_cast<int64_t>(state[s.id].size())});
      std::copy(state[s.id].begin(), state[s.id].end(), t.data());
      st.optimizer_state.push_back(std::move(t));
    }
    absl::StatusOr<std::string> path = WriteCheckpoint(c.checkpoint_dir, st, c.keep_checkpoints);
    if (!path.ok()) return path.status();
    if (progress) progress->Checkpointed(step);
    return absl::OkStatus();
  };

  if (coordinator) {
    absl::StatusOr<std::optional<CheckpointState>> latest = NewestCheckpoint(c);
    if (!latest.ok()) return latest.status();
    ShardValues state;
    if (latest->has_value()) {
      const CheckpointState& ck = **latest;
      const std::vector<Tensor*> kept = (*model)->State();
      if (ck.model != c.model || ck.optimizer != c.optimizer ||
          (ck.params.size() != params.size() && ck.params.size() != params.size() + kept.size())) {
        return absl::InvalidArgumentError("the newest checkpoint in " + c.checkpoint_dir +
                                          " is for another model or optimizer");
      }
      for (size_t i = 0; i < params.size(); ++i) *params[i] = ck.params[i];
      for (size_t i = params.size(); i < ck.params.size(); ++i) {
        *kept[i - params.size()] = ck.params[i];
      }
      if (ck.optimizer_state.size() == specs.size()) {
        for (const ShardSpec& s : specs) {
          const Tensor& t = ck.optimizer_state[s.id];
          state[s.id].assign(t.data(), t.data() + t.size());
        }
      }
      version = ck.step;
      result.resumed_from = ck.step;
      common::LogInfo("checkpoint", "resumed from step ", ck.step);
    }
    for (int t = 0; t < nps; ++t) {
      ShardValues mine;
      for (int id : ids_of[t]) mine[id] = state.count(id) ? state[id] : std::vector<float>{};
      std::erase_if(mine, [](const auto& kv) { return kv.second.empty(); });
      auto r = client.Init(t, Slice(specs, params, t), mine, sc, version);
      if (!r.ok()) return comm::AsPeerLost(r.status());
      if (r->first) {
        common::LogInfo("ps", "ps ", t, " already holds the variables (step ", r->second, ")");
      }
    }
  }
  common::LogInfo("strategy", "ParameterServer ", PsModeName(c.ps_mode), " training, ",
                  c.tf_config->task_type, " ", c.tf_config->task_index, " (trainer ", rank, " of ",
                  trainers, "), ", specs.size(), " variable shards on ", nps, " ps tasks, ", total,
                  " global steps");
  if (progress) progress->SetTotalSteps(total);

  // Pulls every shard (waiting for `min_version`); returns the lowest version seen.
  auto pull = [&](int64_t min_version) -> absl::StatusOr<int64_t> {
    int64_t lowest = INT64_MAX;
    for (int t = 0; t < nps; ++t) {
      int64_t v = 0;
      absl::StatusOr<ShardValues> got;
      // Before the coordinator's Init the store answers FailedPrecondition: wait for it.
      for (absl::Time until = absl::Now() + peer_timeout * 10;;) {
        got = client.Pull(t, ids_of[t], min_version, peer_timeout, &v);
        if (!absl::IsFailedPrecondition(got.status()) || absl::Now() > until) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
      }
      if (!got.ok()) return comm::AsPeerLost(got.status());
      Scatter(specs, *got, params);
      lowest = std::min(lowest, v);
    }
    return lowest;
  };

  const int64_t start_epoch = version / std::max<int64_t>(per_epoch * trainers, 1);
  Batcher batches(&data->train,
                  {.global_batch = c.batch_size * trainers,
                   .shard_index = rank,
                   .shard_count = trainers,
                   .seed = c.seed},
                  start_epoch, 0);
  // Worker 0's TensorBoard train run: its own batches at the global step, epochs as its data
  // passes end (no validation run: the evaluator task scores checkpoints).
  std::unique_ptr<TrainingSummaries> summaries;
  absl::StatusOr<LearningRate> rate =
      LearningRate::Make(c.lr_schedule, c.learning_rate, c.keras_optimizer);
  if (!rate.ok()) return rate.status();
  if (coordinator && !c.tensorboard_dir.empty()) {
    absl::StatusOr<std::unique_ptr<TrainingSummaries>> runs =
        TrainingSummaries::Create(c.tensorboard_dir, c.tensorboard_every);
    if (!runs.ok()) return runs.status();
    summaries = std::move(*runs);
    common::LogInfo("tensorboard", "events in ", c.tensorboard_dir, "/train");
  }
  int64_t summary_epoch = -1;
  auto summarize = [&](int64_t step, int64_t epoch, const StepResult& out, int64_t n) {
    if (summaries == nullptr) return;
    absl::Status s;
    if (summary_epoch >= 0 && epoch != summary_epoch) s = summaries->Epoch(summary_epoch, {});
    summary_epoch = epoch;
    const double acc = Accuracy(static_cast<double>(out.correct), static_cast<double>(out.judged));
    if (s.ok()) {
      s = summaries->Step(step, out.loss, acc, rate->At(step, total), n, MonotonicSeconds());
    }
    if (!s.ok()) {
      common::LogWarning("tensorboard", "no more TensorBoard events this run: ", s.message());
      summaries.reset();
    }
  };

  int64_t last_saved = version, local_steps = 0, min_version = 0;
  for (;;) {
    if (stop->load()) {
      if (absl::Status s = save(version); !s.ok()) return s;
      return absl::CancelledError(absl::StrCat("stopped by SIGTERM at global step ", version));
    }
    absl::StatusOr<int64_t> v = pull(min_version);
    if (!v.ok()) return v.status();
    version = *v;
    if (version >= total) break;
    Batch b = batches.Next();
    const StepResult out = (*model)->TrainStep(b);
    std::vector<Tensor*> grads = (*model)->Grads();
    int64_t step = version;
    for (int t = 0; t < nps; ++t) {
      absl::StatusOr<PushResult> r = client.Push(t, Slice(specs, grads, t), version, rank);
      if (!r.ok()) return comm::AsPeerLost(r.status());
      step = std::max(step, r->version);
    }
    ++local_steps;
    if (sync) min_version = version + 1;
    if (progress) {
      progress->Step(step, b.epoch, out.loss,
                     Accuracy(static_cast<double>(out.correct), static_cast<double>(out.judged)),
                     b.size(), MonotonicSeconds());
    }
    summarize(step, b.epoch, out, b.size());
    if (coordinator && step - last_saved >= every) {
      if (absl::Status s = save(step); !s.ok()) return s;
      last_saved = step;
    }
  }
  result.steps = version;
  if (summaries != nullptr) {
    if (absl::Status s = summaries->Close(); !s.ok())
      common::LogWarning("tensorboard", s.message());
  }
  common::LogInfo("strategy", local_steps, " steps by this task, global step ", version);
  if (progress) result.samples_per_second = progress->SteadySamplesPerSecond();
  if (coordinator) {
    if (absl::Status s = save(version); !s.ok()) return s;
    if (!c.model_dir.empty() || data->test.size() > 0) {
      // The final variables from the parameter servers, for the export and the evaluation.
      ShardValues values, state;
      int64_t v = 0;
      for (int t = 0; t < nps; ++t) {
        if (absl::Status s = client.Save(t, &values, &state, &v); !s.ok())
          return comm::AsPeerLost(s);
      }
      Scatter(specs, values, params);
    }
    if (absl::Status s = ExportTrainedModel(c, **model); !s.ok()) return s;
    if (data->test.size() > 0) {  // no validation data: nothing to evaluate
      Evaluation e = Evaluate(model->get(), data->test, EvalBatchSize(c));
      result.evaluated = true;
      result.test_accuracy = e.accuracy;
      result.test_loss = e.loss;
    }
  }
  return result;
}

}  // namespace lockstep::trainer
