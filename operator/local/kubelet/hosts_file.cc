#include "operator/local/kubelet/hosts_file.h"

#include <map>
#include <set>

#include "common/str_util.h"
#include "operator/api/json_reader.h"
#include "operator/kube/label_selector.h"

namespace lockstep::local {

using nlohmann::json;

namespace {

// A string map (labels, a selector) of `obj` at `path...`; non-strings are left out.
std::map<std::string, std::string> StringMap(const json* obj) {
  std::map<std::string, std::string> out;
  if (!obj) return out;
  for (auto it = obj->begin(); it != obj->end(); ++it) {
    if (it->is_string()) out[it.key()] = it->get<std::string>();
  }
  return out;
}

}  // namespace

std::string HostsFile(const std::vector<HostsPod>& pods,
                      const std::vector<HostsService>& services) {
  std::map<std::string, std::set<std::string>> names;  // ip -> names
  for (const HostsPod& pod : pods) {
    const json* spec = api::ObjectAt(*pod.pod, "spec");
    std::string hostname = spec ? api::StringAt(*spec, "hostname") : "";
    if (hostname.empty()) hostname = pod.name;
    names[pod.ip].insert(hostname);
    std::string sub = spec ? api::StringAt(*spec, "subdomain") : "";
    if (!sub.empty()) {
      for (const char* suffix : {"", ".svc", ".svc.cluster.local"}) {
        names[pod.ip].insert(StrCat(hostname, ".", sub, ".", pod.ns, suffix));
      }
    }
  }
  for (const HostsService& svc : services) {
    const json* spec = api::ObjectAt(*svc.service, "spec");
    const json* selector = spec ? api::ObjectAt(*spec, "selector") : nullptr;
    if (!selector || selector->empty()) continue;
    kube::LabelSelector match = kube::LabelSelector::FromMap(StringMap(selector));
    for (const HostsPod& pod : pods) {
      if (pod.ns != svc.ns) continue;
      const json* meta = api::ObjectAt(*pod.pod, "metadata");
      if (!match.Matches(StringMap(meta ? api::ObjectAt(*meta, "labels") : nullptr))) continue;
      for (const char* suffix : {".svc", ".svc.cluster.local"}) {
        names[pod.ip].insert(StrCat(svc.name, ".", pod.ns, suffix));
      }
      names[pod.ip].insert(StrCat(svc.name, ".", pod.ns));
      names[pod.ip].insert(svc.name);
    }
  }
  std::string text = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n";
  for (const auto& [ip, list] : names) {
    text += ip;
    for (const std::string& n : list) text += "\t" + n;
    text += "\n";
  }
  return text;
}

}  // namespace lockstep::local
