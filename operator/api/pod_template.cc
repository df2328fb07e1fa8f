#include "operator/api/pod_template.h"

#include <set>

#include "common/str_util.h"
#include "operator/api/json_reader.h"
#include "operator/api/object_meta.h"

namespace lockstep::api {
namespace {

using nlohmann::json;

ContainerPort DecodePort(const json& j, const FieldPath& path, FieldErrors* errors) {
  ObjectReader r(j, path, errors);
  ContainerPort p;
  p.name = r.String("name").value_or("");
  p.protocol = r.String("protocol").value_or("");
  if (std::optional<int32_t> port = r.Int32("containerPort")) {
    if (*port < 1 || *port > 65535) {
      errors->push_back(Invalid(r.Path("containerPort"), std::to_string(*port),
                                "must be between 1 and 65535, inclusive"));
    }
    p.container_port = *port;
  } else if (r.ok() && r.Get("containerPort") == nullptr) {
    errors->push_back(Required(r.Path("containerPort"), ""));
  }
  return p;
}

EnvVar DecodeEnv(const json& j, const FieldPath& path, FieldErrors* errors) {
  ObjectReader r(j, path, errors);
  EnvVar e;
  e.name = r.String("name").value_or("");
  e.value = r.String("value");
  e.from_source = r.Object("valueFrom") != nullptr;
  if (r.ok() && e.name.empty()) errors->push_back(Required(r.Path("name"), ""));
  return e;
}

Container DecodeContainer(const json& j, const FieldPath& path, FieldErrors* errors) {
  ObjectReader r(j, path, errors);
  Container c;
  c.name = r.String("name").value_or("");
  c.image = r.String("image").value_or("");
  c.command = r.StringList("command").value_or(std::vector<std::string>{});
  c.args = r.StringList("args").value_or(std::vector<std::string>{});
  c.working_dir = r.String("workingDir").value_or("");
  if (const json* ports = r.Array("ports")) {
    for (size_t i = 0; i < ports->size(); ++i) {
      c.ports.push_back(DecodePort((*ports)[i], r.Path("ports").Index(i), errors));
    }
  }
  if (const json* env = r.Array("env")) {
    for (size_t i = 0; i < env->size(); ++i) {
      c.env.push_back(DecodeEnv((*env)[i], r.Path("env").Index(i), errors));
    }
  }
  if (!r.ok()) return c;
  if (c.name.empty()) errors->push_back(Required(r.Path("name"), "every container needs a name"));
  if (c.image.empty())
    errors->push_back(Required(r.Path("image"), "every container needs an image"));
  return c;
}

}  // namespace

FieldErrors ValidatePodVolumes(const json& spec, const FieldPath& spec_path) {
  FieldErrors errors;
  if (!spec.is_object()) return errors;
  std::set<std::string> volumes;
  if (auto vs = spec.find("volumes"); vs != spec.end() && vs->is_array()) {
    for (size_t i = 0; i < vs->size(); ++i) {
      const json& v = (*vs)[i];
      const FieldPath path = spec_path.Child("volumes").Index(i).Child("name");
      const std::string name = v.is_object() && v.contains("name") && v["name"].is_string()
                                   ? v["name"].get<std::string>()
                                   : "";
      if (name.empty()) {
        errors.push_back(Required(path, ""));
        continue;
      }
      for (std::string& why : CheckDns1123Label(name)) {
        errors.push_back(Invalid(path, QuoteJson(name), why));
      }
      if (!volumes.insert(name).second) errors.push_back(Duplicate(path, QuoteJson(name)));
    }
  }
  for (const char* list : {"initContainers", "containers"}) {
    auto cs = spec.find(list);
    if (cs == spec.end() || !cs->is_array()) continue;
    for (size_t i = 0; i < cs->size(); ++i) {
      const json& c = (*cs)[i];
      if (!c.is_object()) continue;
      auto mounts = c.find("volumeMounts");
      if (mounts == c.end() || !mounts->is_array()) continue;
      std::set<std::string> paths;
      for (size_t m = 0; m < mounts->size(); ++m) {
        const json& vm = (*mounts)[m];
        const FieldPath path = spec_path.Child(list).Index(i).Child("volumeMounts").Index(m);
        if (!vm.is_object()) continue;
        const std::string name =
            vm.contains("name") && vm["name"].is_string() ? vm["name"].get<std::string>() : "";
        const std::string mount = vm.contains("mountPath") && vm["mountPath"].is_string()
                                      ? vm["mountPath"].get<std::string>()
                                      : "";
        if (name.empty()) {
          errors.push_back(Required(path.Child("name"), ""));
        } else if (!volumes.contains(name)) {
          errors.push_back(NotFound(path.Child("name"), QuoteJson(name)));
        }
        if (mount.empty()) {
          errors.push_back(Required(path.Child("mountPath"), ""));
        } else if (!paths.insert(mount).second) {
          errors.push_back(Invalid(path.Child("mountPath"), QuoteJson(mount), "must be unique"));
        }
      }
    }
  }
  return errors;
}

const EnvVar* Container::FindEnv(std::string_view env_name) const {
  for (const EnvVar& e : env) {
    if (e.name == env_name) return &e;
  }
  return nullptr;
}

const ContainerPort* Container::FindPort(std::string_view port_name) const {
  for (const ContainerPort& p : ports) {
    if (p.name == port_name) return &p;
  }
  return nullptr;
}

PodTemplate PodTemplate::Decode(const json& j, const FieldPath& path, FieldErrors* errors) {
  PodTemplate t;
  ObjectReader r(j, path, errors);
  if (!r.ok()) return t;
  // Strings from a parsed document are valid UTF-8; replace guards one built in code.
  t.raw_ = j.dump(-1, ' ', false, json::error_handler_t::replace);
  r.Object("metadata");
  const json* spec = r.Object("spec");
  if (spec == nullptr) {
    if (r.Get("spec") == nullptr) {
      errors->push_back(Required(r.Path("spec"), "the pod template needs a spec with containers"));
    }
    return t;
  }
  ObjectReader s(*spec, r.Path("spec"), errors);
  t.restart_policy_ = s.String("restartPolicy");
  const json* containers = s.Array("containers");
  if (containers == nullptr || containers->empty()) {
    // Absent or empty; a value of the wrong type was reported by Array() already.
    if (s.Get("containers") == nullptr || containers != nullptr) {
      errors->push_back(Required(s.Path("containers"), "at least one container is needed"));
    }
    return t;
  }
  FieldErrors volumes = ValidatePodVolumes(*spec, r.Path("spec"));
  errors->insert(errors->end(), volumes.begin(), volumes.end());
  std::set<std::string> names;
  for (size_t i = 0; i < containers->size(); ++i) {
    FieldPath cpath = s.Path("containers").Index(i);
    Container c = DecodeContainer((*containers)[i], cpath, errors);
    if (!c.name.empty() && !names.insert(c.name).second) {
      errors->push_back({FieldErrorType::kDuplicate, cpath.Child("name").str(), QuoteJson(c.name),
                         "container names must be unique within a pod"});
    }
    t.containers_.push_back(std::move(c));
  }
  return t;
}

json PodTemplate::raw() const { return json::parse(raw_); }

const Container* PodTemplate::TrainingContainer() const {
  for (const Container& c : containers_) {
    if (c.FindPort(kTrainingPortName) || c.FindPort(kKubeflowPortName)) return &c;
  }
  for (const Container& c : containers_) {
    if (c.name == "tensorflow") return &c;
  }
  return containers_.empty() ? nullptr : &containers_.front();
}

int32_t PodTemplate::TrainingPort() const {
  const Container* c = TrainingContainer();
  if (c == nullptr) return kDefaultTrainingPort;
  if (const ContainerPort* p = c->FindPort(kTrainingPortName)) return p->container_port;
  if (const ContainerPort* p = c->FindPort(kKubeflowPortName)) return p->container_port;
  return kDefaultTrainingPort;
}

int32_t PodTemplate::MetricsPort() const {
  const Container* c = TrainingContainer();
  if (c == nullptr) return kDefaultMetricsPort;
  if (const ContainerPort* p = c->FindPort(kMetricsPortName)) return p->container_port;
  return kDefaultMetricsPort;
}

}  // namespace lockstep::api
