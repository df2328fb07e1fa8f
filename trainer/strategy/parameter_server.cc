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

namespace {

// One chief or worker of a ParameterServer run, as its steps: Setup (data, model, the shard
// plan), InitStores (the coordinator: the PS tasks get the variables, from the newest checkpoint
// when there is one), Train (pull, step, push until the global step is reached or SIGTERM),
// Finish (the coordinator: the last checkpoint, the export and the evaluation).
class PsTrainer {
 public:
  PsTrainer(const TrainerConfig& c, ProgressTracker* progress, int rank, int trainers)
      : c_(c),
        progress_(progress),
        rank_(rank),
        trainers_(trainers),
        coordinator_(rank == 0),
        sync_(c.ps_mode == PsMode::kSync),
        ps_hosts_(c.tf_config->Hosts("ps")),
        nps_(static_cast<int>(ps_hosts_.size())),
        client_(ps_hosts_, c.job_token),
        peer_timeout_(absl::Seconds(c.peer_timeout_seconds)) {}

  absl::Status Setup() {
    absl::StatusOr<Datasets> data = LoadDatasets(c_);
    if (!data.ok()) return data.status();
    data_ = *std::move(data);
    if (progress_ != nullptr)
      progress_->SetCorruptData(data_.corrupt_records_skipped, data_.corrupt_bytes_unreadable);
    if (c_.batch_size * trainers_ > data_.train.size()) {
      return absl::InvalidArgumentError("--batch-size times the training tasks exceeds the data");
    }
    absl::StatusOr<std::unique_ptr<Model>> model = MakeModel(c_);
    if (!model.ok()) return model.status();
    model_ = *std::move(model);
    params_ = model_->Params();
    std::vector<Shape> shapes;
    for (Tensor* t : params_) shapes.push_back(t->shape());
    specs_ = PlanShards(shapes, nps_);
    ids_of_.assign(nps_, {});
    for (const ShardSpec& s : specs_) ids_of_[s.task].push_back(s.id);
    per_epoch_ = data_.train.size() / (c_.batch_size * trainers_);  // per trainer
    total_ = PsTotalSteps(c_, data_.train.size(), trainers_);
    every_ = (c_.checkpoint_every ? *c_.checkpoint_every : per_epoch_) * trainers_;
    absl::StatusOr<LearningRate> rate =
        LearningRate::Make(c_.lr_schedule, c_.learning_rate, c_.keras_optimizer);
    if (!rate.ok()) return rate.status();
    rate_ = *rate;
    return absl::OkStatus();
  }

  // The coordinator initializes every PS task, from the newest checkpoint when there is one.
  absl::Status InitStores() {
    if (!coordinator_) return absl::OkStatus();
    absl::StatusOr<ShardValues> state = Restore();
    if (!state.ok()) return state.status();
    const StoreConfig sc{.optimizer = c_.optimizer,
                         .learning_rate = c_.learning_rate,
                         .momentum = c_.momentum,
                         .lr_schedule = c_.lr_schedule,
                         .keras_optimizer = c_.keras_optimizer,
                         .total_steps = total_,
                         .sync = sync_,
                         .replicas_to_aggregate = sync_ ? trainers_ - c_.backup_workers : 1};
    for (int t = 0; t < nps_; ++t) {
      ShardValues mine;
      for (int id : ids_of_[t]) {
        if (state->contains(id) && !(*state)[id].empty()) mine[id] = (*state)[id];
      }
      auto r = client_.Init(t, Slice(specs_, params_, t), mine, sc, version_);
      if (!r.ok()) return comm::AsPeerLost(r.status());
      if (r->first) {
        common::LogInfo("ps", "ps ", t, " already holds the variables (step ", r->second, ")");
      }
    }
    return absl::OkStatus();
  }

  absl::StatusOr<TrainResult> Train(const std::atomic<bool>* stop) {
    common::LogInfo("strategy", "ParameterServer ", PsModeName(c_.ps_mode), " training, ",
                    c_.tf_config->task_type, " ", c_.tf_config->task_index, " (trainer ", rank_,
                    " of ", trainers_, "), ", specs_.size(), " variable shards on ", nps_,
                    " ps tasks, ", total_, " global steps");
    if (progress_) progress_->SetTotalSteps(total_);
    if (absl::Status s = OpenSummaries(); !s.ok()) return s;
    const int64_t start_epoch = version_ / std::max<int64_t>(per_epoch_ * trainers_, 1);
    Batcher batches(&data_.train,
                    {.global_batch = c_.batch_size * trainers_,
                     .shard_index = rank_,
                     .shard_count = trainers_,
                     .seed = c_.seed},
                    start_epoch, 0);
    int64_t last_saved = version_, local_steps = 0, min_version = 0;
    for (;;) {
      if (stop->load()) {
        if (absl::Status s = Save(version_); !s.ok()) return s;
        return absl::CancelledError(absl::StrCat("stopped by SIGTERM at global step ", version_));
      }
      absl::StatusOr<int64_t> v = Pull(min_version);
      if (!v.ok()) return v.status();
      version_ = *v;
      if (version_ >= total_) break;
      absl::StatusOr<int64_t> step = Step(batches.Next());
      if (!step.ok()) return step.status();
      ++local_steps;
      if (sync_) min_version = version_ + 1;
      if (coordinator_ && *step - last_saved >= every_) {
        if (absl::Status s = Save(*step); !s.ok()) return s;
        last_saved = *step;
      }
    }
    if (summaries_ != nullptr) {
      if (absl::Status s = summaries_->Close(); !s.ok()) {
        common::LogWarning("tensorboard", s.message());
      }
    }
    common::LogInfo("strategy", local_steps, " steps by this task, global step ", version_);
    TrainResult result{.steps = version_, .resumed_from = resumed_from_};
    if (progress_) result.samples_per_second = progress_->SteadySamplesPerSecond();
    return result;
  }

  // The coordinator's last checkpoint, export and evaluation of the final variables.
  absl::Status Finish(TrainResult& result) {
    if (!coordinator_) return absl::OkStatus();
    if (absl::Status s = Save(version_); !s.ok()) return s;
    if (!c_.model_dir.empty() || data_.test.size() > 0) {
      ShardValues values, state;
      if (absl::Status s = SaveAll(&values, &state); !s.ok()) return s;
      Scatter(specs_, values, params_);
    }
    if (absl::Status s = ExportTrainedModel(c_, *model_); !s.ok()) return s;
    if (data_.test.size() > 0) {  // no validation data: nothing to evaluate
      Evaluation e = Evaluate(model_.get(), data_.test, EvalBatchSize(c_));
      result.evaluated = true;
      result.test_accuracy = e.accuracy;
      result.test_loss = e.loss;
    }
    return absl::OkStatus();
  }

 private:
  // The newest checkpoint into the model (its optimizer state returned by shard), and the
  // version training resumes at.
  absl::StatusOr<ShardValues> Restore() {
    ShardValues state;
    absl::StatusOr<std::optional<CheckpointState>> latest = NewestCheckpoint(c_);
    if (!latest.ok()) return latest.status();
    if (!latest->has_value()) return state;
    const CheckpointState& ck = **latest;
    const std::vector<Tensor*> kept = model_->State();
    if (ck.model != c_.model || ck.optimizer != c_.optimizer ||
        (ck.params.size() != params_.size() && ck.params.size() != params_.size() + kept.size())) {
      return absl::InvalidArgumentError("the newest checkpoint in " + c_.checkpoint_dir +
                                        " is for another model or optimizer");
    }
    for (size_t i = 0; i < params_.size(); ++i) *params_[i] = ck.params[i];
    for (size_t i = params_.size(); i < ck.params.size(); ++i) {
      *kept[i - params_.size()] = ck.params[i];
    }
    if (ck.optimizer_state.size() == specs_.size()) {
      for (const ShardSpec& s : specs_) {
        const Tensor& t = ck.optimizer_state[s.id];
        state[s.id].assign(t.data(), t.data() + t.size());
      }
    }
    version_ = resumed_from_ = ck.step;
    common::LogInfo("checkpoint", "resumed from step ", ck.step);
    return state;
  }

  // Every PS task's values and optimizer state.
  absl::Status SaveAll(ShardValues* values, ShardValues* state) {
    int64_t v = 0;
    for (int t = 0; t < nps_; ++t) {
      if (absl::Status s = client_.Save(t, values, state, &v); !s.ok()) return comm::AsPeerLost(s);
    }
    return absl::OkStatus();
  }

  // The coordinator's checkpoint of the PS variables at `step`.
  absl::Status Save(int64_t step) {
    if (!coordinator_ || c_.checkpoint_dir.empty()) return absl::OkStatus();
    ShardValues values, state;
    if (absl::Status s = SaveAll(&values, &state); !s.ok()) return s;
    std::vector<Tensor> copy;
    for (Tensor* p : params_) copy.push_back(*p);
    std::vector<Tensor*> ptrs;
    for (Tensor& t : copy) ptrs.push_back(&t);
    Scatter(specs_, values, ptrs);
    // The parameters, then this trainer's kept state (moving statistics), as every strategy's
    // checkpoints hold them.
    for (Tensor* t : model_->State()) copy.push_back(*t);
    CheckpointState st{.step = step,
                       .epoch = step / (per_epoch_ * trainers_),
                       .epoch_step = 0,
                       .model = c_.model,
                       .optimizer = c_.optimizer,
                       .params = std::move(copy)};
    for (const ShardSpec& s : specs_) {
      Tensor t({static_cast<int64_t>(state[s.id].size())});
      std::copy(state[s.id].begin(), state[s.id].end(), t.data());
      st.optimizer_state.push_back(std::move(t));
    }
    absl::StatusOr<std::string> path = WriteCheckpoint(c_.checkpoint_dir, st, c_.keep_checkpoints);
    if (!path.ok()) return path.status();
    if (progress_) progress_->Checkpointed(step);
    return absl::OkStatus();
  }

  // Pulls every shard (waiting for `min_version`); returns the lowest version seen.
  absl::StatusOr<int64_t> Pull(int64_t min_version) {
    int64_t lowest = INT64_MAX;
    for (int t = 0; t < nps_; ++t) {
      int64_t v = 0;
      absl::StatusOr<ShardValues> got;
      // Before the coordinator's Init the store answers FailedPrecondition: wait for it.
      for (absl::Time until = absl::Now() + peer_timeout_ * 10;;) {
        got = client_.Pull(t, ids_of_[t], min_version, peer_timeout_, &v);
        if (!absl::IsFailedPrecondition(got.status()) || absl::Now() > until) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
      }
      if (!got.ok()) return comm::AsPeerLost(got.status());
      Scatter(specs_, *got, params_);
      lowest = std::min(lowest, v);
    }
    return lowest;
  }

  // A training step on the pulled variables; its gradients pushed to every PS task. Returns
  // the newest global step the pushes reported.
  absl::StatusOr<int64_t> Step(const Batch& b) {
    const StepResult out = model_->TrainStep(b);
    std::vector<Tensor*> grads = model_->Grads();
    int64_t step = version_;
    for (int t = 0; t < nps_; ++t) {
      absl::StatusOr<PushResult> r = client_.Push(t, Slice(specs_, grads, t), version_, rank_);
      if (!r.ok()) return comm::AsPeerLost(r.status());
      step = std::max(step, r->version);
    }
    const double acc = Accuracy(static_cast<double>(out.correct), static_cast<double>(out.judged));
    if (progress_) progress_->Step(step, b.epoch, out.loss, acc, b.size(), MonotonicSeconds());
    Summarize(step, b.epoch, out.loss, acc, b.size());
    return step;
  }

  // Worker 0's TensorBoard train run: its own batches at the global step, epochs as its data
  // passes end (no validation run: the evaluator task scores checkpoints).
  absl::Status OpenSummaries() {
    if (!coordinator_ || c_.tensorboard_dir.empty()) return absl::OkStatus();
    absl::StatusOr<std::unique_ptr<TrainingSummaries>> runs =
        TrainingSummaries::Create(c_.tensorboard_dir, c_.tensorboard_every);
    if (!runs.ok()) return runs.status();
    summaries_ = std::move(*runs);
    common::LogInfo("tensorboard", "events in ", c_.tensorboard_dir, "/train");
    return absl::OkStatus();
  }

  void Summarize(int64_t step, int64_t epoch, double loss, double acc, int64_t n) {
    if (summaries_ == nullptr) return;
    absl::Status s;
    if (summary_epoch_ >= 0 && epoch != summary_epoch_) s = summaries_->Epoch(summary_epoch_, {});
    summary_epoch_ = epoch;
    if (s.ok()) {
      s = summaries_->Step(step, loss, acc, rate_->At(step, total_), n, MonotonicSeconds());
    }
    if (!s.ok()) {
      common::LogWarning("tensorboard", "no more TensorBoard events this run: ", s.message());
      summaries_.reset();
    }
  }

  const TrainerConfig& c_;
  ProgressTracker* const progress_;
  const int rank_, trainers_;
  const bool coordinator_, sync_;
  const std::vector<std::string>& ps_hosts_;
  const int nps_;
  PsClient client_;
  const absl::Duration peer_timeout_;
  Datasets data_;
  std::unique_ptr<Model> model_;
  std::vector<Tensor*> params_;
  std::vector<ShardSpec> specs_;
  std::vector<std::vector<int>> ids_of_;
  int64_t per_epoch_ = 0, total_ = 0, every_ = 0;
  std::optional<LearningRate> rate_;
  std::unique_ptr<TrainingSummaries> summaries_;
  int64_t summary_epoch_ = -1;
  int64_t version_ = 0, resumed_from_ = 0;
};

}  // namespace

absl::StatusOr<TrainResult> RunPsTrainer(const TrainerConfig& c, ProgressTracker* progress,
                                         const std::atomic<bool>* stop) {
  if (!c.tf_config || c.tf_config->Hosts("ps").empty()) {
    return absl::InvalidArgumentError("ParameterServer needs ps tasks in TF_CONFIG");
  }
  absl::StatusOr<World> world = TrainingWorld(*c.tf_config);
  if (!world.ok()) return world.status();
  const int trainers = static_cast<int>(world->addresses.size());
  if (c.ps_mode == PsMode::kSync && c.backup_workers >= trainers) {
    return absl::InvalidArgumentError(absl::StrCat("--backup-workers ", c.backup_workers,
                                                   " leaves no gradient to aggregate from ",
                                                   trainers, " training tasks"));
  }
  cpu::SetCpuThreads(c.threads);
  PsTrainer trainer(c, progress, world->rank, trainers);
  if (absl::Status s = trainer.Setup(); !s.ok()) return s;
  if (absl::Status s = trainer.InitStores(); !s.ok()) return s;
  absl::StatusOr<TrainResult> result = trainer.Train(stop);
  if (!result.ok()) return result;
  if (absl::Status s = trainer.Finish(*result); !s.ok()) return s;
  return result;
}

}  // namespace lockstep::trainer
