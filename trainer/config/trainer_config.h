#pragma once
// TrainerConfig: everything lockstep-trainer was told, by flags and environment, as typed
// values. The choices that steer the program (strategy, device, precision, collective backend,
// cross-device ops, parameter-server mode) are enums, parsed once at the edge (trainer/cli)
// with the Parse.../...Name pair of each; nothing deeper compares their spellings. Each pair
// round-trips: Parse(Name(v)) == v, and Parse of anything else is InvalidArgument
// ("\"x\" is not one of a, b, c"), which the caller prefixes with the flag's name.
// Thread-safety: plain values; the functions are pure.

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "trainer/config/tf_config.h"

namespace lockstep::trainer {

// tf.distribute's strategies (LOCKSTEP_STRATEGY, or --strategy).
enum class Strategy {
  kOneDevice,
  kMirrored,
  kCentralStorage,
  kMultiWorkerMirrored,
  kParameterServer,
};
// Where replicas run: auto takes the GPUs when any is visible.
enum class Device { kAuto, kCpu, kGpu };
enum class Precision { kFloat32, kMixedFloat16, kMixedBfloat16 };
// MultiWorkerMirrored's backend: auto takes the first enabled candidate (collective_choice.h).
enum class CollectiveBackend { kAuto, kNccl, kRing };
// Mirrored's gradient reduction (tf.distribute's cross_device_ops).
enum class CrossDeviceOps { kAllReduce, kHierarchicalCopy, kReduceToOneDevice };
enum class PsMode { kAsync, kSync };

absl::StatusOr<Strategy> ParseStrategy(const std::string& s);
std::string StrategyName(Strategy v);
absl::StatusOr<Device> ParseDevice(const std::string& s);
std::string DeviceName(Device v);
absl::StatusOr<Precision> ParsePrecision(const std::string& s);
std::string PrecisionName(Precision v);
absl::StatusOr<CollectiveBackend> ParseCollectiveBackend(const std::string& s);
std::string CollectiveBackendName(CollectiveBackend v);
absl::StatusOr<CrossDeviceOps> ParseCrossDeviceOps(const std::string& s);
std::string CrossDeviceOpsName(CrossDeviceOps v);
absl::StatusOr<PsMode> ParsePsMode(const std::string& s);
std::string PsModeName(PsMode v);

// Strategies whose variables live on the host (no loss scaler can skip a step there).
inline bool VariablesOnHost(Strategy s) {
  return s == Strategy::kCentralStorage || s == Strategy::kParameterServer;
}

struct TrainerConfig {
  std::string model = "mlp";
  std::string dataset = "fashion-mnist";  // or "synthetic", or "spec" (from --data-spec)
  std::string data_spec;                  // --data-spec: where the user's data is, and its form
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  int64_t synthetic_size = 10000;
  int64_t epochs = 5;
  std::optional<int64_t> steps;  // overrides epochs
  int64_t batch_size = 64;       // global
  int64_t eval_batch_size = 0;   // 0: batch_size
  int64_t open_axis_size =
      0;             // --open-axis-size: the model inputs' open axes; 0: 32 on synthetic data
  std::string loss;  // --loss: every output's loss (a Keras name or JSON); "": the model's
  std::string optimizer = "adam";
  float learning_rate = 0.001f;
  float momentum = 0.9f;
  std::string lr_schedule = "cosine";  // or "constant"
  // The Keras optimizer a model file was compiled with (its JSON), used unless --optimizer
  // was given; --learning-rate and --lr-schedule override its learning rate and schedule.
  std::string keras_optimizer;
  bool optimizer_from_flag = false, learning_rate_from_flag = false, lr_schedule_from_flag = false;
  uint64_t seed = 1;
  std::string checkpoint_dir;               // empty: no checkpoints
  std::optional<int64_t> checkpoint_every;  // steps; default: once per epoch
  int keep_checkpoints = 3;
  // TensorBoard event files (--tensorboard-dir, else AIP_TENSORBOARD_LOG_DIR; empty: none),
  // a training step recorded every `tensorboard_every` steps.
  std::string tensorboard_dir;
  int64_t tensorboard_every = 100;
  // The trained model's export (--model-dir, else AIP_MODEL_DIR; empty: none): the chief writes
  // model.keras and model.h5 there when the run ends (model/keras_io.h).
  std::string model_dir;
  // Keras weights a run starts from (--initial-weights): a .keras archive, a Keras 3
  // .weights.h5 or a Keras 2 .h5.
  std::string initial_weights;
  int threads = 1;  // the command line's default is auto (cpu_limit.h)
  // --threads=auto: how the count was found (cpu_limit.h's CpuLimit::Describe); "" when given.
  std::string threads_auto;
  int metrics_port = 9464;  // 0: no progress server
  // Whether a taken metrics port fails the run: when --metrics-port names it, or in a pod
  // (LOCKSTEP_JOB_NAME set), where the operator polls it. Otherwise (a run by hand beside
  // another trainer) a taken default port is a warning.
  bool metrics_port_required = false;
  bool json_logs = false;  // --log-format=json, as lockstep-operator's
  // Strategies.
  int replicas = 1;  // Mirrored/CentralStorage: replicas (threads)
  CrossDeviceOps cross_device_ops = CrossDeviceOps::kAllReduce;
  int64_t peer_timeout_seconds = 30;         // heartbeats: a silent peer is lost after this
  int64_t collective_timeout_seconds = 300;  // a collective with no progress fails after this
  // MultiWorkerMirrored after a lost peer (--recovery, else LOCKSTEP_RECOVERY): in place, the
  // survivors keep their state and wait up to `rejoin_timeout_seconds` for the lost rank's
  // replacement; otherwise every task exits (retryable) and the group restarts from a
  // checkpoint.
  bool recover_in_place = false;
  int64_t rejoin_timeout_seconds = 300;
  // In place: how long the coordination service's host, asked to stop, trains on watching
  // whether other members stop too before it leaves alone (--leave-window-ms).
  int64_t leave_window_ms = 2000;
  // An elastic MultiWorkerMirrored group (--elastic-max-workers, else
  // LOCKSTEP_ELASTIC_MAX_WORKERS): workers join and leave the running group, up to this many
  // (0: the group is fixed by TF_CONFIG).
  int elastic_max_workers = 0;
  // GPUs.
  Device device = Device::kAuto;
  Precision precision = Precision::kFloat32;
  bool precision_from_flag = false;
  // A model file's dtype policy (a mixed one): the precision on GPUs unless --precision says
  // otherwise; on the CPU the model trains in float32.
  Precision model_precision = Precision::kFloat32;
  bool tf32 = true;
  CollectiveBackend collective = CollectiveBackend::kAuto;  // MultiWorkerMirrored
  PsMode ps_mode = PsMode::kAsync;                          // ParameterServer
  int backup_workers = 0;  // sync mode: gradients of N-b workers per step
  bool help = false;
  bool version = false;

  // From the environment (DESIGN section 3).
  std::optional<TfConfig> tf_config;
  Strategy strategy = Strategy::kOneDevice;  // LOCKSTEP_STRATEGY (or --strategy)
  std::string job_token;                     // LOCKSTEP_JOB_TOKEN
  std::string bind_address = "0.0.0.0";      // LOCKSTEP_POD_IP when set
  std::string termination_log;               // LOCKSTEP_TERMINATION_LOG, else /dev/termination-log
  int attempt = 0;                           // LOCKSTEP_ATTEMPT: the job's attempt
};

// The chief and worker tasks of TF_CONFIG (1 without TF_CONFIG).
int TrainingTasks(const TrainerConfig& c);

}  // namespace lockstep::trainer
