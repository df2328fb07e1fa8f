#include "trainer/cli/trainer_flags.h"

#include "trainer/config/cpu_limit.h"
#include "trainer/keras/model_loader.h"
#include "trainer/model/builtin_models.h"
#include "trainer/model/model.h"
#include "trainer/optim/keras_optimizer.h"

#include <algorithm>
#include <charconv>
#include <initializer_list>
#include <iterator>
#include <limits>
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
  --threads=N|auto                CPU threads of the GEMMs, convolutions and element loops, one
                                  OpenMP pool (default auto: the CPUs the process may use, its
                                  cgroup's CPU limit or LOCKSTEP_CPU_LIMIT within its affinity
                                  mask)
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
  --leave-window-ms=MS            InPlace: how long the coordination service's host, stopped
                                  by SIGTERM, trains on watching for other tasks stopping too
                                  (the whole job: checkpoint and stop) before it leaves alone
                                  and the service moves (default 2000)
  --elastic-max-workers=N         MultiWorkerMirrored: workers may join and leave the running
                                  group, up to N workers; SIGTERM makes a worker leave at a step
                                  boundary (default LOCKSTEP_ELASTIC_MAX_WORKERS, else fixed)
  --ps-mode=async|sync            ParameterServer updates (default async)
  --backup-workers=B              sync mode: each step takes the first N-B workers' gradients
  --help                          this text

Environment: TF_CONFIG, LOCKSTEP_STRATEGY, LOCKSTEP_POD_IP (address to bind),
LOCKSTEP_JOB_TOKEN (presented to and required of peers), LOCKSTEP_ATTEMPT (the job's
attempt: a group's processes of other attempts are refused), LOCKSTEP_TERMINATION_LOG
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

namespace {

// A flag's value being applied: the config it sets, and what is settled only once every flag
// and the environment are read (the strategy, recovery and elastic bound also come from
// LOCKSTEP_* variables, which a flag overrides).
struct FlagValue {
  const std::string& name;
  const std::string& value;
  TrainerConfig& c;
  bool lr_set = false;
  bool dataset_set = false;
  bool threads_auto = true;  // --threads=auto, the default
  std::optional<std::string> strategy, recovery, elastic_max;

  absl::Status Bad(const std::string& want) const { return trainer::Bad(name, value, want); }
  template <typename T>
  absl::Status Positive(T* out, int64_t at_most = std::numeric_limits<int64_t>::max(),
                        const std::string& want = "a positive integer") const {
    int64_t n = 0;
    if (!ParseNumber(value, &n) || n < 1) return Bad("a positive integer");
    if (n > at_most) return Bad(want);
    *out = static_cast<T>(n);
    return absl::OkStatus();
  }
  absl::Status Text(std::string* out, const std::string& want) const {
    if (value.empty()) return Bad(want);
    *out = value;
    return absl::OkStatus();
  }
  absl::Status OneOf(std::initializer_list<std::string_view> allowed, const std::string& want,
                     std::string* out) const {
    if (std::find(allowed.begin(), allowed.end(), value) == allowed.end()) return Bad(want);
    *out = value;
    return absl::OkStatus();
  }
};

struct Flag {
  std::string_view name;
  absl::Status (*apply)(FlagValue& f);
};

using S = absl::Status;
// Every flag but --help and --version, in TrainerUsage's order.
constexpr Flag kFlags[] = {
    // A built-in name, or a Keras model file (model.to_json(), a .keras archive's config.json,
    // a TF.js model.json), which BuildModel reads and checks.
    {"model",
     [](FlagValue& f) { return f.Text(&f.c.model, "mlp, cnn, mlp-large or a Keras model file"); }},
    {"data-spec", [](FlagValue& f) { return f.Text(&f.c.data_spec, "a data-spec file"); }},
    {"dataset",
     [](FlagValue& f) {
       f.dataset_set = true;
       return f.OneOf({"fashion-mnist", "synthetic"},
                      "fashion-mnist or synthetic (or give --data-spec)", &f.c.dataset);
     }},
    {"data-dir",
     [](FlagValue& f) {
       f.c.data_dir = f.value;
       return S();
     }},
    {"synthetic-size", [](FlagValue& f) { return f.Positive(&f.c.synthetic_size); }},
    {"epochs", [](FlagValue& f) { return f.Positive(&f.c.epochs); }},
    {"steps",
     [](FlagValue& f) {
       int64_t v = 0;
       S s = f.Positive(&v);
       f.c.steps = v;
       return s;
     }},
    {"batch-size", [](FlagValue& f) { return f.Positive(&f.c.batch_size); }},
    {"eval-batch-size", [](FlagValue& f) { return f.Positive(&f.c.eval_batch_size); }},
    {"open-axis-size", [](FlagValue& f) { return f.Positive(&f.c.open_axis_size); }},
    {"loss", [](FlagValue& f) { return f.Text(&f.c.loss, "a Keras loss name or its JSON"); }},
    {"optimizer",
     [](FlagValue& f) {
       f.c.optimizer_from_flag = true;
       return f.OneOf({"adam", "sgd"}, "adam or sgd", &f.c.optimizer);
     }},
    {"learning-rate",
     [](FlagValue& f) {
       if (!ParseFloat(f.value, &f.c.learning_rate) || !(f.c.learning_rate > 0)) {
         return f.Bad("a positive number");
       }
       f.lr_set = f.c.learning_rate_from_flag = true;
       return S();
     }},
    {"lr-schedule",
     [](FlagValue& f) {
       f.c.lr_schedule_from_flag = true;
       return f.OneOf({"cosine", "constant"}, "cosine or constant", &f.c.lr_schedule);
     }},
    {"momentum",
     [](FlagValue& f) {
       if (!ParseFloat(f.value, &f.c.momentum) || f.c.momentum < 0 || f.c.momentum >= 1) {
         return f.Bad("a number in [0, 1)");
       }
       return S();
     }},
    {"seed",
     [](FlagValue& f) {
       return ParseNumber(f.value, &f.c.seed) ? S() : f.Bad("a non-negative integer");
     }},
    {"checkpoint-dir",
     [](FlagValue& f) {
       f.c.checkpoint_dir = f.value;
       return S();
     }},
    {"checkpoint-every",
     [](FlagValue& f) {
       int64_t v = 0;
       S s = f.Positive(&v);
       f.c.checkpoint_every = v;
       return s;
     }},
    {"keep-checkpoints",
     [](FlagValue& f) {
       int64_t v = 0;
       S s = f.Positive(&v);
       f.c.keep_checkpoints = static_cast<int>(std::min<int64_t>(v, 1000));
       return s;
     }},
    {"tensorboard-dir", [](FlagValue& f) { return f.Text(&f.c.tensorboard_dir, "a directory"); }},
    {"tensorboard-every", [](FlagValue& f) { return f.Positive(&f.c.tensorboard_every); }},
    {"model-dir", [](FlagValue& f) { return f.Text(&f.c.model_dir, "a directory"); }},
    {"initial-weights",
     [](FlagValue& f) { return f.Text(&f.c.initial_weights, "a weights file"); }},
    {"threads",
     [](FlagValue& f) {
       f.threads_auto = f.value == "auto";
       if (f.threads_auto) return absl::OkStatus();
       return f.Positive(&f.c.threads, 256, "a thread count from 1 to 256, or auto");
     }},
    {"log-format",
     [](FlagValue& f) {
       std::string v;
       S s = f.OneOf({"text", "json"}, "text or json", &v);
       f.c.json_logs = v == "json";
       return s;
     }},
    {"metrics-port",
     [](FlagValue& f) {
       int64_t n = 0;
       if (!ParseNumber(f.value, &n) || n < 0 || n > 65535) return f.Bad("a port");
       f.c.metrics_port = static_cast<int>(n);
       f.c.metrics_port_required = true;
       return S();
     }},
    {"strategy",
     [](FlagValue& f) {
       f.strategy = f.value;
       return S();
     }},
    {"replicas",
     [](FlagValue& f) { return f.Positive(&f.c.replicas, 64, "a replica count from 1 to 64"); }},
    {"cross-device-ops",
     [](FlagValue& f) {
       return ParseInto(f.name, ParseCrossDeviceOps(f.value), &f.c.cross_device_ops);
     }},
    {"peer-timeout", [](FlagValue& f) { return f.Positive(&f.c.peer_timeout_seconds); }},
    {"collective-timeout",
     [](FlagValue& f) { return f.Positive(&f.c.collective_timeout_seconds); }},
    {"recovery",
     [](FlagValue& f) {
       f.recovery = f.value;
       return S();
     }},
    {"rejoin-timeout", [](FlagValue& f) { return f.Positive(&f.c.rejoin_timeout_seconds); }},
    {"leave-window-ms", [](FlagValue& f) { return f.Positive(&f.c.leave_window_ms); }},
    {"elastic-max-workers",
     [](FlagValue& f) {
       f.elastic_max = f.value;
       return S();
     }},
    {"device", [](FlagValue& f) { return ParseInto(f.name, ParseDevice(f.value), &f.c.device); }},
    {"precision",
     [](FlagValue& f) {
       f.c.precision_from_flag = true;
       return ParseInto(f.name, ParsePrecision(f.value), &f.c.precision);
     }},
    {"tf32",
     [](FlagValue& f) {
       std::string v;
       S s = f.OneOf({"true", "false"}, "true or false", &v);
       if (s.ok()) f.c.tf32 = v == "true";
       return s;
     }},
    {"collective",
     [](FlagValue& f) {
       return ParseInto(f.name, ParseCollectiveBackend(f.value), &f.c.collective);
     }},
    {"ps-mode", [](FlagValue& f) { return ParseInto(f.name, ParsePsMode(f.value), &f.c.ps_mode); }},
    {"backup-workers",
     [](FlagValue& f) {
       int64_t n = 0;
       if (!ParseNumber(f.value, &n) || n < 0 || n > 64) return f.Bad("0 to 64");
       f.c.backup_workers = static_cast<int>(n);
       return S();
     }},
};

// The flags among themselves: defaults that depend on others, and combinations refused.
absl::Status SettleFlags(FlagValue& f) {
  TrainerConfig& c = f.c;
  if (!f.lr_set && c.optimizer == "sgd") c.learning_rate = 0.01f;
  if (!c.data_spec.empty()) {
    if (f.dataset_set) {
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
  return absl::OkStatus();
}

// The pod's environment (the operator's injection, Vertex AI's AIP_* directories); a flag wins
// over its variable.
absl::Status ApplyEnvironment(const std::map<std::string, std::string>& env, FlagValue& f) {
  TrainerConfig& c = f.c;
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
  auto flag_or_env = [&](std::optional<std::string>& flag, const char* var) {
    if (!flag) {
      if (std::string v = get(var); !v.empty()) flag = v;
    }
    return flag.has_value();
  };
  if (flag_or_env(f.strategy, "LOCKSTEP_STRATEGY")) {
    absl::StatusOr<Strategy> parsed = ParseStrategy(*f.strategy);
    if (!parsed.ok()) {
      return absl::InvalidArgumentError("strategy " + std::string(parsed.status().message()));
    }
    c.strategy = *parsed;
  }
  if (flag_or_env(f.recovery, "LOCKSTEP_RECOVERY")) {
    if (*f.recovery != "InPlace" && *f.recovery != "RestartGroup") {
      return Bad("recovery", *f.recovery, "InPlace or RestartGroup");
    }
    c.recover_in_place = *f.recovery == "InPlace";
  }
  if (flag_or_env(f.elastic_max, "LOCKSTEP_ELASTIC_MAX_WORKERS")) {
    int64_t v = 0;
    if (!ParseNumber(*f.elastic_max, &v) || v < 1 || v > 1024) {
      return Bad("elastic-max-workers", *f.elastic_max, "a worker count from 1 to 1024");
    }
    c.elastic_max_workers = static_cast<int>(v);
  }
  if (f.threads_auto) {
    const std::string share = get("LOCKSTEP_CPU_LIMIT");
    if (!share.empty() && !EnvCpuLimit(share)) {
      return absl::InvalidArgumentError("LOCKSTEP_CPU_LIMIT \"" + share +
                                        "\" is not a positive number of CPUs");
    }
    const CpuLimit limit = ReadCpuLimit("/sys/fs/cgroup", std::nullopt, share);
    c.threads = std::min(limit.cpus, 256);
    c.threads_auto = limit.Describe();
  }
  c.job_token = get("LOCKSTEP_JOB_TOKEN");
  if (const std::string attempt = get("LOCKSTEP_ATTEMPT"); !attempt.empty()) {
    if (!absl::SimpleAtoi(attempt, &c.attempt) || c.attempt < 0) {
      return absl::InvalidArgumentError("LOCKSTEP_ATTEMPT \"" + attempt +
                                        "\" is not a non-negative integer");
    }
  }
  if (c.tensorboard_dir.empty()) c.tensorboard_dir = get("AIP_TENSORBOARD_LOG_DIR");
  if (c.model_dir.empty()) c.model_dir = get("AIP_MODEL_DIR");
  if (c.checkpoint_dir.empty()) c.checkpoint_dir = get("AIP_CHECKPOINT_DIR");
  if (std::string ip = get("LOCKSTEP_POD_IP"); !ip.empty()) c.bind_address = ip;
  if (!get("LOCKSTEP_JOB_NAME").empty()) c.metrics_port_required = true;
  c.termination_log = TerminationLogPath(env);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TrainerConfig> ParseTrainerConfig(const std::vector<std::string>& args,
                                                 const std::map<std::string, std::string>& env) {
  TrainerConfig c;
  std::string name, value;
  FlagValue f{.name = name, .value = value, .c = c};
  for (size_t i = 0; i < args.size(); ++i) {
    // --name=value, or --name value.
    if (args[i].rfind("--", 0) != 0) {
      return absl::InvalidArgumentError("unexpected argument \"" + args[i] + "\"");
    }
    name = args[i].substr(2);
    const size_t eq = name.find('=');
    if (eq != std::string::npos) {
      value = name.substr(eq + 1);
      name.resize(eq);
    }
    if (name == "help" || name == "version") {
      (name == "help" ? c.help : c.version) = true;
      continue;
    }
    const Flag* flag = std::find_if(std::begin(kFlags), std::end(kFlags),
                                    [&](const Flag& k) { return k.name == name; });
    if (flag == std::end(kFlags)) {
      return absl::InvalidArgumentError("unknown flag --" + name + " (see --help)");
    }
    if (eq == std::string::npos) {
      if (i + 1 >= args.size()) return absl::InvalidArgumentError("--" + name + " needs a value");
      value = args[++i];
    }
    if (absl::Status s = flag->apply(f); !s.ok()) return s;
  }
  if (absl::Status s = SettleFlags(f); !s.ok()) return s;
  if (absl::Status s = ApplyEnvironment(env, f); !s.ok()) return s;
  return c;
}

}  // namespace lockstep::trainer
