#pragma once
// The lockstep-trainer command line and environment, parsed into one TrainerConfig. Pure, so
// every flag, default and error is tested without training. Errors name the flag or variable.
// Thread-safety: pure functions.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "trainer/config/tf_config.h"

namespace lockstep::trainer {

struct TrainerConfig {
  std::string model = "mlp";
  std::string dataset = "fashion-mnist";  // or "synthetic"
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  int64_t synthetic_size = 10000;
  int64_t epochs = 5;
  std::optional<int64_t> steps;  // overrides epochs
  int64_t batch_size = 64;       // global
  std::string optimizer = "adam";
  float learning_rate = 0.001f;
  float momentum = 0.9f;
  std::string lr_schedule = "cosine";  // or "constant"
  uint64_t seed = 1;
  std::string checkpoint_dir;               // empty: no checkpoints
  std::optional<int64_t> checkpoint_every;  // steps; default: once per epoch
  int keep_checkpoints = 3;
  int threads = 1;
  int metrics_port = 9464;  // 0: no progress server
  // Strategies.
  int replicas = 1;                             // Mirrored/CentralStorage: replicas (threads)
  std::string cross_device_ops = "all-reduce";  // or hierarchical-copy, reduce-to-one-device
  int64_t peer_timeout_seconds = 30;            // heartbeats: a silent peer is lost after this
  int64_t collective_timeout_seconds = 300;     // a collective with no progress fails after this
  // GPUs.
  std::string device = "auto";        // auto, cpu or gpu
  std::string precision = "float32";  // or mixed_float16, mixed_bfloat16
  bool tf32 = true;
  std::string collective = "auto";  // MultiWorkerMirrored: auto, nccl or ring
  std::string ps_mode = "async";    // ParameterServer: async or sync
  int backup_workers = 0;           // sync mode: gradients of N-b workers per step
  bool help = false;
  bool version = false;

  // From the environment (DESIGN section 3).
  std::optional<TfConfig> tf_config;
  std::string strategy = "OneDevice";    // LOCKSTEP_STRATEGY (or --strategy)
  std::string job_token;                 // LOCKSTEP_JOB_TOKEN
  std::string bind_address = "0.0.0.0";  // LOCKSTEP_POD_IP when set
  std::string termination_log;           // LOCKSTEP_TERMINATION_LOG, else /dev/termination-log
};

// LOCKSTEP_TERMINATION_LOG, else /dev/termination-log (known even when the flags are bad).
std::string TerminationLogPath(const std::map<std::string, std::string>& env);

absl::StatusOr<TrainerConfig> ParseTrainerConfig(const std::vector<std::string>& args,
                                                 const std::map<std::string, std::string>& env);
std::string TrainerUsage();

}  // namespace lockstep::trainer
