#include "trainer/cli/trainer_flags.h"

#include <charconv>

namespace lockstep::trainer {
namespace {

absl::Status Bad(const std::string& flag, const std::string& value, const std::string& want) {
  return absl::InvalidArgumentError("--" + flag + ": \"" + value + "\" is not " + want);
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

std::string TrainerUsage() {
  return R"(usage: lockstep-trainer [flags]

Trains a model (OneDevice strategy) and serves GET /progress and /metrics.

  --model=mlp|cnn                 (default mlp)
  --dataset=fashion-mnist|synthetic   (default fashion-mnist)
  --data-dir=DIR                  Fashion-MNIST IDX files (default /usr/share/datasets/fashion-mnist)
  --synthetic-size=N              examples in the synthetic dataset (default 10000)
  --epochs=N | --steps=N          how long to train (default 5 epochs)
  --batch-size=N                  global batch size (default 64)
  --optimizer=adam|sgd            (default adam)
  --learning-rate=LR              (default 0.001 for adam, 0.01 for sgd)
  --lr-schedule=cosine|constant   cosine decay to zero over the run (default cosine)
  --momentum=M                    sgd momentum (default 0.9)
  --seed=N                        weights, shuffling and dropout (default 1)
  --checkpoint-dir=DIR            write checkpoints there and resume from the newest valid one
  --checkpoint-every=N            steps between checkpoints (default: one per epoch)
  --keep-checkpoints=K            (default 3)
  --threads=N                     GEMM threads (default 1)
  --metrics-port=PORT             /progress and /metrics (default 9464; 0 turns it off)

Environment: TF_CONFIG, LOCKSTEP_STRATEGY, LOCKSTEP_POD_IP (address to bind),
LOCKSTEP_TERMINATION_LOG (default /dev/termination-log).
Exit codes: 0 done; 2 bad flags or configuration; 3 bad data; 128+ retryable; 143 SIGTERM.
)";
}

std::string TerminationLogPath(const std::map<std::string, std::string>& env) {
  auto it = env.find("LOCKSTEP_TERMINATION_LOG");
  return it != env.end() && !it->second.empty() ? it->second : "/dev/termination-log";
}

absl::StatusOr<TrainerConfig> ParseTrainerConfig(const std::vector<std::string>& args,
                                                 const std::map<std::string, std::string>& env) {
  TrainerConfig c;
  bool lr_set = false;
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
      if (value != "mlp" && value != "cnn") return Bad(name, value, "mlp or cnn");
      c.model = value;
    } else if (name == "dataset") {
      if (value != "fashion-mnist" && value != "synthetic") {
        return Bad(name, value, "fashion-mnist or synthetic");
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
    } else if (name == "optimizer") {
      if (value != "adam" && value != "sgd") return Bad(name, value, "adam or sgd");
      c.optimizer = value;
    } else if (name == "learning-rate") {
      if (!ParseFloat(value, &c.learning_rate) || !(c.learning_rate > 0)) {
        return Bad(name, value, "a positive number");
      }
      lr_set = true;
    } else if (name == "lr-schedule") {
      if (value != "cosine" && value != "constant") return Bad(name, value, "cosine or constant");
      c.lr_schedule = value;
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
    } else if (name == "keep-checkpoints") {
      int64_t v = 0;
      s = positive(&v);
      c.keep_checkpoints = static_cast<int>(std::min<int64_t>(v, 1000));
    } else if (name == "threads") {
      int64_t v = 0;
      s = positive(&v);
      if (s.ok() && v > 256) s = Bad(name, value, "a thread count from 1 to 256");
      c.threads = static_cast<int>(v);
    } else if (name == "metrics-port") {
      if (!ParseNumber(value, &n) || n < 0 || n > 65535) return Bad(name, value, "a port");
      c.metrics_port = static_cast<int>(n);
    } else {
      return absl::InvalidArgumentError("unknown flag --" + name + " (see --help)");
    }
    if (!s.ok()) return s;
  }
  if (!lr_set && c.optimizer == "sgd") c.learning_rate = 0.01f;

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
  if (std::string s = get("LOCKSTEP_STRATEGY"); !s.empty()) c.strategy = s;
  if (std::string ip = get("LOCKSTEP_POD_IP"); !ip.empty()) c.bind_address = ip;
  c.termination_log = TerminationLogPath(env);
  return c;
}

}  // namespace lockstep::trainer
