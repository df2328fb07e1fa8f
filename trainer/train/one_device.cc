#include "trainer/train/one_device.h"

#include <chrono>
#include <iostream>

#include "trainer/checkpoint/checkpoint.h"
#include "trainer/data/batcher.h"
#include "trainer/data/dataset.h"
#include "trainer/kernels/cpu/gemm.h"
#include "trainer/model/model.h"
#include "trainer/optim/optimizer.h"

namespace lockstep::trainer {
namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

absl::Status Restore(const CheckpointState& s, const TrainerConfig& c, Model* model,
                     Optimizer* opt) {
  if (s.model != c.model || s.optimizer != c.optimizer) {
    return absl::InvalidArgumentError("the newest checkpoint in " + c.checkpoint_dir +
                                      " is for --model=" + s.model + " --optimizer=" + s.optimizer +
                                      ", not --model=" + c.model + " --optimizer=" + c.optimizer +
                                      "; use another --checkpoint-dir");
  }
  std::vector<Tensor*> params = model->Params();
  std::vector<Tensor*> state = opt->State();
  if (s.params.size() != params.size() || s.optimizer_state.size() != state.size()) {
    return absl::InvalidArgumentError("the checkpoint's tensors do not match the model");
  }
  for (size_t i = 0; i < params.size(); ++i) {
    if (s.params[i].shape() != params[i]->shape()) {
      return absl::InvalidArgumentError("checkpoint tensor " + std::to_string(i) + " has shape " +
                                        ShapeString(s.params[i].shape()) + ", the model needs " +
                                        ShapeString(params[i]->shape()));
    }
    *params[i] = s.params[i];
  }
  for (size_t i = 0; i < state.size(); ++i) *state[i] = s.optimizer_state[i];
  return absl::OkStatus();
}

absl::StatusOr<std::string> Save(const TrainerConfig& c, Model* model, Optimizer* opt, int64_t step,
                                 int64_t epoch, int64_t epoch_step) {
  CheckpointState s{.step = step,
                    .epoch = epoch,
                    .epoch_step = epoch_step,
                    .model = c.model,
                    .optimizer = c.optimizer};
  for (Tensor* t : model->Params()) s.params.push_back(*t);
  for (Tensor* t : opt->State()) s.optimizer_state.push_back(*t);
  return WriteCheckpoint(c.checkpoint_dir, s, c.keep_checkpoints);
}

}  // namespace

absl::StatusOr<TrainResult> RunOneDevice(const TrainerConfig& c, ProgressTracker* progress,
                                         const std::atomic<bool>* stop) {
  cpu::SetGemmThreads(c.threads);
  Dataset train, test;
  if (c.dataset == "synthetic") {
    train = SyntheticDataset(c.synthetic_size, c.seed);
    test = SyntheticDataset(std::max<int64_t>(c.synthetic_size / 5, 1), c.seed + 1);
  } else {
    absl::StatusOr<Dataset> tr = LoadFashionMnist(c.data_dir, "train");
    if (!tr.ok()) return tr.status();
    absl::StatusOr<Dataset> te = LoadFashionMnist(c.data_dir, "t10k");
    if (!te.ok()) return te.status();
    train = std::move(*tr);
    test = std::move(*te);
  }
  if (c.batch_size > train.size()) {
    return absl::InvalidArgumentError("--batch-size " + std::to_string(c.batch_size) +
                                      " is larger than the " + std::to_string(train.size()) +
                                      " training examples");
  }
  absl::StatusOr<std::unique_ptr<Model>> model = BuildModel(c.model, c.seed);
  if (!model.ok()) return model.status();
  absl::StatusOr<std::unique_ptr<Optimizer>> opt =
      MakeOptimizer(c.optimizer, c.learning_rate, c.momentum);
  if (!opt.ok()) return opt.status();
  (*opt)->Init((*model)->Params());

  TrainResult result;
  int64_t step = 0, epoch = 0, epoch_step = 0;
  if (!c.checkpoint_dir.empty()) {
    std::vector<std::string> skipped;
    absl::StatusOr<std::optional<CheckpointState>> latest =
        LoadLatestCheckpoint(c.checkpoint_dir, &skipped);
    for (const std::string& why : skipped) {
      std::cerr << "lockstep-trainer: warning: skipping checkpoint: " << why << "\n";
    }
    if (!latest.ok()) return latest.status();
    if (latest->has_value()) {
      if (absl::Status s = Restore(**latest, c, model->get(), opt->get()); !s.ok()) return s;
      step = (*latest)->step;
      epoch = (*latest)->epoch;
      epoch_step = (*latest)->epoch_step;
      result.resumed_from = step;
      progress->Checkpointed(step);
      std::cerr << "lockstep-trainer: resumed from step " << step << " (epoch " << epoch << ")\n";
    }
  }

  Batcher batches(&train, {.global_batch = c.batch_size, .seed = c.seed}, epoch, epoch_step);
  const int64_t per_epoch = batches.steps_per_epoch();
  const int64_t total = c.steps ? *c.steps : c.epochs * per_epoch;
  const int64_t every = c.checkpoint_every ? *c.checkpoint_every : per_epoch;
  progress->SetTotalSteps(total);
  std::cerr << "lockstep-trainer: " << c.model << " (" << (*model)->NumParams() << " parameters), "
            << train.size() << " training examples, " << per_epoch << " steps per epoch, " << total
            << " steps, batch " << c.batch_size << ", " << c.optimizer << " lr " << c.learning_rate
            << "\n";

  while (step < total) {
    if (stop->load()) {
      if (!c.checkpoint_dir.empty()) {
        absl::StatusOr<std::string> saved =
            Save(c, model->get(), opt->get(), step, epoch, epoch_step);
        if (!saved.ok()) return saved.status();
        progress->Checkpointed(step);
      }
      return absl::CancelledError("stopped by SIGTERM at step " + std::to_string(step) +
                                  (c.checkpoint_dir.empty() ? "" : " after a checkpoint"));
    }
    Batch b = batches.Next();
    (*opt)->set_learning_rate(ScheduledLearningRate(c.lr_schedule, c.learning_rate, step, total));
    cpu::XentResult r = (*model)->TrainStep(b.images, b.labels);
    (*opt)->Step((*model)->Params(), (*model)->Grads());
    ++step;
    epoch_step = b.step + 1;
    epoch = b.epoch;
    if (epoch_step == per_epoch) {
      epoch_step = 0;
      ++epoch;
    }
    progress->Step(step, b.epoch, r.loss,
                   static_cast<double>(r.correct) / static_cast<double>(b.labels.size()),
                   static_cast<int64_t>(b.labels.size()), Now());
    if (!c.checkpoint_dir.empty() && (step % every == 0 || step == total)) {
      absl::StatusOr<std::string> saved =
          Save(c, model->get(), opt->get(), step, epoch, epoch_step);
      if (!saved.ok()) return saved.status();
      progress->Checkpointed(step);
    }
  }
  result.steps = step;
  result.samples_per_second = progress->SteadySamplesPerSecond();

  // Evaluation on the test set, in slices of 1000.
  int64_t correct = 0;
  double loss = 0;
  const int64_t ex = test.example_size();
  for (int64_t at = 0; at < test.size(); at += 1000) {
    const int64_t n = std::min<int64_t>(1000, test.size() - at);
    Shape shape = test.images.shape();
    shape[0] = n;
    Tensor x(shape);
    std::copy_n(test.images.data() + at * ex, n * ex, x.data());
    std::vector<int32_t> y(test.labels.begin() + at, test.labels.begin() + at + n);
    cpu::XentResult r = (*model)->Evaluate(x, y);
    correct += r.correct;
    loss += r.loss * static_cast<double>(n);
  }
  result.test_accuracy = static_cast<double>(correct) / static_cast<double>(test.size());
  result.test_loss = loss / static_cast<double>(test.size());
  return result;
}

}  // namespace lockstep::trainer
