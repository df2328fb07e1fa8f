#pragma once
// RestConfig: where the API server is and how to authenticate, read from kubeconfig files
// or from the pod's service account, in client-go's order: an explicit --kubeconfig path,
// then $KUBECONFIG (a ':'-separated list, merged: the first file to name a cluster, user,
// context or current-context wins), then in-cluster, then ~/.kube/config.
// Relative file paths in a kubeconfig are relative to that file's folder.
// Thread-safety: plain functions and values.

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace lockstep::kube {

struct RestConfig {
  std::string server;  // "https://10.0.0.1:6443"
  std::string ca_pem;  // from certificate-authority(-data), or the service account's ca.crt
  std::string client_cert_pem;
  std::string client_key_pem;
  bool insecure_skip_tls_verify = false;
  std::string bearer_token;       // a fixed token
  std::string bearer_token_file;  // or a file re-read as it rotates
  std::string namespace_ = "default";
  std::string source;  // where this came from, for messages: "kubeconfig /root/.kube/config"
};

// Loads the named context (current-context when empty) from one or more merged files.
absl::StatusOr<RestConfig> LoadKubeconfig(const std::vector<std::string>& paths,
                                          const std::string& context = "");

// In-cluster configuration. `env` stands for the process environment and `root` is prefixed
// to /var/run/secrets/kubernetes.io/serviceaccount, both so tests can fake a pod.
absl::StatusOr<RestConfig> InClusterConfig(const std::map<std::string, std::string>& env,
                                           const std::string& root = "");

// client-go's order, from the real environment. `explicit_path` is --kubeconfig.
absl::StatusOr<RestConfig> DefaultConfig(const std::string& explicit_path = "",
                                         const std::string& context = "");

}  // namespace lockstep::kube
