#include "operator/kube/pod.h"

#include "common/str_util.h"
#include "operator/api/json_reader.h"

namespace lockstep::kube {
namespace {

using api::FieldErrors;
using api::FieldPath;
using api::ObjectReader;
using nlohmann::json;

ContainerState DecodeState(const json* j, const FieldPath& path, FieldErrors* errors) {
  ContainerState s;
  if (!j) return s;
  ObjectReader r(*j, path, errors);
  struct Branch {
    const char* key;
    ContainerState::Kind kind;
  };
  for (Branch b : {Branch{"waiting", ContainerState::Kind::kWaiting},
                   Branch{"running", ContainerState::Kind::kRunning},
                   Branch{"terminated", ContainerState::Kind::kTerminated}}) {
    const json* detail = r.Object(b.key);
    if (!detail) continue;
    s.kind = b.kind;
    ObjectReader d(*detail, r.Path(b.key), errors);
    s.reason = d.String("reason").value_or("");
    s.message = d.String("message").value_or("");
    s.exit_code = d.Int32("exitCode").value_or(0);
    break;
  }
  return s;
}

}  // namespace

const PodCondition* Pod::Condition(std::string_view type) const {
  for (const PodCondition& c : conditions) {
    if (c.type == type) return &c;
  }
  return nullptr;
}

absl::StatusOr<Pod> DecodePod(const json& j) {
  FieldErrors errors;  // tolerated: a pod from the server is what it is
  Pod pod;
  ObjectReader root(j, FieldPath(), &errors);
  if (!root.ok()) return absl::InvalidArgumentError("pod: not a JSON object");
  if (const json* meta = root.Object("metadata")) {
    pod.metadata = api::DecodeObjectMeta(*meta, root.Path("metadata"), &errors);
    pod.metadata.other = json::object();
  }
  if (pod.metadata.name.empty()) return absl::InvalidArgumentError("pod: no metadata.name");
  if (const json* spec = root.Object("spec")) {
    ObjectReader s(*spec, root.Path("spec"), &errors);
    pod.node_name = s.String("nodeName").value_or("");
    pod.restart_policy = s.String("restartPolicy").value_or("");
    pod.hostname = s.String("hostname").value_or("");
    pod.subdomain = s.String("subdomain").value_or("");
    if (const json* gates = s.Array("schedulingGates")) {
      for (const json& g : *gates) {
        if (g.is_object() && g.contains("name") && g["name"].is_string()) {
          pod.scheduling_gates.push_back(g["name"].get<std::string>());
        }
      }
    }
  }
  if (const json* status = root.Object("status")) {
    ObjectReader s(*status, root.Path("status"), &errors);
    pod.phase = s.String("phase").value_or("");
    pod.reason = s.String("reason").value_or("");
    pod.message = s.String("message").value_or("");
    pod.pod_ip = s.String("podIP").value_or("");
    pod.start_time = s.Time("startTime");
    if (const json* conditions = s.Array("conditions")) {
      for (size_t i = 0; i < conditions->size(); ++i) {
        ObjectReader c((*conditions)[i], s.Path("conditions").Index(i), &errors);
        if (!c.ok()) continue;
        pod.conditions.push_back({c.String("type").value_or(""), c.String("status").value_or(""),
                                  c.String("reason").value_or(""),
                                  c.String("message").value_or("")});
      }
    }
    if (const json* statuses = s.Array("containerStatuses")) {
      for (size_t i = 0; i < statuses->size(); ++i) {
        FieldPath path = s.Path("containerStatuses").Index(i);
        ObjectReader c((*statuses)[i], path, &errors);
        if (!c.ok()) continue;
        ContainerStatus cs;
        cs.name = c.String("name").value_or("");
        cs.ready = c.Bool("ready").value_or(false);
        cs.restart_count = c.Int32("restartCount").value_or(0);
        cs.state = DecodeState(c.Object("state"), path.Child("state"), &errors);
        cs.last_state = DecodeState(c.Object("lastState"), path.Child("lastState"), &errors);
        pod.container_statuses.push_back(std::move(cs));
      }
    }
  }
  return pod;
}

}  // namespace lockstep::kube
