// Services: names are DNS-1035 labels (they become DNS names), the defaults a real API server
// fills (type ClusterIP, session affinity, each port's protocol and target port), ports
// validated as pkg/apis/core/validation does, a cluster IP allocated on create and fixed after,
// and the Type/Cluster-IP/Port(s) columns.

#include <algorithm>
#include <atomic>
#include <set>

#include "common/str_util.h"
#include "operator/api/json_reader.h"
#include "operator/api/object_meta.h"
#include "operator/local/apiserver/kinds/kind_strategy.h"

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

bool InRange(const json& v, int64_t lo, int64_t hi) {
  return v.is_number_integer() && v.get<int64_t>() >= lo && v.get<int64_t>() <= hi;
}

// IANA_SVC_NAME: at most 15 lower-case alphanumerics and '-', at least one letter, no '--'.
std::vector<std::string> PortNameProblems(const std::string& name) {
  bool letter = std::any_of(name.begin(), name.end(), [](char c) { return c >= 'a' && c <= 'z'; });
  bool chars = !name.empty() && name.front() != '-' && name.back() != '-' &&
               name.find("--") == std::string::npos &&
               std::all_of(name.begin(), name.end(), [](char c) {
                 return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
               });
  if (name.size() > 15) return {"must be no more than 15 characters"};
  if (!chars) {
    return {
        "must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-); may not "
        "start or end with a hyphen, nor contain adjacent hyphens"};
  }
  if (!letter) return {"must contain at least one letter (a-z)"};
  return {};
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

  // An update that leaves out the allocated cluster IP keeps it.
  void PrepareForUpdate(const ResourceType&, json& obj, const json& old) const override {
    const json* old_spec = api::ObjectAt(old, "spec");
    auto spec = obj.find("spec");
    if (!old_spec || !old_spec->contains("clusterIP") || spec == obj.end() || !spec->is_object()) {
      return;
    }
    if (!spec->contains("clusterIP") || (*spec)["clusterIP"] == "") {
      (*spec)["clusterIP"] = (*old_spec)["clusterIP"];
    }
  }

  absl::Status Normalize(const ResourceType&, json& obj, bool) const override {
    auto spec = obj.find("spec");
    if (spec == obj.end() || !spec->is_object()) return absl::OkStatus();
    if (!spec->contains("type")) (*spec)["type"] = "ClusterIP";
    if (!spec->contains("sessionAffinity")) (*spec)["sessionAffinity"] = "None";
    if (auto ports = spec->find("ports"); ports != spec->end() && ports->is_array()) {
      for (json& p : *ports) {
        if (!p.is_object()) continue;
        if (!p.contains("protocol")) p["protocol"] = "TCP";
        if (!p.contains("targetPort") && p.contains("port")) p["targetPort"] = p["port"];
      }
    }
    return absl::OkStatus();
  }

  api::FieldErrors Validate(const ResourceType&, const json& obj, const json*) const override {
    api::FieldErrors errors;
    const json* spec = api::ObjectAt(obj, "spec");
    if (!spec) return {api::Required(api::FieldPath("spec"), "")};
    std::string type = api::StringAt(*spec, "type");
    if (type != "ClusterIP" && type != "NodePort" && type != "LoadBalancer" &&
        type != "ExternalName") {
      errors.push_back(
          api::NotSupported(api::FieldPath("spec.type"), api::QuoteJson(type),
                            {"ClusterIP", "ExternalName", "LoadBalancer", "NodePort"}));
    }
    bool headless = api::StringAt(*spec, "clusterIP") == "None";
    auto ports = spec->find("ports");
    size_t count = ports != spec->end() && ports->is_array() ? ports->size() : 0;
    if (count == 0 && !headless && type != "ExternalName") {
      errors.push_back(api::Required(api::FieldPath("spec.ports"), ""));
    }
    std::set<std::string> names;
    for (size_t i = 0; i < count; ++i) {
      const json& p = (*ports)[i];
      api::FieldPath at = api::FieldPath("spec.ports").Index(i);
      std::string name = p.is_object() ? api::StringAt(p, "name") : "";
      if (count > 1 && name.empty()) errors.push_back(api::Required(at.Child("name"), ""));
      if (!name.empty()) {
        for (std::string& why : api::CheckDns1123Label(name)) {
          errors.push_back(api::Invalid(at.Child("name"), api::QuoteJson(name), why));
        }
        if (!names.insert(name).second) {
          errors.push_back(api::Duplicate(at.Child("name"), api::QuoteJson(name)));
        }
      }
      const json port = p.is_object() ? p.value("port", json()) : json();
      if (!InRange(port, 1, 65535)) {
        errors.push_back(api::Invalid(at.Child("port"), api::RenderValue(port),
                                      "must be between 1 and 65535, inclusive"));
      }
      const json target = p.is_object() ? p.value("targetPort", json()) : json();
      if (target.is_string()) {
        if (std::vector<std::string> why = PortNameProblems(target.get<std::string>());
            !why.empty()) {
          errors.push_back(api::Invalid(at.Child("targetPort"), api::RenderValue(target), why[0]));
        }
      } else if (!InRange(target, 1, 65535)) {
        errors.push_back(api::Invalid(at.Child("targetPort"), api::RenderValue(target),
                                      "must be between 1 and 65535, inclusive"));
      }
      std::string protocol = p.is_object() ? api::StringAt(p, "protocol") : "";
      if (protocol != "TCP" && protocol != "UDP" && protocol != "SCTP") {
        errors.push_back(api::NotSupported(at.Child("protocol"), api::QuoteJson(protocol),
                                           {"SCTP", "TCP", "UDP"}));
      }
      if (p.is_object() && p.contains("nodePort")) {
        if (type != "NodePort" && type != "LoadBalancer") {
          errors.push_back(api::Forbidden(at.Child("nodePort"),
                                          StrCat("may not be used when `type` is '", type, "'")));
        } else if (!InRange(p["nodePort"], 30000, 32767)) {
          errors.push_back(api::Invalid(at.Child("nodePort"), api::RenderValue(p["nodePort"]),
                                        "provided port is not in the valid range. The range of "
                                        "valid ports is 30000-32767"));
        }
      }
    }
    return errors;
  }

  api::FieldErrors ValidateUpdate(const ResourceType&, const json& obj,
                                  const json& old) const override {
    const json* spec = api::ObjectAt(obj, "spec");
    const json* old_spec = api::ObjectAt(old, "spec");
    if (!spec || !old_spec || !old_spec->contains("clusterIP")) return {};
    json ip = spec->value("clusterIP", json());
    if (ip == (*old_spec)["clusterIP"]) return {};
    return {
        api::Invalid(api::FieldPath("spec.clusterIP"), api::RenderValue(ip), "field is immutable")};
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
