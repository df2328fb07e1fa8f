#include "trainer/cli/trainer_flags.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "trainer/config/cpu_limit.h"
#include "trainer/progress/progress.h"
#include "trainer/strategy/engine.h"

namespace lockstep::trainer {
namespace {

using ::testing::HasSubstr;

TEST(TrainerFlagsTest, Defaults) {
  absl::StatusOr<TrainerConfig> c = ParseTrainerConfig({}, {});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->model, "mlp");
  EXPECT_EQ(c->dataset, "fashion-mnist");
  EXPECT_EQ(c->epochs, 5);
  EXPECT_EQ(c->batch_size, 64);
  EXPECT_EQ(c->optimizer, "adam");
  EXPECT_FLOAT_EQ(c->learning_rate, 0.001f);
  EXPECT_EQ(c->lr_schedule, "cosine");
  EXPECT_EQ(c->metrics_port, 9464);
  EXPECT_FALSE(c->metrics_port_required);  // a run by hand: a taken default port warns
  EXPECT_TRUE(ParseTrainerConfig({"--metrics-port=9000"}, {})->metrics_port_required);
  EXPECT_TRUE(ParseTrainerConfig({}, {{"LOCKSTEP_JOB_NAME", "j"}})->metrics_port_required);
  EXPECT_EQ(c->bind_address, "0.0.0.0");
  EXPECT_EQ(c->termination_log, "/dev/termination-log");
  EXPECT_FALSE(c->tf_config.has_value());
  EXPECT_EQ(c->strategy, Strategy::kOneDevice);
  EXPECT_EQ(c->cross_device_ops, CrossDeviceOps::kAllReduce);
  EXPECT_EQ(c->ps_mode, PsMode::kAsync);
  EXPECT_FALSE(c->json_logs);
  EXPECT_TRUE(ParseTrainerConfig({"--log-format=json"}, {})->json_logs);
  EXPECT_FLOAT_EQ(ParseTrainerConfig({"--optimizer=sgd"}, {})->learning_rate, 0.01f);
  EXPECT_EQ(c->eval_batch_size, 0);  // --batch-size's
  EXPECT_EQ(c->loss, "");
  EXPECT_EQ(c->open_axis_size, 0);
  auto shapes = ParseTrainerConfig(
      {"--eval-batch-size=8", "--loss=mean_squared_error", "--open-axis-size=50"}, {});
  ASSERT_TRUE(shapes.ok()) << shapes.status();
  EXPECT_EQ(shapes->eval_batch_size, 8);
  EXPECT_EQ(shapes->loss, "mean_squared_error");
  EXPECT_EQ(shapes->open_axis_size, 50);
  EXPECT_FALSE(ParseTrainerConfig({"--eval-batch-size=0"}, {}).ok());
  EXPECT_FALSE(ParseTrainerConfig({"--open-axis-size=-1"}, {}).ok());
}

TEST(TrainerFlagsTest, FlagsAndEnvironment) {
  absl::StatusOr<TrainerConfig> c = ParseTrainerConfig(
      {"--model=cnn", "--dataset", "synthetic", "--synthetic-size=500", "--steps=30",
       "--batch-size=16", "--optimizer=sgd", "--learning-rate=0.05", "--momentum=0.5",
       "--lr-schedule=constant", "--seed=7", "--checkpoint-dir=/tmp/c", "--checkpoint-every=10",
       "--keep-checkpoints=2", "--threads=2", "--metrics-port=0"},
      {{"TF_CONFIG",
        R"({"cluster":{"worker":["a:1","b:2"]},"task":{"type":"worker","index":1},"environment":"cloud"})"},
       {"LOCKSTEP_STRATEGY", "MultiWorkerMirrored"},
       {"LOCKSTEP_POD_IP", "127.0.3.4"},
       {"LOCKSTEP_TERMINATION_LOG", "/tmp/term"}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model, "cnn");
  EXPECT_EQ(c->synthetic_size, 500);
  EXPECT_EQ(c->steps, 30);
  EXPECT_EQ(c->batch_size, 16);
  EXPECT_FLOAT_EQ(c->learning_rate, 0.05f);
  EXPECT_FLOAT_EQ(c->momentum, 0.5f);
  EXPECT_EQ(c->lr_schedule, "constant");
  EXPECT_EQ(c->seed, 7u);
  EXPECT_EQ(c->checkpoint_dir, "/tmp/c");
  EXPECT_EQ(c->checkpoint_every, 10);
  EXPECT_EQ(c->keep_checkpoints, 2);
  EXPECT_EQ(c->threads, 2);
  EXPECT_EQ(c->metrics_port, 0);
  ASSERT_TRUE(c->tf_config.has_value());
  EXPECT_EQ(c->tf_config->task_index, 1);
  EXPECT_EQ(c->strategy, Strategy::kMultiWorkerMirrored);
  EXPECT_EQ(c->bind_address, "127.0.3.4");
  EXPECT_EQ(c->termination_log, "/tmp/term");
}

TEST(TrainerFlagsTest, StrategyFlagsAndTheJobToken) {
  absl::StatusOr<TrainerConfig> c = ParseTrainerConfig(
      {"--strategy=Mirrored", "--replicas=4", "--cross-device-ops=hierarchical-copy",
       "--peer-timeout=5", "--collective-timeout=60", "--ps-mode=sync", "--backup-workers=1"},
      {{"LOCKSTEP_STRATEGY", "MultiWorkerMirrored"}, {"LOCKSTEP_JOB_TOKEN", "s3cret"}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->strategy, Strategy::kMirrored);  // the flag wins over the environment
  EXPECT_EQ(c->replicas, 4);
  EXPECT_EQ(c->cross_device_ops, CrossDeviceOps::kHierarchicalCopy);
  EXPECT_EQ(c->peer_timeout_seconds, 5);
  EXPECT_EQ(c->collective_timeout_seconds, 60);
  EXPECT_EQ(c->ps_mode, PsMode::kSync);
  EXPECT_EQ(c->backup_workers, 1);
  EXPECT_EQ(c->job_token, "s3cret");
  EXPECT_FALSE(c->recover_in_place);  // RestartGroup unless the operator or a flag says so
  EXPECT_EQ(c->rejoin_timeout_seconds, 300);
}

TEST(TrainerFlagsTest, RecoveryFromTheOperatorsVariableOrTheFlag) {
  absl::StatusOr<TrainerConfig> env =
      ParseTrainerConfig({"--rejoin-timeout=45"}, {{"LOCKSTEP_RECOVERY", "InPlace"}});
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_TRUE(env->recover_in_place);
  EXPECT_EQ(env->rejoin_timeout_seconds, 45);
  absl::StatusOr<TrainerConfig> flag =
      ParseTrainerConfig({"--recovery=RestartGroup"}, {{"LOCKSTEP_RECOVERY", "InPlace"}});
  ASSERT_TRUE(flag.ok()) << flag.status();
  EXPECT_FALSE(flag->recover_in_place);  // the flag wins
}

TEST(TrainerFlagsTest, TheAttemptAndTheHostsLeaveWindow) {
  absl::StatusOr<TrainerConfig> c =
      ParseTrainerConfig({"--leave-window-ms=250"}, {{"LOCKSTEP_ATTEMPT", "3"}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->attempt, 3);
  EXPECT_EQ(c->leave_window_ms, 250);
  absl::StatusOr<TrainerConfig> d = ParseTrainerConfig({}, {});
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->attempt, 0);
  EXPECT_EQ(d->leave_window_ms, 2000);
}

TEST(TrainerFlagsTest, GpuFlags) {
  absl::StatusOr<TrainerConfig> d = ParseTrainerConfig({}, {});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->device, Device::kAuto);
  EXPECT_EQ(d->precision, Precision::kFloat32);
  EXPECT_TRUE(d->tf32);
  EXPECT_EQ(d->collective, CollectiveBackend::kAuto);
  absl::StatusOr<TrainerConfig> c =
      ParseTrainerConfig({"--device=gpu", "--precision=mixed_bfloat16", "--tf32=false",
                          "--collective=nccl", "--model=mlp-large"},
                         {});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->device, Device::kGpu);
  EXPECT_EQ(c->precision, Precision::kMixedBfloat16);
  EXPECT_FALSE(c->tf32);
  EXPECT_EQ(c->collective, CollectiveBackend::kNccl);
  EXPECT_EQ(c->model, "mlp-large");
}

TEST(TrainerFlagsTest, ErrorsNameTheFlagOrVariable) {
  struct Case {
    std::vector<std::string> args;
    std::map<std::string, std::string> env;
    std::string want;
  };
  for (const Case& c : std::vector<Case>{
           {{"--model="}, {}, "--model"},
           {{"--epochs=0"}, {}, "--epochs"},
           {{"--batch-size=-4"}, {}, "--batch-size"},
           {{"--learning-rate=fast"}, {}, "--learning-rate"},
           {{"--momentum=1"}, {}, "--momentum"},
           {{"--threads=1000"}, {}, "--threads"},
           {{"--metrics-port=70000"}, {}, "--metrics-port"},
           {{"--lr-schedule=step"}, {}, "--lr-schedule"},
           {{"--frobnicate=1"}, {}, "unknown flag --frobnicate"},
           {{"--seed"}, {}, "--seed needs a value"},
           {{"--replicas=0"}, {}, "--replicas"},
           {{"--cross-device-ops=nccl"}, {}, "--cross-device-ops"},
           {{"--ps-mode=eventual"}, {}, "--ps-mode"},
           {{"--backup-workers=-1"}, {}, "--backup-workers"},
           {{"--peer-timeout=0"}, {}, "--peer-timeout"},
           {{"--recovery=Sometimes"},
            {},
            "--recovery: \"Sometimes\" is not InPlace or RestartGroup"},
           {{}, {{"LOCKSTEP_RECOVERY", "inplace"}}, "--recovery: \"inplace\""},
           {{"--rejoin-timeout=0"}, {}, "--rejoin-timeout"},
           {{"--leave-window-ms=0"}, {}, "--leave-window-ms"},
           {{}, {{"LOCKSTEP_ATTEMPT", "-1"}}, "LOCKSTEP_ATTEMPT \"-1\" is not a non-negative"},
           {{"--device=tpu"}, {}, "--device"},
           {{"--precision=fp8"}, {}, "--precision"},
           {{"--tf32=maybe"}, {}, "--tf32"},
           {{"--collective=mpi"}, {}, "--collective"},
           {{"--log-format=xml"}, {}, "--log-format"},
           {{"--strategy="}, {}, "strategy \"\" is not one of"},
           {{"--device=cpu", "--precision=mixed_float16"},
            {},
            "--precision mixed_float16 needs a GPU"},
           {{"--device=cpu", "--collective=nccl"}, {}, "--collective nccl needs GPU replicas"},
           {{"--strategy=Horovod"}, {}, "strategy \"Horovod\" is not one of"},
           {{}, {{"LOCKSTEP_STRATEGY", "TPU"}}, "strategy \"TPU\""},
           {{}, {{"TF_CONFIG", "{not json"}}, "TF_CONFIG"},
           {{},
            {{"TF_CONFIG", R"({"cluster":{},"task":{"type":"worker","index":0}})"}},
            "TF_CONFIG"},
       }) {
    absl::StatusOr<TrainerConfig> r = ParseTrainerConfig(c.args, c.env);
    ASSERT_FALSE(r.ok()) << c.want;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(c.want));
  }
}

// A model file's compile config supplies the optimizer; flags override it.
TEST(TrainerFlagsTest, AModelFilesCompileConfigUnlessFlagsSayOtherwise) {
  const std::string path = ::testing::TempDir() + "/compiled-model.json";
  {
    std::ofstream f(path);
    f << R"({"module": "keras", "class_name": "Sequential", "config": {"name": "s", "layers": []},
             "compile_config": {"loss": "sparse_categorical_crossentropy",
               "optimizer": {"module": "keras.optimizers", "class_name": "RMSprop",
                 "config": {"learning_rate": 0.005, "rho": 0.8, "clipnorm": 1.0}}}})";
  }
  auto c = ParseTrainerConfig({"--model=" + path}, {});
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(ApplyModelCompileConfig(&*c).ok());
  EXPECT_EQ(c->optimizer, "rmsprop");
  EXPECT_FLOAT_EQ(c->learning_rate, 0.005f);
  EXPECT_EQ(c->lr_schedule, "constant");
  EXPECT_NE(c->keras_optimizer.find("\"rho\":0.8"), std::string::npos) << c->keras_optimizer;

  auto lr = ParseTrainerConfig({"--model=" + path, "--learning-rate=0.1"}, {});
  ASSERT_TRUE(ApplyModelCompileConfig(&*lr).ok());
  EXPECT_EQ(lr->optimizer, "rmsprop");
  EXPECT_NE(lr->keras_optimizer.find("\"learning_rate\":0.1"), std::string::npos);

  auto flag = ParseTrainerConfig({"--model=" + path, "--optimizer=sgd"}, {});
  ASSERT_TRUE(ApplyModelCompileConfig(&*flag).ok());
  EXPECT_EQ(flag->optimizer, "sgd");
  EXPECT_EQ(flag->keras_optimizer, "");

  auto ps = ParseTrainerConfig({"--model=" + path, "--strategy=ParameterServer"}, {});
  ASSERT_TRUE(ps.ok()) << ps.status();
  EXPECT_NE(ApplyModelCompileConfig(&*ps).message().find("clipnorm"), std::string::npos);
  std::remove(path.c_str());
}

// Compile metrics beyond the accuracy family are named in a warning, not dropped silently;
// metric objects, per-output lists and dicts and weighted_metrics are all read.
TEST(TrainerFlagsTest, UnreportedCompileMetricsAreNamed) {
  const std::string path = ::testing::TempDir() + "/metrics-model.json";
  {
    std::ofstream f(path);
    f << R"({"class_name": "Sequential", "config": {"name": "s", "layers": []},
             "compile_config": {"loss": "mse",
               "metrics": [["accuracy", "mae"], {"out2": ["acc", "AUC"]},
                           {"module": "keras.metrics", "class_name": "SparseCategoricalAccuracy",
                            "config": {"name": "sca"}},
                           {"module": "keras.metrics", "class_name": "Precision",
                            "config": {"name": "p"}}],
               "weighted_metrics": ["top_k_categorical_accuracy"]}})";
  }
  auto c = ParseTrainerConfig({"--model=" + path, "--optimizer=sgd"}, {});
  ASSERT_TRUE(c.ok());
  std::vector<std::string> warnings;
  ASSERT_TRUE(ApplyModelCompileConfig(&*c, &warnings).ok());
  ASSERT_EQ(warnings.size(), 4u);
  EXPECT_THAT(warnings[0], HasSubstr("metric mae is not reported"));
  EXPECT_THAT(warnings[1], HasSubstr("metric AUC is not reported"));
  EXPECT_THAT(warnings[2], HasSubstr("metric Precision is not reported"));
  EXPECT_THAT(warnings[3], HasSubstr("metric top_k_categorical_accuracy is not reported"));
  std::remove(path.c_str());
}

// A mixed dtype policy on the model's layers is the precision on GPUs unless --precision
// says otherwise; on the CPU the model trains in float32 instead of failing.
TEST(TrainerFlagsTest, TheModelsDtypePolicyIsThePrecisionOnGpus) {
  const std::string path = ::testing::TempDir() + "/mixed-model.json";
  {
    std::ofstream f(path);
    f << R"({"class_name": "Sequential", "config": {"name": "s", "layers": [
             {"class_name": "Dense", "config": {"name": "d", "units": 3,
               "batch_input_shape": [null, 4],
               "dtype": {"module": "keras", "class_name": "DTypePolicy",
                         "config": {"name": "mixed_bfloat16"}}}}]}})";
  }
  auto c = ParseTrainerConfig({"--model=" + path, "--device=cpu"}, {});
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(ApplyModelCompileConfig(&*c).ok());
  EXPECT_EQ(c->model_precision, Precision::kMixedBfloat16);
  EXPECT_EQ(c->precision, Precision::kFloat32);
  EXPECT_FALSE(c->precision_from_flag);
  absl::StatusOr<Placement> p = PlaceReplicas(*c);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_FALSE(p->gpu);
  EXPECT_FALSE(p->precision.has_value());
  auto flag = ParseTrainerConfig({"--model=" + path, "--precision=float32"}, {});
  ASSERT_TRUE(flag.ok());
  EXPECT_TRUE(flag->precision_from_flag);
  std::remove(path.c_str());
}

TEST(TrainerFlagsTest, ThreadsAutoAreTheCpusTheProcessMayUse) {
  absl::StatusOr<TrainerConfig> c = ParseTrainerConfig({"--threads=auto"}, {});
  ASSERT_TRUE(c.ok()) << c.status();
  const CpuLimit limit = ReadCpuLimit();
  EXPECT_EQ(c->threads, limit.cpus);
  EXPECT_EQ(c->threads_auto, limit.Describe());
  EXPECT_THAT(c->threads_auto, HasSubstr("in the affinity mask"));
  // A count given after auto wins, and says nothing of auto.
  c = ParseTrainerConfig({"--threads=auto", "--threads=3"}, {});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->threads, 3);
  EXPECT_EQ(c->threads_auto, "");
  EXPECT_THAT(ParseTrainerConfig({"--threads=some"}, {}).status().message(),
              HasSubstr("--threads"));
  // auto is the default.
  c = ParseTrainerConfig({}, {});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->threads, limit.cpus);
  EXPECT_EQ(c->threads_auto, limit.Describe());
}

TEST(TrainerFlagsTest, ThreadsAutoTakesLockstepLocalsShare) {
  const CpuLimit limit = ReadCpuLimit();
  absl::StatusOr<TrainerConfig> c = ParseTrainerConfig({}, {{"LOCKSTEP_CPU_LIMIT", "1"}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->threads, 1);
  EXPECT_THAT(c->threads_auto, HasSubstr("LOCKSTEP_CPU_LIMIT=1 of "));
  c = ParseTrainerConfig({"--threads=auto"}, {{"LOCKSTEP_CPU_LIMIT", "512"}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->threads, std::min(limit.cpus, 256));
  // A count given wins over the share; a share that is not a number is refused by name.
  c = ParseTrainerConfig({"--threads=3"}, {{"LOCKSTEP_CPU_LIMIT", "1"}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->threads, 3);
  EXPECT_THAT(ParseTrainerConfig({}, {{"LOCKSTEP_CPU_LIMIT", "two"}}).status().message(),
              HasSubstr("LOCKSTEP_CPU_LIMIT \"two\""));
}

TEST(ProgressTrackerTest, ReportsStepLossRateCheckpointAndEta) {
  ProgressTracker p(100, /*warmup=*/2);
  for (int i = 1; i <= 10; ++i) p.Step(i, 0, 1.0, 0.5, 64, i * 0.01);  // 6400 samples/s
  p.Checkpointed(10);
  nlohmann::json j = p.ProgressJson();
  EXPECT_EQ(j["step"], 10);
  EXPECT_EQ(j["totalSteps"], 100);
  EXPECT_EQ(j["epoch"], 0);
  EXPECT_DOUBLE_EQ(j["loss"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(j["metrics"]["accuracy"].get<double>(), 0.5);
  EXPECT_NEAR(j["samplesPerSecond"].get<double>(), 6400, 1);
  EXPECT_EQ(j["lastCheckpointStep"], 10);
  EXPECT_EQ(j["estimatedRemainingSeconds"], 1);  // 90 steps of 64 at 6400/s = 0.9 s
  EXPECT_NEAR(p.SteadySamplesPerSecond(), 6400, 1);
  EXPECT_THAT(p.MetricsText(), HasSubstr("lockstep_trainer_step 10\n"));
  EXPECT_THAT(p.MetricsText(), HasSubstr("lockstep_trainer_last_checkpoint_step 10\n"));
}

// Step times in a histogram kept across scrapes; the process metrics every client exports.
TEST(ProgressTrackerTest, StepTimesAreAHistogramBesideTheProcessMetrics) {
  ProgressTracker p(100);
  p.Step(1, 0, 1.0, 0.5, 64, 10.0);  // the first step has no predecessor: not timed
  p.Step(2, 0, 1.0, 0.5, 64, 10.004);
  p.Step(3, 0, 1.0, 0.5, 64, 10.024);
  const std::string text = p.MetricsText();
  EXPECT_THAT(text, HasSubstr("# TYPE lockstep_trainer_step_duration_seconds histogram\n"));
  EXPECT_THAT(text, HasSubstr("lockstep_trainer_step_duration_seconds_count 2\n"));
  EXPECT_THAT(text, HasSubstr("lockstep_trainer_step_duration_seconds_bucket{le=\"0.005\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("lockstep_trainer_step_duration_seconds_bucket{le=\"0.025\"} 2\n"));
  // Scraped again, the same counts: a histogram is cumulative, not reset by a scrape.
  EXPECT_THAT(p.MetricsText(), HasSubstr("lockstep_trainer_step_duration_seconds_count 2\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE process_cpu_seconds_total counter\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE lockstep_trainer_recoveries_total counter\n"));
  for (const char* gauge : {"process_resident_memory_bytes ", "process_start_time_seconds ",
                            "process_open_fds ", "process_max_fds "}) {
    const size_t at = text.find(std::string("\n") + gauge);
    ASSERT_NE(at, std::string::npos) << gauge;
    EXPECT_GT(std::stod(text.substr(at + 1 + std::string(gauge).size())), 0) << gauge;
  }
}

TEST(ProgressTrackerTest, CountsTheCorruptRecordsSkipped) {
  ProgressTracker p(100);
  EXPECT_THAT(p.MetricsText(), HasSubstr("lockstep_trainer_corrupt_records_skipped_total 0\n"));
  p.SetCorruptData(3, 5000);
  EXPECT_THAT(p.MetricsText(), HasSubstr("lockstep_trainer_corrupt_records_skipped_total 3\n"));
  EXPECT_THAT(p.MetricsText(), HasSubstr("lockstep_trainer_corrupt_bytes_unreadable_total 5000\n"));
}

TEST(ProgressTrackerTest, KeepsTheLastRecoveries) {
  ProgressTracker p(100);
  EXPECT_FALSE(p.ProgressJson().contains("recoveries"));
  for (int i = 1; i <= 12; ++i) {
    p.Recovered({.epoch = i, .replaced = "worker 1", .seconds = 0.5 * i, .resumed_step = 10 * i});
  }
  nlohmann::json j = p.ProgressJson();
  ASSERT_EQ(j["recoveries"].size(), 10u);  // the last ten
  EXPECT_EQ(j["recoveries"][0]["epoch"], 3);
  EXPECT_EQ(j["recoveries"][9]["resumedStep"], 120);
  EXPECT_EQ(j["recoveries"][9]["replaced"], "worker 1");
  EXPECT_THAT(p.MetricsText(), HasSubstr("lockstep_trainer_recoveries_total 12\n"));
  EXPECT_THAT(p.MetricsText(), HasSubstr("lockstep_trainer_last_recovery_seconds 6\n"));
}

}  // namespace
}  // namespace lockstep::trainer
