// lockstep-trainer: the program in the trainer image (DESIGN section 3). Reads its flags and
// TF_CONFIG/LOCKSTEP_* variables, serves /progress and /metrics, trains, and ends with the exit
// code and JSON termination message the operator classifies.
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <new>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "trainer/cli/termination.h"
#include "trainer/cli/trainer_flags.h"
#include "trainer/kernels/cuda/gpu_available.h"
#include "trainer/strategy/data_parallel.h"
#include "trainer/strategy/evaluator.h"
#include "trainer/strategy/multi_worker.h"
#include "trainer/strategy/parameter_server.h"

extern char** environ;

namespace {

std::atomic<bool> g_stop{false};
extern "C" void OnTerm(int) { g_stop.store(true); }

std::map<std::string, std::string> Environment() {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv(*e);
    size_t eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return env;
}

}  // namespace

namespace {

// Where an uncaught exception's termination message goes (the flag's path once parsed).
std::string* g_termination_log = nullptr;

// An exception no caller handled, on any thread (std::bad_alloc when the model or the batch
// outgrew memory): a termination message and a permanent exit code, not an abort (134) that the
// operator would retry.
[[noreturn]] void Terminate() {
  using namespace lockstep::trainer;
  std::string what = "an uncaught exception";
  bool memory = false;
  try {
    if (std::exception_ptr e = std::current_exception()) std::rethrow_exception(e);
  } catch (const std::bad_alloc&) {
    memory = true;
    what = "out of memory: the model or --batch-size needs more memory than this machine has";
  } catch (const std::exception& e) {
    what = std::string("an uncaught exception: ") + e.what();
  } catch (...) {
  }
  WriteTerminationMessage(g_termination_log != nullptr ? *g_termination_log : "",
                          memory ? "BadConfig" : "InternalError", false, what);
  std::_Exit(memory ? kExitBadConfig : 1);
}

}  // namespace

namespace {

using namespace lockstep::trainer;

// The flags, TF_CONFIG and the model file's compile config, checked; an exit code when the run
// ends here (a bad configuration, --help, --version).
std::optional<int> Configure(const std::map<std::string, std::string>& env,
                             absl::StatusOr<TrainerConfig>& config) {
  if (!config.ok()) {
    WriteTerminationMessage(TerminationLogPath(env), "BadConfig", false,
                            std::string(config.status().message()));
    return kExitBadConfig;
  }
  if (config->json_logs) lockstep::common::SetLogFormat(lockstep::common::LogFormat::kJson);
  if (!config->help && !config->version) {
    std::vector<std::string> warnings;
    if (absl::Status s = ApplyModelCompileConfig(&*config, &warnings); !s.ok()) {
      WriteTerminationMessage(config->termination_log, "BadConfig", false,
                              std::string(s.message()));
      return kExitBadConfig;
    }
    for (const std::string& w : warnings) lockstep::common::LogWarning("trainer", w);
    if (!config->threads_auto.empty()) {
      lockstep::common::LogInfo("trainer", "--threads=auto: ", config->threads_auto);
    }
  }
  if (config->help) {
    std::cout << TrainerUsage();
    return kExitOk;
  }
  if (config->version) {
    std::cout << "lockstep-trainer " << LOCKSTEP_VERSION << "\n"
              << "GPU libraries: " << lockstep::trainer::cuda::GpuLibraryVersions() << "\n";
    return kExitOk;
  }
  const int training_tasks = TrainingTasks(*config);
  if ((config->strategy == Strategy::kMirrored || config->strategy == Strategy::kCentralStorage) &&
      training_tasks > 1) {
    WriteTerminationMessage(
        config->termination_log, "BadConfig", false,
        StrategyName(config->strategy) + " trains in one task, and TF_CONFIG has " +
            std::to_string(training_tasks) + " chief and worker tasks; use MultiWorkerMirrored");
    return kExitBadConfig;
  }
  return std::nullopt;
}

// /progress and /metrics, when --metrics-port asks for them; an exit code when a port the
// operator relies on cannot be had.
std::optional<int> ServeEndpoints(const TrainerConfig& config, ProgressTracker* progress,
                                  std::unique_ptr<lockstep::common::EndpointServer>* server) {
  if (config.metrics_port <= 0) return std::nullopt;
  auto s = ServeProgress(progress, config.bind_address, config.metrics_port);
  if (!s.ok() && !config.metrics_port_required) {
    lockstep::common::LogWarning("trainer", s.status().message(),
                                 "; training without /progress and /metrics (--metrics-port "
                                 "picks another port, 0 turns them off)");
  } else if (!s.ok()) {
    WriteTerminationMessage(config.termination_log, "PortUnavailable", true,
                            std::string(s.status().message()));
    return kExitRetryable;
  } else {
    *server = std::move(*s);
    lockstep::common::LogInfo("trainer", "/progress and /metrics on ", config.bind_address, ":",
                              (*server)->port());
  }
  return std::nullopt;
}

// This task's part: an evaluator, a parameter server, or a trainer of the strategy.
absl::StatusOr<TrainResult> RunTask(const TrainerConfig& config, ProgressTracker* progress) {
  const std::string task = config.tf_config ? config.tf_config->task_type : "";
  if (task == "evaluator") return RunEvaluator(config, progress, &g_stop);
  if (task == "ps") return RunPsTask(config, &g_stop);
  switch (config.strategy) {
    case Strategy::kParameterServer:
      return RunPsTrainer(config, progress, &g_stop);
    case Strategy::kMultiWorkerMirrored:
      return RunMultiWorkerMirrored(config, progress, &g_stop);
    case Strategy::kMirrored:
    case Strategy::kCentralStorage:
      return RunMirrored(config, progress, &g_stop);
    case Strategy::kOneDevice:
      return RunOneDevice(config, progress, &g_stop);
  }
  return absl::UnknownError("no strategy ran");
}

// A failed run's termination message and exit code (DESIGN section 3: the operator retries the
// retryable ones).
int ExitFor(const absl::Status& status, const std::string& termination_log) {
  const std::string msg(status.message());
  switch (status.code()) {
    case absl::StatusCode::kCancelled:
      WriteTerminationMessage(termination_log, "Terminated", true, msg);
      return kExitTerminated;
    case absl::StatusCode::kAborted:  // a lost peer (comm/peer_lost.h), or the group took over
      WriteTerminationMessage(termination_log, "PeerLost", true, msg);
      return kExitRetryable;
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kInvalidArgument:
      WriteTerminationMessage(termination_log, "BadConfig", false, msg);
      return kExitBadConfig;
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kDataLoss:
      WriteTerminationMessage(termination_log, "BadData", false, msg);
      return kExitBadData;
    default:
      WriteTerminationMessage(termination_log, "TransientError", true, msg);
      return kExitRetryable;
  }
}

// The figures a finished run prints, which the examples and tests read.
void PrintResult(const TrainerConfig& config, const TrainResult& r) {
  if (r.evaluated && std::isnan(r.test_accuracy)) {
    // Every output a regression: no prediction is judged right or wrong.
    std::printf("final test loss: %.4f after %lld steps\n", r.test_loss,
                static_cast<long long>(r.steps));
  } else if (r.evaluated) {
    std::printf("final test accuracy: %.4f (loss %.4f) after %lld steps\n", r.test_accuracy,
                r.test_loss, static_cast<long long>(r.steps));
  } else if (r.no_test_data) {
    std::printf(
        "training done after %lld steps; no test data to evaluate (give the data spec "
        "validation files or a validation_split)\n",
        static_cast<long long>(r.steps));
  } else {
    // Only one task of a group evaluates: a zero here would read as a result.
    const bool has_chief = config.tf_config && !config.tf_config->Hosts("chief").empty();
    std::printf(
        "training done after %lld steps; %s evaluates the test set and prints the final "
        "test accuracy\n",
        static_cast<long long>(r.steps), has_chief ? "the chief" : "worker 0");
  }
  // Measured where the progress is tracked (the chief, else worker 0; each ParameterServer
  // worker for itself); elsewhere there is no figure to print.
  if (r.samples_per_second > 0) {
    std::printf("steady training samples/s: %.0f\n", r.samples_per_second);
  }
  if (r.data_wait_share >= 0) {
    std::printf("input pipeline: %.2f%% of the training time waiting for data\n",
                100.0 * r.data_wait_share);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::map<std::string, std::string> env = Environment();
  static std::string termination_log = TerminationLogPath(env);
  g_termination_log = &termination_log;
  std::set_terminate(Terminate);
  absl::StatusOr<TrainerConfig> config =
      ParseTrainerConfig(std::vector<std::string>(argv + 1, argv + argc), env);
  if (config.ok()) termination_log = config->termination_log;
  if (std::optional<int> done = Configure(env, config)) return *done;
  std::signal(SIGTERM, OnTerm);

  ProgressTracker progress(0);
  std::unique_ptr<lockstep::common::EndpointServer> server;
  if (std::optional<int> failed = ServeEndpoints(*config, &progress, &server)) return *failed;
  absl::StatusOr<TrainResult> r = RunTask(*config, &progress);
  if (!r.ok()) return ExitFor(r.status(), config->termination_log);
  PrintResult(*config, *r);
  std::optional<nlohmann::json> evaluation;
  if (r->evaluated) {
    evaluation = nlohmann::json{{"loss", r->test_loss}};
    if (!std::isnan(r->test_accuracy)) (*evaluation)["metrics"]["accuracy"] = r->test_accuracy;
  }
  WriteCompletionMessage(config->termination_log, absl::StrCat("trained ", r->steps, " steps"),
                         progress.ProgressJson(), std::move(evaluation));
  return kExitOk;
}
