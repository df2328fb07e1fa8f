#pragma once
// PodTemplate: a replica's PodTemplateSpec. The JSON stays the source of truth (every field is
// preserved exactly, including ones this version of Lockstep does not know); the typed view
// holds only what the operator reads: containers, their ports and env, and restartPolicy.
// The JSON is kept serialized (about a fifth of a parsed tree's memory: the operator caches
// every job) and parsed when a pod is built or the job encoded.
// Thread-safety: plain values.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "operator/api/field_errors.h"

namespace lockstep::api {

inline constexpr int32_t kDefaultTrainingPort = 2222;
inline constexpr int32_t kDefaultMetricsPort = 9464;
inline constexpr std::string_view kTrainingPortName = "lockstep";
inline constexpr std::string_view kKubeflowPortName = "tfjob-port";
inline constexpr std::string_view kMetricsPortName = "lockstep-metrics";

struct ContainerPort {
  std::string name;
  int32_t container_port = 0;
  std::string protocol;  // empty means TCP

  bool operator==(const ContainerPort&) const = default;
};

struct EnvVar {
  std::string name;
  std::optional<std::string> value;
  bool from_source = false;  // set through valueFrom (secret, fieldRef, ...)

  bool operator==(const EnvVar&) const = default;
};

struct Container {
  std::string name;
  std::string image;
  std::vector<std::string> command;
  std::vector<std::string> args;
  std::string working_dir;
  std::vector<ContainerPort> ports;
  std::vector<EnvVar> env;

  bool operator==(const Container&) const = default;
  const EnvVar* FindEnv(std::string_view env_name) const;
  const ContainerPort* FindPort(std::string_view port_name) const;
};

// What a Kubernetes API server refuses in a pod spec's volumes (ValidatePodSpec): a volume
// without a name or whose name is not a DNS-1123 label or is repeated; a container's
// volumeMount without a name or a mountPath, naming no volume of the pod ("Not found"), or
// repeating a mountPath. Paths are under `spec` (the pod's spec).
FieldErrors ValidatePodVolumes(const nlohmann::json& spec, const FieldPath& spec_path);

class PodTemplate {
 public:
  PodTemplate() = default;

  // Decodes and checks the parts the operator relies on (containers with names and images,
  // port numbers, env names). Problems are appended to `errors` with paths under `path`.
  static PodTemplate Decode(const nlohmann::json& j, const FieldPath& path, FieldErrors* errors);

  nlohmann::json raw() const;
  const std::vector<Container>& containers() const { return containers_; }
  // template.spec.restartPolicy as written; the replica's restartPolicy overrides it.
  const std::optional<std::string>& restart_policy() const { return restart_policy_; }

  // The container that runs training: the one exposing a port named "lockstep" (or Kubeflow's
  // "tfjob-port"), else the one named "tensorflow", else the first. nullptr without containers.
  const Container* TrainingContainer() const;
  // The training container's port named "lockstep"/"tfjob-port", else 2222.
  int32_t TrainingPort() const;
  // The training container's port named "lockstep-metrics", else 9464.
  int32_t MetricsPort() const;

  bool operator==(const PodTemplate& o) const { return raw_ == o.raw_; }

 private:
  std::string raw_ = "{}";  // the template's JSON, serialized (keys sorted)
  std::vector<Container> containers_;
  std::optional<std::string> restart_policy_;
};

}  // namespace lockstep::api
