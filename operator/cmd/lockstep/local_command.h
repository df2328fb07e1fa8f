#pragma once
// `lockstep local up|down|status|serve`: the local cluster's API server as a background
// process, its state in a state directory (default $LOCKSTEP_HOME, else ~/.lockstep/local):
//   server.json   pid and URL of the running server (removed when it stops)
//   server.log    its log
//   objects.log   every object, durable (see operator/local/apiserver/object_store.h)
//   kubeconfig    for kubectl and the operator: `export KUBECONFIG=<state>/kubeconfig`
// `serve` runs the server in the foreground (what `up` starts); SIGTERM or SIGINT stop it.

#include <ostream>
#include <string>
#include <vector>

namespace lockstep::cli {

// Returns the exit code: 0 on success; `status` returns 3 when no server is running.
int RunLocal(const std::vector<std::string>& args, const std::string& self, std::ostream& out,
             std::ostream& err);

}  // namespace lockstep::cli
