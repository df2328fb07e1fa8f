// The synchronous strategies: gradient buckets, the N-workers == one-worker-with-N-times-the-
// batch equivalence (in-process and ring backends), Mirrored's reduce alternatives and
// CentralStorage, the coordinated stop-and-checkpoint, and a lost peer.
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <random>
#include <thread>

#include "common/log.h"
#include "gtest/gtest.h"
#include "trainer/comm/in_process.h"
#include "trainer/comm/ring.h"
#include "trainer/data/tfrecord.h"
#include "trainer/kernels/cpu/threads.h"
#include "trainer/kernels/cuda/gpu_available.h"
#include "trainer/proto/example.pb.h"
#include "trainer/strategy/buckets.h"
#include "trainer/strategy/data_parallel.h"
#include "trainer/strategy/evaluator.h"
#include "trainer/strategy/multi_worker.h"

namespace lockstep::trainer {
namespace {

// A replica that joins a running group (the epoch it joined does not matter here).
std::optional<Regrouped> JoinedRunning(bool joins) {
  return joins ? std::optional<Regrouped>(Regrouped{}) : std::nullopt;
}

namespace fs = std::filesystem;

// OpenBLAS's sums depend on its thread count (one against two threads: 2.9e-4 apart after
// 12 SGD steps of one replica), so every run here uses one GEMM thread, as the trainer's
// default --threads=1 does, and the comparisons stay at float rounding.
class SingleThreadedGemm : public ::testing::Environment {
 public:
  void SetUp() override { cpu::SetCpuThreads(1); }
};
[[maybe_unused]] ::testing::Environment* const kSingleThreadedGemm =
    ::testing::AddGlobalTestEnvironment(new SingleThreadedGemm);

std::string TempDir(const std::string& name) {
  fs::path p =
      fs::temp_directory_path() / ("lockstep-strategy-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

TrainerConfig Config(const std::string& dir, const std::string& optimizer, int64_t batch,
                     int64_t steps, const std::string& model = "mlp") {
  TrainerConfig c;
  c.device = Device::kCpu;  // the comparisons below are bit for bit, which NCCL's sums are not
  c.model = model;
  c.dataset = "synthetic";
  c.synthetic_size = 2048;
  c.batch_size = batch;
  c.steps = steps;
  c.optimizer = optimizer;
  c.learning_rate = optimizer == "sgd" ? 0.05f : 0.001f;
  c.checkpoint_dir = dir;
  c.checkpoint_every = steps;
  c.lr_schedule = "constant";
  return c;
}

std::vector<Tensor> FinalParams(const std::string& dir) {
  std::vector<std::string> skipped;
  auto s = LoadLatestCheckpoint(dir, &skipped);
  EXPECT_TRUE(s.ok() && s->has_value()) << dir;
  if (!s.ok() || !s->has_value()) return {};
  return (*s)->params;
}

void ExpectClose(const std::vector<Tensor>& a, const std::vector<Tensor>& b, float tol) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].size(), b[i].size());
    float worst = 0;
    for (int64_t j = 0; j < a[i].size(); ++j) {
      worst = std::max(worst, std::abs(a[i].data()[j] - b[i].data()[j]));
    }
    EXPECT_LE(worst, tol) << "parameter " << i;
  }
}

// Runs `n` replicas as threads over the given collectives (one per rank).
std::vector<absl::StatusOr<TrainResult>> RunGroup(
    const TrainerConfig& c, const Datasets& data,
    std::vector<std::unique_ptr<comm::Collective>>& members, bool central = false,
    std::function<bool(int rank)> stop = nullptr) {
  const int n = static_cast<int>(members.size());
  std::vector<absl::StatusOr<TrainResult>> out(n, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      Replica r{.comm = members[i].get(), .central_variables = central, .evaluate = false};
      if (stop) r.stop_requested = [&, i] { return stop(i); };
      out[i] = RunReplica(c, data, r);
      if (!out[i].ok() && !absl::IsCancelled(out[i].status())) members[i]->Abort(out[i].status());
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

std::vector<std::unique_ptr<comm::Collective>> InProcess(
    int n, comm::ReduceAlgorithm a = comm::ReduceAlgorithm::kAllReduce) {
  auto g = comm::InProcessGroup::Create(n, absl::Seconds(60), a);
  std::vector<std::unique_ptr<comm::Collective>> m;
  for (int i = 0; i < n; ++i) m.push_back(g->Member(i));
  return m;
}

std::vector<std::unique_ptr<comm::Collective>> Ring(int n) {
  std::vector<std::unique_ptr<comm::RingListener>> ls;
  std::vector<std::string> addrs;
  for (int i = 0; i < n; ++i) {
    ls.push_back(std::move(*comm::RingListener::Bind("127.0.0.1", 0)));
    addrs.push_back("127.0.0.1:" + std::to_string(ls.back()->port()));
  }
  std::vector<std::future<absl::StatusOr<std::unique_ptr<comm::Collective>>>> f;
  for (int i = 0; i < n; ++i) {
    comm::RingOptions o;
    o.rank = i;
    o.addresses = addrs;
    o.listener = std::move(ls[i]);
    o.token = "t";
    f.push_back(std::async(std::launch::async, [o = std::move(o)]() mutable {
      return comm::ConnectRing(std::move(o));
    }));
  }
  std::vector<std::unique_ptr<comm::Collective>> m;
  for (auto& x : f) m.push_back(std::move(*x.get()));
  return m;
}

TEST(BucketsTest, ReverseOrderFirstBucketSmallThenLarge) {
  // 4-byte floats: 1 MiB is 262144 elements.
  std::vector<int64_t> sizes = {100000, 10, 300000, 10, 200000, 10};
  std::vector<Bucket> b = PlanBuckets(sizes, 1 << 20, 4 << 20);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0].params, (std::vector<size_t>{5, 4, 3, 2}));  // closes past 1 MiB
  EXPECT_EQ(b[1].params, (std::vector<size_t>{1, 0}));
  EXPECT_EQ(b[0].elements, 500020);
  // The default sizes put the whole mlp in a few buckets, identically on every rank.
  EXPECT_EQ(PlanBuckets(sizes, 1 << 20, 25 << 20).size(), 2u);
}

// The result says whether its test figures are real: a replica that does not evaluate (all
// but the chief of a group) must not pass zeros off as an accuracy.
TEST(ReplicaTest, OnlyAnEvaluatingReplicaHasATestResult) {
  const std::string dir = TempDir("evaluated");
  TrainerConfig c = Config(dir, "sgd", 32, 4);
  auto data = LoadDatasets(c);
  ASSERT_TRUE(data.ok());
  absl::StatusOr<TrainResult> evaluated = RunReplica(c, *data, {.evaluate = true});
  ASSERT_TRUE(evaluated.ok()) << evaluated.status();
  EXPECT_TRUE(evaluated->evaluated);
  EXPECT_GT(evaluated->test_loss, 0);
  fs::remove_all(dir);
  absl::StatusOr<TrainResult> not_evaluated = RunReplica(c, *data, {.evaluate = false});
  ASSERT_TRUE(not_evaluated.ok()) << not_evaluated.status();
  EXPECT_FALSE(not_evaluated->evaluated);
  fs::remove_all(dir);
}

class Equivalence : public ::testing::TestWithParam<std::tuple<int, std::string, bool>> {};

TEST_P(Equivalence, NWorkersMatchOneWorkerWithNTimesTheBatch) {
  const auto [n, optimizer, ring] = GetParam();
  const int64_t per_worker = 16, steps = 12;
  const std::string one = TempDir("one"), many = TempDir("many");
  TrainerConfig single = Config(one, optimizer, per_worker * n, steps);
  auto data = LoadDatasets(single);
  ASSERT_TRUE(data.ok());
  ASSERT_TRUE(RunReplica(single, *data, {.evaluate = false}).ok());
  TrainerConfig multi = Config(many, optimizer, per_worker * n, steps);
  auto members = ring ? Ring(n) : InProcess(n);
  for (auto& r : RunGroup(multi, *data, members)) ASSERT_TRUE(r.ok()) << r.status();
  // Float sums in another order: the averaged gradients differ in the last bits only.
  ExpectClose(FinalParams(one), FinalParams(many), 2e-5f);
  fs::remove_all(one);
  fs::remove_all(many);
}

INSTANTIATE_TEST_SUITE_P(Workers, Equivalence,
                         ::testing::Values(std::make_tuple(2, "sgd", false),
                                           std::make_tuple(4, "sgd", false),
                                           std::make_tuple(4, "adam", false),
                                           std::make_tuple(2, "adam", true),
                                           std::make_tuple(3, "sgd", true)),
                         [](const auto& p) {
                           return std::to_string(std::get<0>(p.param)) + "_" +
                                  std::get<1>(p.param) +
                                  (std::get<2>(p.param) ? "_ring" : "_inprocess");
                         });

// The same for graph models built from Keras model files (examples/models/): classifiers, a
// regression, an autoencoder (an image out) and a two-input, two-output model.
class GraphEquivalence : public ::testing::TestWithParam<std::string> {};

TEST_P(GraphEquivalence, FourWorkersMatchOneWorkerWithFourTimesTheBatch) {
  const std::string model = std::string(LOCKSTEP_SOURCE_DIR) + "/examples/models/" + GetParam();
  const std::string one = TempDir("graph-one"), many = TempDir("graph-many");
  TrainerConfig single = Config(one, "sgd", 32, 6, model);
  single.synthetic_size = 512;
  auto data = LoadDatasets(single);
  ASSERT_TRUE(data.ok()) << data.status();
  ASSERT_TRUE(RunReplica(single, *data, {.evaluate = false}).ok());
  TrainerConfig multi = Config(many, "sgd", 32, 6, model);
  auto members = InProcess(4);
  for (auto& r : RunGroup(multi, *data, members)) ASSERT_TRUE(r.ok()) << r.status();
  ExpectClose(FinalParams(one), FinalParams(many), 2e-5f);
  fs::remove_all(one);
  fs::remove_all(many);
}

INSTANTIATE_TEST_SUITE_P(KerasFiles, GraphEquivalence,
                         ::testing::Values("mlp.json", "cnn.json", "lstm.json", "attention.json",
                                           "regression.json", "autoencoder.json", "two_tower.json"),
                         [](const auto& p) { return p.param.substr(0, p.param.find('.')); });

// A model with batch normalisation: its moving statistics are saved after the parameters, and
// a resumed run and the evaluator read them back.
TEST(GraphCheckpointTest, MovingStatisticsTravelWithTheCheckpoint) {
  const std::string dir = TempDir("graph-bn");
  const std::string model = dir + "/bn.json";
  std::ofstream(model) << R"({"class_name": "Sequential", "config": {"name": "bn", "layers": [
      {"class_name": "Flatten", "config": {"name": "f", "batch_input_shape": [null, 28, 28, 1]}},
      {"class_name": "Dense", "config": {"name": "d", "units": 16}},
      {"class_name": "BatchNormalization", "config": {"name": "bn"}},
      {"class_name": "Dense", "config": {"name": "out", "units": 10}}]}})";
  const std::string ckpt = dir + "/ckpt";
  TrainerConfig c = Config(ckpt, "sgd", 32, 6, model);
  c.synthetic_size = 256;
  auto data = LoadDatasets(c);
  ASSERT_TRUE(data.ok()) << data.status();
  ASSERT_TRUE(RunReplica(c, *data, {.evaluate = false}).ok());
  const std::vector<Tensor> saved = FinalParams(ckpt);
  auto fresh = BuildModel(model, c.seed);
  ASSERT_TRUE(fresh.ok());
  const size_t trained = (*fresh)->Params().size();
  ASSERT_EQ(saved.size(), trained + 2);              // + moving_mean, moving_variance
  EXPECT_NE(saved[trained], *(*fresh)->State()[0]);  // moved away from zero by training
  std::vector<std::string> skipped;
  auto ck = LoadLatestCheckpoint(ckpt, &skipped);
  ASSERT_TRUE(ck.ok() && ck->has_value());
  auto opt = MakeOptimizer("sgd", 0.05f, 0.9f);
  (*opt)->Init((*fresh)->Params());
  absl::Status restored = RestoreCheckpoint(**ck, c, fresh->get(), opt->get());
  ASSERT_TRUE(restored.ok()) << restored;
  EXPECT_EQ(*(*fresh)->State()[0], saved[trained]);
  EXPECT_EQ(*(*fresh)->State()[1], saved[trained + 1]);

  std::atomic<bool> stop{false};
  auto eval = RunEvaluator(c, nullptr, &stop, absl::Milliseconds(10));
  ASSERT_TRUE(eval.ok()) << eval.status();
  EXPECT_TRUE(eval->evaluated);
  EXPECT_EQ(eval->steps, 6);
  fs::remove_all(dir);
}

TEST(MirroredTest, ReduceAlternativesAndCentralStorageTrainAlike) {
  const std::string base = TempDir("mirror-base");
  TrainerConfig c = Config(base, "sgd", 32, 8);
  auto data = LoadDatasets(c);
  ASSERT_TRUE(data.ok());
  ASSERT_TRUE(RunReplica(c, *data, {.evaluate = false}).ok());
  const std::vector<Tensor> want = FinalParams(base);
  struct Case {
    comm::ReduceAlgorithm algo;
    bool central;
    const char* name;
  };
  for (const Case& k : {Case{comm::ReduceAlgorithm::kAllReduce, false, "all-reduce"},
                        Case{comm::ReduceAlgorithm::kHierarchicalCopy, false, "hierarchical"},
                        Case{comm::ReduceAlgorithm::kReduceToOne, false, "to-one"},
                        Case{comm::ReduceAlgorithm::kReduceToOne, true, "central"}}) {
    SCOPED_TRACE(k.name);
    const std::string dir = TempDir(k.name);
    TrainerConfig m = Config(dir, "sgd", 32, 8);
    auto members = InProcess(4, k.algo);
    for (auto& r : RunGroup(m, *data, members, k.central)) ASSERT_TRUE(r.ok()) << r.status();
    ExpectClose(want, FinalParams(dir), 2e-5f);
    fs::remove_all(dir);
  }
  fs::remove_all(base);
}

TEST(CoordinatedStopTest, AStopOnOneRankCheckpointsAndTheResumedRunEndsWhereAnUnbrokenOneDoes) {
  const std::string straight = TempDir("straight"), broken = TempDir("broken");
  TrainerConfig c = Config(straight, "adam", 32, 10);
  auto data = LoadDatasets(c);
  ASSERT_TRUE(data.ok());
  auto m1 = InProcess(2);
  for (auto& r : RunGroup(c, *data, m1)) ASSERT_TRUE(r.ok());

  TrainerConfig b = Config(broken, "adam", 32, 10);
  b.checkpoint_every = 100;  // only the stop and the end write checkpoints
  std::atomic<int> asked{0};
  auto m2 = InProcess(2);
  // Rank 1 is asked to stop before its 5th step; rank 0 never is.
  auto stopped =
      RunGroup(b, *data, m2, false, [&](int rank) { return rank == 1 && asked.fetch_add(1) >= 4; });
  for (auto& r : stopped) {
    ASSERT_TRUE(absl::IsCancelled(r.status())) << r.status();
    EXPECT_NE(r.status().message().find("at step 4"), std::string::npos) << r.status();
  }
  std::vector<std::string> skipped;
  auto ck = LoadLatestCheckpoint(broken, &skipped);
  ASSERT_TRUE(ck.ok() && ck->has_value());
  EXPECT_EQ((*ck)->step, 4);
  auto m3 = InProcess(2);
  auto resumed = RunGroup(b, *data, m3);
  for (auto& r : resumed) {
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->resumed_from, 4);
  }
  ExpectClose(FinalParams(straight), FinalParams(broken), 1e-6f);
  fs::remove_all(straight);
  fs::remove_all(broken);
}

// TFRecord training files split between two workers (a number of files they divide): each
// reads only its own, they agree on the steps of an epoch (the fewest either can take, the
// examples left over said in a warning), and a run stopped on one rank resumes to the same
// weights as an unbroken one.
TEST(FileShardTest, WorkersReadTheirOwnFilesAndResumeExactly) {
  const std::string data_dir = TempDir("shards");
  std::mt19937_64 rng(3);
  std::normal_distribution<float> noise(0, 0.3f);
  const int per_file[] = {100, 60, 90, 80};  // worker 0: 100 + 90, worker 1: 60 + 80
  for (int f = 0; f < 4; ++f) {
    auto w = RecordWriter::Create(data_dir + "/part-" + std::to_string(f) + ".tfrecord");
    ASSERT_TRUE(w.ok());
    for (int i = 0; i < per_file[f]; ++i) {
      const int label = (f * 7 + i) % 10;
      tfexample::Example e;
      auto& feats = *e.mutable_features()->mutable_feature();
      for (int k = 0; k < 784; ++k) {
        feats["x"].mutable_float_list()->add_value((k % 10 == label ? 1.0f : 0.0f) + noise(rng));
      }
      feats["y"].mutable_int64_list()->add_value(label);
      ASSERT_TRUE((*w)->Write(e.SerializeAsString()).ok());
    }
    ASSERT_TRUE((*w)->Close().ok());
  }
  std::ofstream(data_dir + "/spec.json")
      << R"({"format": "tfrecord", "files": ")" << data_dir << R"(/part-*.tfrecord",
             "features": {"x": {"dtype": "float32", "shape": [784]}, "y": {"dtype": "int64"}},
             "input": "x", "label": "y"})";
  auto config = [&](const std::string& dir) {
    TrainerConfig c = Config(dir, "adam", 32, 20);
    c.dataset = "spec";
    c.data_spec = data_dir + "/spec.json";
    return c;
  };
  const std::string straight = TempDir("shard-straight"), broken = TempDir("shard-broken");
  std::vector<Datasets> parts;
  for (int rank = 0; rank < 2; ++rank) {
    absl::StatusOr<Datasets> d = LoadDatasets(config(straight), {.index = rank, .count = 2});
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_TRUE(d->train_sharded);
    parts.push_back(std::move(*d));
  }
  EXPECT_EQ(parts[0].train.size(), 190);
  EXPECT_EQ(parts[1].train.size(), 140);
  // Four files for six workers, and for three (one would have a file more): every worker reads
  // every file, and the batcher splits the records.
  for (int workers : {6, 3}) {
    absl::StatusOr<Datasets> whole = LoadDatasets(config(straight), {.index = 1, .count = workers});
    ASSERT_TRUE(whole.ok());
    EXPECT_FALSE(whole->train_sharded) << workers;
    EXPECT_EQ(whole->train.size(), 330);
  }

  auto run = [&](const TrainerConfig& c, std::function<bool(int)> stop) {
    auto members = InProcess(2);
    std::vector<absl::StatusOr<TrainResult>> out(2, absl::UnknownError("not run"));
    std::vector<std::thread> threads;
    for (int i = 0; i < 2; ++i) {
      threads.emplace_back([&, i] {
        Replica r{.comm = members[i].get(), .evaluate = false};
        if (stop) r.stop_requested = [&, i] { return stop(i); };
        out[i] = RunReplica(c, parts[static_cast<size_t>(i)], r);
        if (!out[i].ok() && !absl::IsCancelled(out[i].status())) {
          members[i]->Abort(out[i].status());
        }
      });
    }
    for (auto& t : threads) t.join();
    return out;
  };
  // 140 / 16 = 8 steps an epoch for both (worker 0 could take 11): 20 steps are 2.5 epochs; the
  // 330 - 2 x 8 x 16 = 74 examples the workers cannot match are said.
  std::vector<std::string> warnings;
  common::SetLogSink([&](common::Severity s, std::string_view line) {
    if (s == common::Severity::kWarning) warnings.emplace_back(line);
  });
  for (auto& r : run(config(straight), nullptr)) ASSERT_TRUE(r.ok()) << r.status();
  common::SetLogSink(nullptr);
  bool said = false;
  for (const std::string& w : warnings) {
    said = said || w.find("74 of 330 (22.4%) are not read in each epoch") != std::string::npos;
  }
  EXPECT_TRUE(said);
  {
    std::vector<std::string> skipped;
    auto ck = LoadLatestCheckpoint(straight, &skipped);
    ASSERT_TRUE(ck.ok() && ck->has_value());
    EXPECT_EQ((*ck)->epoch, 2);  // 20 steps at 8 an epoch
    EXPECT_EQ((*ck)->epoch_step, 4);
  }
  TrainerConfig b = config(broken);
  b.checkpoint_every = 100;
  std::atomic<int> asked{0};
  auto stopped = run(b, [&](int rank) { return rank == 0 && asked.fetch_add(1) >= 11; });
  for (auto& r : stopped) ASSERT_TRUE(absl::IsCancelled(r.status())) << r.status();
  for (auto& r : run(b, nullptr)) {
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->resumed_from, 11);
  }
  ExpectClose(FinalParams(straight), FinalParams(broken), 0.0f);
  fs::remove_all(straight);
  fs::remove_all(broken);
  fs::remove_all(data_dir);
}

TEST(PeerLostTest, AReplicaWhoseGroupIsAbortedEndsWithPeerLost) {
  TrainerConfig c = Config("", "sgd", 32, 100000);
  auto data = LoadDatasets(c);
  ASSERT_TRUE(data.ok());
  auto members = InProcess(2);
  std::atomic<int> steps{0};
  std::vector<absl::StatusOr<TrainResult>> out;
  std::thread killer;
  out = RunGroup(c, *data, members, false, [&](int rank) {
    // Rank 1's collectives are aborted after a few steps, as a dead process's would fail.
    if (rank == 1 && steps.fetch_add(1) == 5) {
      members[1]->Abort(absl::UnavailableError("rank 1's connection reset"));
    }
    return false;
  });
  for (auto& r : out) {
    EXPECT_EQ(r.status().code(), absl::StatusCode::kAborted) << r.status();
    EXPECT_NE(r.status().message().find("peer lost"), std::string::npos) << r.status();
  }
}

TEST(PlaceReplicasTest, CpuPlacementAndPrecisionErrors) {
  TrainerConfig c = Config("", "sgd", 32, 4);
  absl::StatusOr<Placement> p = PlaceReplicas(c);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_FALSE(p->gpu);
  c.precision = Precision::kMixedBfloat16;
  absl::StatusOr<Placement> mixed = PlaceReplicas(c);
  ASSERT_FALSE(mixed.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(mixed.status()));
  EXPECT_NE(mixed.status().message().find("needs a GPU"), std::string::npos) << mixed.status();
  // Asking for a GPU where there is none (or none in this build) says why.
  if (cuda::GpuCount().count == 0) {
    c.precision = Precision::kFloat32;
    c.device = Device::kGpu;
    absl::StatusOr<Placement> gpu = PlaceReplicas(c);
    ASSERT_FALSE(gpu.ok());
    EXPECT_NE(gpu.status().message().find("--device gpu: "), std::string::npos) << gpu.status();
  }
}

TEST(PlaceReplicasTest, Fp16IsRefusedWhereVariablesLiveOnTheHost) {
  if (cuda::GpuCount().count == 0) GTEST_SKIP() << "the check follows the GPU placement";
  TrainerConfig c = Config("", "sgd", 32, 4);
  c.device = Device::kGpu;
  c.precision = Precision::kMixedFloat16;
  c.strategy = Strategy::kCentralStorage;
  absl::StatusOr<Placement> p = PlaceReplicas(c);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("use mixed_bfloat16"), std::string::npos) << p.status();
}

TEST(TrainingWorldTest, ChiefIsRankZeroAndWorkersFollow) {
  TfConfig tf;
  tf.cluster = {{"chief", {"c:1"}}, {"worker", {"w0:1", "w1:1"}}, {"ps", {"p:1"}}};
  tf.task_type = "worker";
  tf.task_index = 1;
  auto w = TrainingWorld(tf);
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->rank, 2);
  EXPECT_EQ(w->addresses, (std::vector<std::string>{"c:1", "w0:1", "w1:1"}));
  tf.task_type = "ps";
  EXPECT_EQ(TrainingWorld(tf).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(DataParallelTest, ABatchThatDoesNotDivideOverTheReplicasIsRefused) {
  TrainerConfig c = Config("", "sgd", 30, 4);
  auto data = LoadDatasets(c);
  ASSERT_TRUE(data.ok());
  auto members = InProcess(4);
  for (auto& r : RunGroup(c, *data, members)) {
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  }
}

// In-place recovery among threads: the coordination service's part played by a Regrouper,
// which hands every rank that rejoins a member of a fresh in-process group once all have (`n`,
// or the `size` an elastic group's epoch has).
class Regrouper {
 public:
  explicit Regrouper(int n = 0) : n_(n) {}
  comm::Collective* Join(int rank, int size = 0) {
    if (size == 0) size = n_;
    std::unique_lock<std::mutex> lock(mu_);
    if (waiting_ == 0) next_ = comm::InProcessGroup::Create(size, absl::Seconds(60));
    std::shared_ptr<comm::InProcessGroup> group = next_;
    const int64_t epoch = epoch_;
    if (++waiting_ == size) {
      waiting_ = 0;
      ++epoch_;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return epoch_ > epoch; });
    }
    owned_.push_back(group->Member(rank));
    return owned_.back().get();
  }
  int64_t epochs() {
    std::lock_guard<std::mutex> lock(mu_);
    return epoch_;
  }

 private:
  const int n_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::shared_ptr<comm::InProcessGroup> next_;
  int waiting_ = 0;
  int64_t epoch_ = 0;
  std::vector<std::unique_ptr<comm::Collective>> owned_;
};

// One rank's failures: its k-th process (incarnation k) dies after deaths[k] steps of its own,
// or, with -1, as soon as it has joined (during the rendezvous, before the state is taken over).
struct Deaths {
  std::map<int, std::vector<int>> by_rank;
};

// Runs `n` replicas as threads with in-place recovery; a rank that dies is replaced by a new
// "process" (a fresh RunReplica with replacement set), which joins the running group.
std::vector<absl::StatusOr<TrainResult>> RunRecovering(const TrainerConfig& c, const Datasets& data,
                                                       int n, const Deaths& deaths,
                                                       ProgressTracker* chief_progress) {
  Regrouper regroup(n);
  auto first = comm::InProcessGroup::Create(n, absl::Seconds(60));
  std::vector<std::unique_ptr<comm::Collective>> initial;
  for (int i = 0; i < n; ++i) initial.push_back(first->Member(i));
  std::vector<absl::StatusOr<TrainResult>> out(n, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      auto it = deaths.by_rank.find(i);
      const std::vector<int> mine = it == deaths.by_rank.end() ? std::vector<int>{} : it->second;
      for (size_t incarnation = 0;; ++incarnation) {
        const int dies_after = incarnation < mine.size() ? mine[incarnation] : 0;
        std::atomic<bool> dead{false};
        comm::Collective* current = nullptr;
        int steps = 0;
        Replica r{.evaluate = false, .replacement = JoinedRunning(incarnation > 0)};
        r.progress = i == 0 ? chief_progress : nullptr;
        r.comm = incarnation == 0 ? initial[i].get() : regroup.Join(i);
        current = r.comm;
        if (dies_after < 0) {
          dead = true;
          current->Abort(absl::UnavailableError("killed while joining"));
        }
        r.stop_requested = [&] {
          if (dies_after > 0 && ++steps == dies_after) {
            dead = true;
            current->Abort(absl::UnavailableError("rank " + std::to_string(i) + " was killed"));
          }
          return false;
        };
        r.regroup = [&](const absl::Status&) -> absl::StatusOr<Regrouped> {
          if (dead) return absl::AbortedError("this process was killed");
          current = regroup.Join(i);
          return Regrouped{.comm = current, .epoch = regroup.epochs(), .replaced = "worker"};
        };
        out[i] = RunReplica(c, data, r);
        if (!dead) return;
      }
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

// The weights a run with in-place recoveries ends with are an unbroken run's, bit for bit
// (the in-process reduction order is fixed): no completed step was lost, none trained twice,
// the data position went on exactly. Scenarios: one worker lost; two failures in a row; the
// replacement itself lost; a failure during the rendezvous.
class InPlaceRecovery : public ::testing::TestWithParam<std::pair<std::string, Deaths>> {};

TEST_P(InPlaceRecovery, TheRunEndsWithAnUnbrokenRunsWeights) {
  const std::string straight = TempDir("ip-straight-" + GetParam().first);
  const std::string broken = TempDir("ip-broken-" + GetParam().first);
  TrainerConfig c = Config(straight, "adam", 48, 30);
  auto data = LoadDatasets(c);
  ASSERT_TRUE(data.ok());
  for (auto& r : RunRecovering(c, *data, 3, {}, nullptr)) ASSERT_TRUE(r.ok()) << r.status();

  TrainerConfig b = Config(broken, "adam", 48, 30);
  ProgressTracker progress(30);
  auto results = RunRecovering(b, *data, 3, GetParam().second, &progress);
  for (auto& r : results) {
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->steps, 30);
  }
  ExpectClose(FinalParams(straight), FinalParams(broken), 0.0f);
  // The chief recorded every recovery, each losing no completed step.
  nlohmann::json p = progress.ProgressJson();
  ASSERT_TRUE(p.contains("recoveries")) << p.dump();
  for (const auto& rec : p["recoveries"]) {
    EXPECT_EQ(rec["stepsLost"], 0) << rec.dump();
    EXPECT_GT(rec["resumedStep"].get<int64_t>(), 0) << rec.dump();
    EXPECT_GE(rec["recoverySeconds"].get<double>(), rec["rendezvousSeconds"].get<double>());
  }
  fs::remove_all(straight);
  fs::remove_all(broken);
}

INSTANTIATE_TEST_SUITE_P(
    Scenarios, InPlaceRecovery,
    ::testing::Values(std::make_pair("OneWorkerLost", Deaths{{{2, {9}}}}),
                      std::make_pair("TwoFailuresInARow", Deaths{{{2, {7}}, {1, {15}}}}),
                      std::make_pair("TheReplacementLost", Deaths{{{1, {6, 8}}}}),
                      std::make_pair("LostDuringTheRendezvous", Deaths{{{2, {5, -1}}}})),
    [](const auto& p) { return p.param.first; });

// A fixed group that recovers in place, one of whose pods is deleted or evicted (SIGTERM to
// that rank alone): the rank leaves at a step boundary, the others finish the step and wait
// for its replacement, which takes the state over. No step is lost and none trained twice:
// the run ends with an unbroken run's weights, bit for bit.
TEST(InPlaceLeaveTest, AMemberStoppedAloneLeavesAtABoundaryAndItsReplacementGoesOn) {
  const std::string straight = TempDir("leave-straight");
  const std::string broken = TempDir("leave-broken");
  TrainerConfig c = Config(straight, "adam", 48, 30);
  auto data = LoadDatasets(c);
  ASSERT_TRUE(data.ok());
  for (auto& r : RunRecovering(c, *data, 3, {}, nullptr)) ASSERT_TRUE(r.ok()) << r.status();

  TrainerConfig b = Config(broken, "adam", 48, 30);
  ProgressTracker progress(30);
  Regrouper regroup(3);
  auto first = comm::InProcessGroup::Create(3, absl::Seconds(60));
  std::vector<absl::StatusOr<TrainResult>> out(3, absl::UnknownError("not run"));
  absl::Status left;
  std::vector<std::thread> threads;
  for (int i = 0; i < 3; ++i) {
    threads.emplace_back([&, i] {
      for (int incarnation = 0; incarnation < 2; ++incarnation) {
        const bool leaves = i == 1 && incarnation == 0;
        int steps = 0;  // this process's own
        std::unique_ptr<comm::Collective> initial;
        Replica r{.evaluate = false, .replacement = JoinedRunning(incarnation > 0)};
        r.progress = i == 0 ? &progress : nullptr;
        if (incarnation == 0) {
          initial = first->Member(i);
          r.comm = initial.get();
        } else {
          r.comm = regroup.Join(i);
        }
        r.stop_requested = [&] {
          ++steps;
          return false;
        };
        // SIGTERM reaches worker 1 before its 10th step: it leaves at that step's boundary.
        r.regroup_due = [&] { return leaves && steps == 10; };
        r.regroup = [&](const absl::Status&) -> absl::StatusOr<Regrouped> {
          if (leaves) return absl::CancelledError("worker 1 left the group at a step boundary");
          return Regrouped{.comm = regroup.Join(i),
                           .epoch = regroup.epochs(),
                           .replaced = "worker 1",
                           .cause = "worker 1 left the group (stopped by SIGTERM)"};
        };
        absl::StatusOr<TrainResult> result = RunReplica(b, *data, r);
        if (leaves) {
          left = result.status();
          continue;  // the replacement pod starts
        }
        out[i] = std::move(result);
        return;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_TRUE(absl::IsCancelled(left)) << left;
  for (auto& r : out) {
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->steps, 30);
  }
  ExpectClose(FinalParams(straight), FinalParams(broken), 0.0f);
  nlohmann::json p = progress.ProgressJson();
  ASSERT_EQ(p["recoveries"].size(), 1u) << p.dump();
  EXPECT_EQ(p["recoveries"][0]["resumedStep"], 10);
  EXPECT_EQ(p["recoveries"][0]["stepsLost"], 0);
  EXPECT_EQ(p["recoveries"][0]["replicas"], 3);
  EXPECT_EQ(p["recoveries"][0]["replaced"], "worker 1");
  EXPECT_FALSE(p["recoveries"][0]["planned"].get<bool>());  // a replacement: a recovery
  fs::remove_all(straight);
  fs::remove_all(broken);
}

// An elastic group grows from two replicas to three after 10 steps (a worker joins and takes
// the state over) and shrinks back to two after 20 (it leaves at a step boundary); the global
// batch stays 48, each replica's share going 24 -> 16 -> 24. The run ends with the weights of
// an unbroken two-replica run, to float rounding (the per-replica means are summed in a
// different grouping), and the chief recorded both changes as planned, losing no step.
TEST(ElasticTest, WorkersJoinAndLeaveAtStepBoundariesAndTheRunMatchesAFixedOne) {
  const std::string fixed = TempDir("elastic-fixed");
  const std::string elastic = TempDir("elastic-changing");
  TrainerConfig c = Config(fixed, "sgd", 48, 30);
  auto data = LoadDatasets(c);
  ASSERT_TRUE(data.ok());
  auto two = InProcess(2);
  for (auto& r : RunGroup(c, *data, two)) ASSERT_TRUE(r.ok()) << r.status();

  TrainerConfig e = Config(elastic, "sgd", 48, 30);
  ProgressTracker progress(30);
  Regrouper regroup;
  auto first = comm::InProcessGroup::Create(2, absl::Seconds(60));
  std::vector<absl::StatusOr<TrainResult>> out(3, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int i = 0; i < 3; ++i) {
    threads.emplace_back([&, i] {
      const bool newcomer = i == 2;
      int steps = 0;  // this replica's own
      std::unique_ptr<comm::Collective> initial;
      Replica r{.evaluate = false, .replacement = JoinedRunning(newcomer)};
      r.progress = i == 0 ? &progress : nullptr;
      if (newcomer) {
        r.comm = regroup.Join(2, 3);
      } else {
        initial = first->Member(i);
        r.comm = initial.get();
      }
      r.stop_requested = [&] {
        ++steps;
        return false;
      };
      // The chief hears of the newcomer before its 10th step; the newcomer is asked to go
      // before its own 10th (the group's 20th).
      r.regroup_due = [&] { return steps == 10; };
      r.regroup = [&](const absl::Status&) -> absl::StatusOr<Regrouped> {
        if (newcomer) return absl::CancelledError("left the group");
        const int size = regroup.epochs() == 0 ? 3 : 2;
        return Regrouped{.comm = regroup.Join(i, size),
                         .epoch = regroup.epochs(),
                         .cause = size == 3 ? "worker 1 joined the group" : "worker 1 left"};
      };
      out[i] = RunReplica(e, *data, r);
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_TRUE(out[0].ok()) << out[0].status();
  ASSERT_TRUE(out[1].ok()) << out[1].status();
  EXPECT_EQ(out[0]->steps, 30);
  EXPECT_TRUE(absl::IsCancelled(out[2].status())) << out[2].status();
  ExpectClose(FinalParams(fixed), FinalParams(elastic), 2e-6f);

  nlohmann::json p = progress.ProgressJson();
  ASSERT_EQ(p["recoveries"].size(), 2u) << p.dump();
  EXPECT_EQ(p["recoveries"][0]["resumedStep"], 10);
  EXPECT_EQ(p["recoveries"][0]["replicas"], 3);
  EXPECT_EQ(p["recoveries"][1]["resumedStep"], 20);
  EXPECT_EQ(p["recoveries"][1]["replicas"], 2);
  for (const auto& rec : p["recoveries"]) {
    EXPECT_TRUE(rec["planned"].get<bool>()) << rec.dump();
    EXPECT_EQ(rec["stepsLost"], 0) << rec.dump();
  }
  EXPECT_EQ(p["replicas"], 2);
  EXPECT_EQ(p["globalBatch"], 48);
  fs::remove_all(fixed);
  fs::remove_all(elastic);
}

}  // namespace
}  // namespace lockstep::trainer
