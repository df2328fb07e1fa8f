#include "trainer/cli/trainer_flags.h"

#include "trainer/keras/model_loader.h"
#include "trainer/model/builtin_models.h"
#include "trainer/model/model.h"
#include "trainer/optim/keras_optimizer.h"

#include <algorithm>
#include <charconv>
#include <optional>

namespace lockstep::trainer {
namespace {

absl::Status Bad(const std::string& flag, const std::string& value, const std::string& want) {
  return absl::InvalidArgumentError("--" + flag + ": \"" + value + "\" is not " + want);
}

// An enum flag: the parser's error, prefixed with the flag's name.
template <typename E>
absl::Status ParseInto(const std::string& flag, absl::StatusOr<E> parsed, E* out) {
  if (!parsed.ok()) {
    return absl::InvalidArgumentError("--" + flag + ": " + std::string(parsed.status().message()));
  }
  *out = *parsed;
  return absl::OkStatus();
}

template <typename T>
bool ParseNumber(const std::string& s, T* out) {
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && end == s.data() + s.size();
}

bool ParseFloat(const std::string& s, float* out) {
  try {
    size_t used = 0;
    *out = std::stof(s, &used);
    return used == s.size();
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace

absl::Status ApplyModelCompileConfig(TrainerConfig* c, std::vector<std::string>* warnings) {
  absl::StatusOr<nlohmann::json> doc = ReadModelDocument(c->model);
  if (!doc.ok()) {
    return absl::InvalidArgumentError("--model: " + std::string(doc.status().message()));
  }
  c->model_precision = *ParsePrecision(keras::DTypePolicyOf(*doc));
  const nlohmann::json tc = keras::TrainingConfigOf(*doc);
  if (!tc.is_object()) return absl::OkStatus();
  if (warnings != nullptr) {
    for (const std::string& m : keras::UnreportedMetrics(tc)) {
      warnings->push_back("--model " + c->model + ": its compile config's metric " + m +
                          " is not reported (the trainer reports the loss and the accuracy)");
    }
  }
  if (c->optimizer_from_flag) return absl::OkStatus();
  nlohmann::json opt =
      tc.contains("optimizer") ? tc["optimizer"] : tc.value("optimizer_config", nlohmann::json());
  if (opt.is_null()) return absl::OkStatus();
  absl::StatusOr<KerasOptimizerOptions> o = ParseKerasOptimizer(opt);
  if (!o.ok()) {
    return absl::InvalidArgumentError("--model " + c->model + ": its compile config's " +
                                      std::string(o.status().message()) +
                                      " (--optimizer overrides it)");
  }
  if (opt.is_string()) opt = {{"class_name", opt}, {"config", nlohmann::json::object()}};
  if (c->learning_rate_from_flag || c->lr_schedule_from_flag) {
    // A flag's learning rate or schedule replaces the file's (and its schedule object).
    if (!c->learning_rate_from_flag) c->learning_rate = o->learning_rate;
    opt["config"]["learning_rate"] = c->learning_rate;
  } else {
    c->learning_rate = o->learning_rate;
    c->lr_schedule = "constant";  // Keras keeps a plain learning rate constant
  }
  if (c->strategy == Strategy::kParameterServer && (o->clipnorm > 0 || o->global_clipnorm > 0)) {
    return absl::InvalidArgumentError(
        "--model " + c->model +
        ": clipnorm and global_clipnorm need every gradient of a tensor in one place; "
        "ParameterServer updates shards of tensors on several tasks (clipvalue works)");
  }
  c->optimizer = o->kind;
  c->keras_optimizer = opt.dump();
  return absl::OkStatus();
}

std::string TrainerUsage() {
  return R"(usage: lockstep-trainer [flags]

Trains a model with a tf.distribute strategy and serves GET /progress and /metrics.

  --model=mlp|cnn|mlp-large|FILE  a built-in model, or a Keras model file: model.to_json()
                                  (Keras 2 or 3), a .keras archive's config.json, or a
                                  TensorFlow.js model.json (default mlp); a file runs on the
                                  GPUs when each of its layers has a GPU op, else on the CPU
  --dataset=fashion-mnist|synthetic   (default fashion-mnist)
  --data-spec=FILE                the user's data instead: TFRecord files of tf.train.Example,
                                  NumPy arrays, CSV files or image folders, described in a JSON
                                  data spec
  --data-dir=DIR                  Fashion-MNIST IDX files (default /usr/share/datasets/fashion-mnist)
  --synthetic-size=N              examples in the synthetic dataset (default 10000)
  --epochs=N | --steps=N          how long to train (default 5 epochs)
  --batch-size=N                  global batch size (default 64)
  --eval-batch-size=N             examples per evaluation batch (default: --batch-size)
  --open-axis-size=N              the size of every axis a model file's inputs leave open
                                  (None: a sequence's length, an image's height and width);
                                  default 32 with --dataset synthetic, else required for such
                                  a model
  --loss=NAME|JSON                every output's loss, over the file's compile loss or the one
                                  inferred from its output layer: a Keras loss name
                                  (mean_squared_error, binary_crossentropy...) or its JSON
                                  ({"class_name": "CategoricalCrossentropy", "config": {...}})
  --optimizer=adam|sgd            (default adam)
  --learning-rate=LR              (default 0.001 for adam, 0.01 for sgd)
  --lr-schedule=cosine|constant   cosine decay to zero over the run (default cosine)
  --momentum=M                    sgd momentum (default 0.9)
  --seed=N                        weights, shuffling and dropout (default 1)
  --checkpoint-dir=DIR            write checkpoints there and resume from the newest valid one
  --checkpoint-every=N            steps between checkpoints (default: one per epoch)
  --keep-checkpoints=K            (default 3)
  --tensorboard-dir=DIR           TensorBoard event files: DIR/train (steps and epochs) and
                                  DIR/validation (each epoch's test-set evaluation), written by
                                  the chief (default: AIP_TENSORBOARD_LOG_DIR, else none)
  --tensorboard-every=N           steps between the training steps recorded (default 100)
  --model-dir=DIR                 the chief writes the trained model there: model.keras (Keras 3),
                                  model.h5 (Keras 2 weights) and model.onnx (default:
                                  AIP_MODEL_DIR, else none; needs a Keras model file)
  --initial-weights=FILE          start from Keras weights: a .keras archive, a .weights.h5 or a
                                  Keras 2 .h5 (a checkpoint to resume from still wins)
  --threads=N                     GEMM threads (default 1)
  --metrics-port=PORT             /progress and /metrics (default 9464; 0 turns it off)
  --log-format=text|json          log lines as text (default) or JSON objects

GPUs:
  --device=auto|cpu|gpu           auto: the GPUs when any is visible, else the CPU (default auto)
  --precision=float32|mixed_float16|mixed_bfloat16
                                  mixed: 16-bit activations and GEMM inputs, fp32 master
                                  weights; fp16 with dynamic loss scaling (default float32, or
                                  the model file's mixed dtype policy on GPUs)
  --tf32=true|false               fp32 GEMMs and convolutions on TF32 tensor cores (default true)
  --collective=auto|nccl|ring     MultiWorkerMirrored backend: auto picks NCCL for GPU replicas
                                  and the TCP ring for CPU ones (default auto)

Strategies (LOCKSTEP_STRATEGY, or --strategy):
  --strategy=OneDevice|Mirrored|CentralStorage|MultiWorkerMirrored|ParameterServer
  --replicas=N                    Mirrored/CentralStorage replicas on this machine (default 1)
  --cross-device-ops=all-reduce|hierarchical-copy|reduce-to-one-device   (Mirrored)
  --peer-timeout=SECONDS          a peer silent this long is lost (default 30)
  --collective-timeout=SECONDS    a collective with no progress this long fails (default 300)
  --recovery=InPlace|RestartGroup MultiWorkerMirrored after a lost peer: InPlace keeps the
                                  survivors' state and waits for the replacement; RestartGroup
                                  exits for a group restart from the last checkpoint (default
                                  LOCKSTEP_RECOVERY, else RestartGroup)
  --rejoin-timeout=SECONDS        InPlace: how long survivors wait for the group to re-form
                                  before exiting, retryable (default 300)
  --elastic-max-workers=N         MultiWorkerMirrored: workers may join and leave the running
                                  group, up to N workers; SIGTERM makes a worker leave at a step
                                  boundary (default LOCKSTEP_ELASTIC_MAX_WORKERS, else fixed)
  --ps-mode=async|sync            ParameterServer updates (default async)
  --backup-workers=B              sync mode: each step takes the first N-B workers' gradients
  --help                          this text

Environment: TF_CONFIG, LOCKSTEP_STRATEGY, LOCKSTEP_POD_IP (address to bind),
LOCKSTEP_JOB_TOKEN (presented to and required of peers), LOCKSTEP_TERMINATION_LOG
(default /dev/termination-log), LOCKSTEP_LOG=debug (debug log lines too),
AIP_MODEL_DIR, AIP_CHECKPOINT_DIR and AIP_TENSORBOARD_LOG_DIR (the defaults of --model-dir,
--checkpoint-dir and --tensorboard-dir).
Exit codes: 0 done; 2 bad flags or configuration; 3 bad data; 128+ retryable; 143 SIGTERM.
The manual: docs/reference/trainer.md in the repository.
)";
}

std::string TerminationLogPath(const std::map<std::string, std::string>& env) {
  auto it = env.find("LOCKSTEP_TERMINATION_LOG");
  return it != env.end() && !it->second.empty() ? it->second : "/dev/termination-log";
}

absl::StatusOr<TrainerConfig> ParseTrainerConfig(const std::vector<std::string>& args,
                                                 const std::map<std::string, std::string>& env) {
  TrainerConfig c;
  bool lr_set = false, dataset_set = false;
  std::optional<std::string> strategy;
  std::optional<std::string> recovery;
  std::optional<std::string> elastic_max;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string arg = args[i];
    if (arg.rfind("--", 0) != 0) {
      return absl::InvalidArgumentError("unexpected argument \"" + arg + "\"");
    }
    std::string name = arg.substr(2);
    std::string value;
    bool has_value = false;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    if (name == "help" || name == "version") {
      (name == "help" ? c.help : c.version) = true;
      continue;
    }
    if (!has_value) {
      if (i + 1 >= args.size()) return absl::InvalidArgumentError("--" + name + " needs a value");
      value = args[++i];
    }
    int64_t n = 0;
    auto positive = [&](int64_t* out) -> absl::Status {
      if (!ParseNumber(value, &n) || n < 1) return Bad(name, value, "a positive integer");
      *out = n;
      return absl::OkStatus();
    };
    absl::Status s;
    if (name == "model") {
      // A built-in name, or a Keras model file (model.to_json(), a .keras archive's
      // config.json, a TF.js model.json), which BuildModel reads and checks.
      if (value.empty()) return Bad(name, value, "mlp, cnn, mlp-large or a Keras model file");
      c.model = value;
    } else if (name == "data-spec") {
      if (value.empty()) return Bad(name, value, "a data-spec file");
      c.data_spec = value;
    } else if (name == "dataset") {
      dataset_set = true;
      if (value != "fashion-mnist" && value != "synthetic") {
        return Bad(name, value, "fashion-mnist or synthetic (or give --data-spec)");
      }
      c.dataset = value;
    } else if (name == "data-dir") {
      c.data_dir = value;
    } else if (name == "synthetic-size") {
      s = positive(&c.synthetic_size);
    } else if (name == "epochs") {
      s = positive(&c.epochs);
    } else if (name == "steps") {
      int64_t v = 0;
      s = positive(&v);
      c.steps = v;
    } else if (name == "batch-size") {
      s = positive(&c.batch_size);
    } else if (name == "eval-batch-size") {
      s = positive(&c.eval_batch_size);
    } else if (name == "open-axis-size") {
      s = positive(&c.open_axis_size);
    } else if (name == "loss") {
      if (value.empty()) return Bad(name, value, "a Keras loss name or its JSON");
      c.loss = value;
    } else if (name == "optimizer") {
      if (value != "adam" && value != "sgd") return Bad(name, value, "adam or sgd");
      c.optimizer = value;
      c.optimizer_from_flag = true;
    } else if (name == "learning-rate") {
      if (!ParseFloat(value, &c.learning_rate) || !(c.learning_rate > 0)) {
        return Bad(name, value, "a positive number");
      }
      lr_set = true;
      c.learning_rate_from_flag = true;
    } else if (name == "lr-schedule") {
      if (value != "cosine" && value != "constant") return Bad(name, value, "cosine or constant");
      c.lr_schedule = value;
      c.lr_schedule_from_flag = true;
    } else if (name == "momentum") {
      if (!ParseFloat(value, &c.momentum) || c.momentum < 0 || c.momentum >= 1) {
        return Bad(name, value, "a number in [0, 1)");
      }
    } else if (name == "seed") {
      if (!ParseNumber(value, &c.seed)) return Bad(name, value, "a non-negative integer");
    } else if (name == "checkpoint-dir") {
      c.checkpoint_dir = value;
    } else if (name == "checkpoint-every") {
      int64_t v = 0;
      s = positive(&v);
      c.checkpoint_every = v;
    } else if (name == "tensorboard-dir") {
      if (value.empty()) return Bad(name, value, "a directory");
      c.tensorboard_dir = value;
    } else if (name == "model-dir") {
      if (value.empty()) return Bad(name, value, "a directory");
      c.model_dir = value;
    } else if (name == "initial-weights") {
      if (value.empty()) return Bad(name, value, "a weights file");
      c.initial_weights = value;
    } else if (name == "tensorboard-every") {
      s = positive(&c.tensorboard_every);
    } else if (name == "keep-checkpoints") {
      int64_t v = 0;
      s = positive(&v);
      c.keep_checkpoints = static_cast<int>(std::min<int64_t>(v, 1000));
    } else if (name == "threads") {
      int64_t v = 0;
      s = positive(&v);
      if (s.ok() && v > 256) s = Bad(name, value, "a thread count from 1 to 256");
      c.threads = static_cast<int>(v);
    } else if (name == "log-format") {
      if (value != "text" && value != "json") return Bad(name, value, "text or json");
      c.json_logs = value == "json";
    } else if (name == "metrics-port") {
      if (!ParseNumber(value, &n) || n < 0 || n > 65535) return Bad(name, value, "a port");
      c.metrics_port = static_cast<int>(n);
      c.metrics_port_required = true;
    } else if (name == "strategy") {
      strategy = value;
    } else if (name == "replicas") {
      int64_t v = 0;
      s = positive(&v);
      if (s.ok() && v > 64) s = Bad(name, value, "a replica count from 1 to 64");
      c.replicas = static_cast<int>(v);
    } else if (name == "cross-device-ops") {
      s = ParseInto(name, ParseCrossDeviceOps(value), &c.cross_device_ops);
    } else if (name == "peer-timeout") {
      s = positive(&c.peer_timeout_seconds);
    } else if (name == "collective-timeout") {
      s = positive(&c.collective_timeout_seconds);
    } else if (name == "recovery") {
      recovery = value;
    } else if (name == "rejoin-timeout") {
      s = positive(&c.rejoin_timeout_seconds);
    } else if (name == "elastic-max-workers") {
      elastic_max = value;
    } else if (name == "device") {
      s = ParseInto(name, ParseDevice(value), &c.device);
    } else if (name == "precision") {
      s = ParseInto(name, ParsePrecision(value), &c.precision);
      c.precision_from_flag = true;
    } else if (name == "tf32") {
      if (value != "true" && value != "false") return Bad(name, value, "true or false");
      c.tf32 = value == "true";
    } else if (name == "collective") {
      s = ParseInto(name, ParseCollectiveBackend(value), &c.collective);
    } else if (name == "ps-mode") {
      s = ParseInto(name, ParsePsMode(value), &c.ps_mode);
    } else if (name == "backup-workers") {
      if (!ParseNumber(value, &n) || n < 0 || n > 64) return Bad(name, value, "0 to 64");
      c.backup_workers = static_cast<int>(n);
    } else {
      return absl::InvalidArgumentError("unknown flag --" + name + " (see --help)");
    }
    if (!s.ok()) return s;
  }
  if (!lr_set && c.optimizer == "sgd") c.learning_rate = 0.01f;
  if (!c.data_spec.empty()) {
    if (dataset_set) {
      return absl::InvalidArgumentError(
          "--data-spec and --dataset are alternatives: the spec says where the data is");
    }
    c.dataset = "spec";
  }
  if (c.device == Device::kCpu && c.precision != Precision::kFloat32) {
    return absl::InvalidArgumentError("--precision " + PrecisionName(c.precision) +
                                      " needs a GPU; --device cpu trains in float32");
  }
  if (c.device == Device::kCpu && c.collective == CollectiveBackend::kNccl) {
    return absl::InvalidArgumentError("--collective nccl needs GPU replicas (--device cpu)");
  }

  auto get = [&](const char* k) -> std::string {
    auto it = env.find(k);
    return it == env.end() ? "" : it->second;
  };
  if (std::string tf = get("TF_CONFIG"); !tf.empty()) {
    absl::StatusOr<TfConfig> parsed = ParseTfConfig(tf);
    if (!parsed.ok()) {
      return absl::InvalidArgumentError("TF_CONFIG: " + std::string(parsed.status().message()));
    }
    c.tf_config = *parsed;
  }
  // The flag wins over the environment.
  if (!strategy) {
    if (std::string s = get("LOCKSTEP_STRATEGY"); !s.empty()) strategy = s;
  }
  if (strategy) {
    absl::StatusOr<Strategy> parsed = ParseStrategy(*strategy);
    if (!parsed.ok()) {
      return absl::InvalidArgumentError("strategy " + std::string(parsed.status().message()));
    }
    c.strategy = *parsed;
  }
  if (!recovery) {
    if (std::string r = get("LOCKSTEP_RECOVERY"); !r.empty()) recovery = r;
  }
  if (recovery) {
    if (*recovery != "InPlace" && *recovery != "RestartGroup") {
      return Bad("recovery", *recovery, "InPlace or RestartGroup");
    }
    c.recover_in_place = *recovery == "InPlace";
  }
  if (!elastic_max) {
    if (std::string e = get("LOCKSTEP_ELASTIC_MAX_WORKERS"); !e.empty()) elastic_max = e;
  }
  if (elastic_max) {
    int64_t v = 0;
    if (!ParseNumber(*elastic_max, &v) || v < 1 || v > 1024) {
      return Bad("elastic-max-workers", *elastic_max, "a worker count from 1 to 1024");
    }
    c.elastic_max_workers = static_cast<int>(v);
  }
  c.job_token = get("LOCKSTEP_JOB_TOKEN");
  if (c.tensorboard_dir.empty()) c.tensorboard_dir = get("AIP_TENSORBOARD_LOG_DIR");
  if (c.model_dir.empty()) c.model_dir = get("AIP_MODEL_DIR");
  if (c.checkpoint_dir.empty()) c.checkpoint_dir = get("AIP_CHECKPOINT_DIR");
  if (std::string ip = get("LOCKSTEP_POD_IP"); !ip.empty()) c.bind_address = ip;
  if (!get("LOCKSTEP_JOB_NAME").empty()) c.metrics_port_required = true;
  c.termination_log = TerminationLogPath(env);
  return c;
}

}  // namespace lockstep::trainer
