#include "operator/cmd/lockstep-operator/operator_flags.h"

#include <charconv>

#include "common/str_util.h"

namespace lockstep::cmd {
namespace {

absl::Status Bad(std::string_view flag, std::string_view value, std::string_view want) {
  return absl::InvalidArgumentError(StrCat("flag --", flag, ": \"", value, "\" is not ", want));
}

bool ParseInt(std::string_view s, int* out) {
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && end == s.data() + s.size();
}

}  // namespace

std::string OperatorUsage() {
  return R"(usage: lockstep-operator [flags]

Runs the TrainingJob controller against a Kubernetes API server.

  --kubeconfig=PATH            kubeconfig to use (default: in-cluster, then $KUBECONFIG, ~/.kube/config)
  --context=NAME               kubeconfig context (default: the current one)
  --namespace=NS               watch one namespace only (default: all)
  --workers=N                  concurrent reconciles (default 4)
  --qps=Q --burst=B            client-side request rate limit (default 500 and 500)
  --event-qps=Q --event-burst=B   Events' own write budget, apart from --qps (default 50 and 100)
  --cluster-domain=DOMAIN      appended to ".svc" in TF_CONFIG hosts, e.g. cluster.local
  --gang-scheduler=NAME        none, volcano or scheduler-plugins (default none)
  --tfjob                      also serve Kubeflow's kubeflow.org/v1 TFJobs (their CRD must be
                               installed; not where another controller owns TFJobs)
  --leader-elect               run under a coordination.k8s.io Lease (for 2+ replicas)
  --leader-election-namespace=NS   where the Lease lives (default $POD_NAMESPACE, else default)
  --leader-election-id=NAME    the Lease's name (default lockstep-operator)
  --metrics-addr=HOST:PORT     /metrics, /healthz and /readyz (default :8080; 0 turns off)
  --progress-interval=DUR      how often a running job's chief is asked for progress (default 10s; 0 off)
  --log-format=text|json       log lines as text (default) or JSON objects
  --version, --help
)";
}

absl::StatusOr<OperatorFlags> ParseOperatorFlags(const std::vector<std::string>& args) {
  OperatorFlags f;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string arg = args[i];
    if (arg.rfind("--", 0) != 0) {
      return absl::InvalidArgumentError(StrCat("unexpected argument \"", arg, "\""));
    }
    arg = arg.substr(2);
    std::string name = arg;
    std::string value;
    bool has_value = false;
    if (size_t eq = arg.find('='); eq != std::string::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      has_value = true;
    }
    auto need = [&]() -> absl::Status {
      if (has_value) return absl::OkStatus();
      if (i + 1 >= args.size()) {
        return absl::InvalidArgumentError(StrCat("flag --", name, " needs a value"));
      }
      value = args[++i];
      return absl::OkStatus();
    };
    auto boolean = [&](bool* out) -> absl::Status {
      if (!has_value || value == "true") {
        *out = true;
      } else if (value == "false") {
        *out = false;
      } else {
        return Bad(name, value, "true or false");
      }
      return absl::OkStatus();
    };
    absl::Status s;
    if (name == "help" || name == "h") {
      f.help = true;
    } else if (name == "version") {
      f.version = true;
    } else if (name == "leader-elect") {
      s = boolean(&f.leader_elect);
    } else if (name == "tfjob") {
      s = boolean(&f.tfjob);
    } else if (name == "kubeconfig" || name == "context" || name == "namespace" ||
               name == "cluster-domain" || name == "leader-election-namespace" ||
               name == "leader-election-id" || name == "metrics-addr" || name == "workers" ||
               name == "qps" || name == "burst" || name == "event-qps" || name == "event-burst" ||
               name == "gang-scheduler" || name == "progress-interval" || name == "log-format") {
      if (s = need(); !s.ok()) return s;
      if (name == "kubeconfig") {
        f.kubeconfig = value;
      } else if (name == "context") {
        f.context = value;
      } else if (name == "namespace") {
        f.namespace_ = value;
      } else if (name == "cluster-domain") {
        f.cluster_domain = value;
      } else if (name == "leader-election-namespace") {
        f.leader_election_namespace = value;
      } else if (name == "leader-election-id") {
        if (value.empty()) return Bad(name, value, "a Lease name");
        f.leader_election_id = value;
      } else if (name == "metrics-addr") {
        f.metrics_addr = value == "0" ? "" : value;
      } else if (name == "workers") {
        if (!ParseInt(value, &f.workers) || f.workers < 1 || f.workers > 64) {
          return Bad(name, value, "a number of workers from 1 to 64");
        }
      } else if (name == "burst" || name == "event-burst") {
        int* out = name == "burst" ? &f.burst : &f.event_burst;
        if (!ParseInt(value, out) || *out < 1) return Bad(name, value, "a positive integer");
      } else if (name == "qps" || name == "event-qps") {
        double* out = name == "qps" ? &f.qps : &f.event_qps;
        try {
          size_t used = 0;
          *out = std::stod(value, &used);
          if (used != value.size() || !(*out > 0)) return Bad(name, value, "a positive number");
        } catch (const std::exception&) {
          return Bad(name, value, "a positive number");
        }
      } else if (name == "gang-scheduler") {
        if (value == "none" || value.empty()) {
          f.gang = trainingjob::GangScheduler::kNone;
        } else if (value == "volcano") {
          f.gang = trainingjob::GangScheduler::kVolcano;
        } else if (value == "scheduler-plugins") {
          f.gang = trainingjob::GangScheduler::kSchedulerPlugins;
        } else {
          return Bad(name, value, "one of none, volcano, scheduler-plugins");
        }
      } else if (name == "progress-interval") {
        if (!absl::ParseDuration(value, &f.progress_interval) ||
            f.progress_interval < absl::ZeroDuration()) {
          return Bad(name, value, "a duration such as 10s");
        }
      } else if (name == "log-format") {
        if (value != "text" && value != "json") return Bad(name, value, "text or json");
        f.json_logs = value == "json";
      }
    } else {
      return absl::InvalidArgumentError(StrCat("unknown flag --", name, " (see --help)"));
    }
    if (!s.ok()) return s;
  }
  return f;
}

}  // namespace lockstep::cmd
