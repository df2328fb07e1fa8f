// The two ways a synchronous replica updates its variables: CentralStorage's (the chief's
// optimizer, then a broadcast) must leave every rank with what the replicated update computes
// from the same gradients.
#include "trainer/strategy/updater.h"

#include <gtest/gtest.h>

#include <thread>

#include "trainer/comm/in_process.h"

namespace lockstep::trainer {
namespace {

TrainerConfig Config() {
  TrainerConfig c;
  c.device = Device::kCpu;
  c.optimizer = "sgd";
  c.learning_rate = 0.1f;
  return c;
}

// Gradients that differ per parameter and per `salt`.
void FillGradients(Engine& e, float salt) {
  float v = salt;
  for (Tensor* g : e.model().Grads()) {
    for (float& x : g->values()) x = (v += 0.001f);
  }
}

TEST(UpdaterTest, CentralVariablesEndAsTheReplicatedUpdateOnEveryRank) {
  const TrainerConfig c = Config();
  std::unique_ptr<Engine> reference = std::move(*MakeEngine(c, {}, 0, nullptr));
  FillGradients(*reference, 1.0f);
  ASSERT_TRUE(MakeReplicatedUpdater(reference.get())->Apply(0.1f).ok());

  auto group = comm::InProcessGroup::Create(2, absl::Seconds(60));
  std::vector<std::unique_ptr<comm::Collective>> members;
  std::vector<std::unique_ptr<Engine>> engines;
  for (int i = 0; i < 2; ++i) {
    members.push_back(group->Member(i));
    engines.push_back(std::move(*MakeEngine(c, {}, 0, members[i].get())));
  }
  // Only the chief's gradients are applied; rank 1's differ to show it.
  FillGradients(*engines[0], 1.0f);
  FillGradients(*engines[1], 7.0f);
  std::vector<absl::Status> out(2);
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i) {
    threads.emplace_back([&, i] {
      out[i] =
          MakeCentralUpdater(engines[i].get(), members[i].get(), absl::Seconds(60))->Apply(0.1f);
    });
  }
  for (auto& t : threads) t.join();
  const std::vector<Tensor*> want = reference->model().Params();
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(out[i].ok()) << out[i];
    const std::vector<Tensor*> got = engines[i]->model().Params();
    ASSERT_EQ(got.size(), want.size());
    for (size_t p = 0; p < got.size(); ++p) {
      EXPECT_EQ(got[p]->values(), want[p]->values()) << "rank " << i << " param " << p;
    }
  }
}

TEST(UpdaterTest, ACentralUpdateWhoseBroadcastFailsIsPeerLost) {
  const TrainerConfig c = Config();
  auto group = comm::InProcessGroup::Create(2, absl::Seconds(60));
  std::unique_ptr<comm::Collective> member = group->Member(1);
  std::unique_ptr<Engine> engine = std::move(*MakeEngine(c, {}, 0, member.get()));
  member->Abort(absl::UnavailableError("connection reset"));
  absl::Status s = MakeCentralUpdater(engine.get(), member.get(), absl::Seconds(60))->Apply(0.1f);
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
  EXPECT_NE(s.message().find("peer lost"), std::string::npos) << s;
}

}  // namespace
}  // namespace lockstep::trainer
