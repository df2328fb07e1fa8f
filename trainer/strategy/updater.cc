#include "trainer/strategy/updater.h"

#include "trainer/comm/peer_lost.h"

namespace lockstep::trainer {
namespace {

class ReplicatedUpdater final : public Updater {
 public:
  explicit ReplicatedUpdater(Engine* engine) : engine_(engine) {}
  absl::Status Apply(float learning_rate) override {
    // False means an fp16 step overflowed and was skipped: the engine counts those.
    return engine_->Apply(learning_rate).status();
  }

 private:
  Engine* engine_;
};

class CentralUpdater final : public Updater {
 public:
  CentralUpdater(Engine* engine, comm::Collective* comm, absl::Duration timeout)
      : engine_(engine), comm_(comm), timeout_(timeout) {}
  absl::Status Apply(float learning_rate) override {
    if (absl::Status s = engine_->GradientsToHost(); !s.ok()) return s;
    Model& model = engine_->model();
    std::vector<Tensor*> params = model.Params();
    const bool chief = comm_->rank() == 0;
    if (chief) {
      engine_->optimizer().set_learning_rate(learning_rate);
      engine_->optimizer().Step(params, model.Grads());
    }
    std::vector<float> flat = PackTensors(params);
    if (absl::Status s = comm::AsPeerLost(
            comm_->Broadcast(flat.data(), static_cast<int64_t>(flat.size()), 0)->Wait(timeout_));
        !s.ok()) {
      return s;
    }
    if (!chief) UnpackTensors(flat, params);
    return engine_->Load(/*with_optimizer_state=*/false);
  }

 private:
  Engine* engine_;
  comm::Collective* comm_;
  absl::Duration timeout_;
};

}  // namespace

std::unique_ptr<Updater> MakeReplicatedUpdater(Engine* engine) {
  return std::make_unique<ReplicatedUpdater>(engine);
}

std::unique_ptr<Updater> MakeCentralUpdater(Engine* engine, comm::Collective* comm,
                                            absl::Duration timeout) {
  return std::make_unique<CentralUpdater>(engine, comm, timeout);
}

}  // namespace lockstep::trainer
