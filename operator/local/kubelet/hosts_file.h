#pragma once
// The /etc/hosts every pod of `lockstep local` sees: each pod's hostname (and
// <hostname>.<subdomain>.<ns>[.svc[.cluster.local]] when it sets a subdomain), and every
// Service name (<svc>, <svc>.<ns>, <svc>.<ns>.svc[.cluster.local]) at the addresses of the
// pods its selector matches, since there is no cluster-IP proxy.
// Thread-safety: pure function.

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace lockstep::local {

struct HostsPod {
  std::string ns, name, ip;
  const nlohmann::json* pod;  // the whole object (spec.hostname, spec.subdomain, labels)
};
struct HostsService {
  std::string ns, name;
  const nlohmann::json* service;  // the whole object (spec.selector)
};

// The file's text: localhost first, then one line per address with its names sorted.
std::string HostsFile(const std::vector<HostsPod>& pods, const std::vector<HostsService>& services);

}  // namespace lockstep::local
