// Services: names are DNS-1035 labels (they become DNS names), a cluster IP is allocated on
// create, and the Type/Cluster-IP/Port(s) columns.

#include <atomic>

#include "common/str_util.h"
#include "operator/api/json_reader.h"
#include "operator/api/object_meta.h"
#include "operator/local/kinds/kind_strategy.h"

namespace lockstep::local {

using nlohmann::json;

namespace {

json PortsCell(const json& obj) {
  std::vector<std::string> ports;
  if (const json* spec = api::ObjectAt(obj, "spec");
      spec && spec->contains("ports") && (*spec)["ports"].is_array()) {
    for (const json& p : (*spec)["ports"]) {
      if (p.is_object() && p.contains("port")) {
        std::string protocol = api::StringAt(p, "protocol");
        ports.push_back(StrCat(p["port"].dump(), "/", protocol.empty() ? "TCP" : protocol));
      }
    }
  }
  return ports.empty() ? json("<none>") : json(StrJoin(ports, ","));
}

class Services final : public KindStrategy {
 public:
  std::vector<std::string> ValidateName(const std::string& name) const override {
    return api::CheckDns1035Label(name);
  }

  void PrepareForCreate(const ResourceType&, json& obj) const override {
    json& spec = obj["spec"];
    if (!spec.is_object()) spec = json::object();
    if (!spec.contains("clusterIP")) {
      static std::atomic<uint32_t> next_ip{1};
      uint32_t n = next_ip++;
      spec["clusterIP"] = StrCat("10.96.", (n >> 8) & 255, ".", n & 255);
    }
  }

  std::vector<TableColumn> TableColumns(const ResourceType&) const override {
    return {NameColumn(),
            PathColumn("Type", "string", ".spec.type"),
            PathColumn("Cluster-IP", "string", ".spec.clusterIP"),
            {"Port(s)", "string", "", 0, PortsCell},
            AgeColumn()};
  }
};

}  // namespace

const KindStrategy& ServiceStrategy() {
  static const Services services;
  return services;
}

}  // namespace lockstep::local
