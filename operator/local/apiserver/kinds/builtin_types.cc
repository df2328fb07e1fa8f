// The Go types of the built-in kinds `lockstep local` serves, as far as a request's JSON must
// fit them: a Kubernetes API server decodes a built-in object into its Go struct first, and a
// value of the wrong JSON type (a number in a ConfigMap's data, a string for a port) is a 400
// BadRequest before any validation ("ConfigMap in version "v1" cannot be handled as a
// ConfigMap: json: cannot unmarshal number into Go struct field ConfigMap.data of type
// string"). Fields not described here are not checked (nor dropped). null fits every type, as
// Go decodes it to the zero value.

#include "operator/local/apiserver/kinds/builtin_types.h"

#include <map>

#include "common/str_util.h"

namespace lockstep::local {

using nlohmann::json;

namespace {

// The schema language: "string", "int", "bool", "number", "quantity" (a string or a number),
// "int-or-string", "any"; an object {field: schema}; [schema] a list; {"*": schema} a map.
constexpr char kTypes[] = R"json({
  "labelSelector": {"matchLabels": {"*": "string"},
                    "matchExpressions": [{"key": "string", "operator": "string",
                                          "values": ["string"]}]},
  "objectMeta": {"name": "string", "generateName": "string", "namespace": "string",
                 "uid": "string", "resourceVersion": "string", "generation": "int",
                 "labels": {"*": "string"}, "annotations": {"*": "string"},
                 "finalizers": ["string"],
                 "ownerReferences": [{"apiVersion": "string", "kind": "string", "name": "string",
                                      "uid": "string", "controller": "bool",
                                      "blockOwnerDeletion": "bool"}]},
  "container": {"name": "string", "image": "string", "command": ["string"], "args": ["string"],
                "workingDir": "string", "imagePullPolicy": "string",
                "ports": [{"name": "string", "containerPort": "int", "hostPort": "int",
                           "protocol": "string", "hostIP": "string"}],
                "env": [{"name": "string", "value": "string", "valueFrom": "any"}],
                "resources": {"limits": {"*": "quantity"}, "requests": {"*": "quantity"}},
                "volumeMounts": [{"name": "string", "mountPath": "string", "readOnly": "bool",
                                  "subPath": "string"}],
                "stdin": "bool", "tty": "bool"},
  "podSpec": {"containers": ["@container"], "initContainers": ["@container"],
              "volumes": [{"name": "string"}], "restartPolicy": "string",
              "nodeSelector": {"*": "string"}, "nodeName": "string",
              "serviceAccountName": "string", "serviceAccount": "string",
              "terminationGracePeriodSeconds": "int", "activeDeadlineSeconds": "int",
              "hostNetwork": "bool", "dnsPolicy": "string", "hostname": "string",
              "subdomain": "string", "schedulerName": "string", "priorityClassName": "string",
              "priority": "int", "tolerations": [{"key": "string", "operator": "string",
                                                  "value": "string", "effect": "string",
                                                  "tolerationSeconds": "int"}],
              "automountServiceAccountToken": "bool"},
  "kinds": {
    "ConfigMap": {"data": {"*": "string"}, "binaryData": {"*": "string"}, "immutable": "bool"},
    "Secret": {"data": {"*": "string"}, "stringData": {"*": "string"}, "type": "string",
               "immutable": "bool"},
    "ServiceAccount": {"secrets": [{"name": "string"}],
                       "automountServiceAccountToken": "bool"},
    "Namespace": {"spec": {"finalizers": ["string"]}},
    "Pod": {"spec": "@podSpec"},
    "Service": {"spec": {"type": "string", "clusterIP": "string", "clusterIPs": ["string"],
                         "selector": {"*": "string"}, "publishNotReadyAddresses": "bool",
                         "ports": [{"name": "string", "protocol": "string", "port": "int",
                                    "targetPort": "int-or-string", "nodePort": "int"}]}},
    "Lease": {"spec": {"holderIdentity": "string", "leaseDurationSeconds": "int",
                       "acquireTime": "string", "renewTime": "string",
                       "leaseTransitions": "int"}},
    "Deployment": {"spec": {"replicas": "int", "selector": "@labelSelector",
                            "template": {"metadata": "@objectMeta", "spec": "@podSpec"}}},
    "PodDisruptionBudget": {"spec": {"minAvailable": "int-or-string",
                                     "maxUnavailable": "int-or-string",
                                     "selector": "@labelSelector"}},
    "Event": {"reason": "string", "message": "string", "type": "string", "count": "int"}
  }
})json";

const json& Types() {
  static const json types = json::parse(kTypes);
  return types;
}

const char* JsonTypeName(const json& v) {
  if (v.is_string()) return "string";
  if (v.is_boolean()) return "bool";
  if (v.is_number()) return "number";
  if (v.is_array()) return "array";
  return "object";
}

struct Walker {
  std::string error;  // the first mismatch

  // `path` is the Go field path ("ConfigMap.spec.containers.image"): no indices or keys.
  void Walk(const json& schema, const json& v, const std::string& path) {
    if (!error.empty() || v.is_null()) return;
    if (schema.is_string()) {
      std::string s = schema.get<std::string>();
      if (s.starts_with("@")) return Walk(Types()[s.substr(1)], v, path);
      bool fits = true;
      std::string go = s;
      if (s == "string") {
        fits = v.is_string();
      } else if (s == "int") {
        fits = v.is_number_integer() ||
               (v.is_number_float() &&
                v.get<double>() == static_cast<double>(static_cast<int64_t>(v.get<double>())));
        go = "int64";
      } else if (s == "bool") {
        fits = v.is_boolean();
      } else if (s == "number") {
        fits = v.is_number();
        go = "float64";
      } else if (s == "quantity") {
        fits = v.is_string() || v.is_number();
        go = "resource.Quantity";
      } else if (s == "int-or-string") {
        fits = v.is_string() || v.is_number_integer();
        go = "intstr.IntOrString";
      }
      if (!fits) {
        error = StrCat("json: cannot unmarshal ", JsonTypeName(v), " into Go struct field ", path,
                       " of type ", go);
      }
      return;
    }
    if (schema.is_array()) {
      if (!v.is_array()) {
        error = StrCat("json: cannot unmarshal ", JsonTypeName(v), " into Go struct field ", path,
                       " of type []", ItemName(schema[0]));
        return;
      }
      for (const json& item : v) Walk(schema[0], item, path);
      return;
    }
    if (!v.is_object()) {
      error = StrCat("json: cannot unmarshal ", JsonTypeName(v), " into Go struct field ", path,
                     " of type ",
                     schema.contains("*") ? "map[string]" + ItemName(schema["*"]) : "object");
      return;
    }
    if (auto any = schema.find("*"); any != schema.end()) {
      for (const auto& [k, item] : v.items()) Walk(*any, item, path);
      return;
    }
    for (const auto& [k, item] : v.items()) {
      if (auto sub = schema.find(k); sub != schema.end()) Walk(*sub, item, StrCat(path, ".", k));
    }
  }

  static std::string ItemName(const json& schema) {
    if (schema.is_string()) {
      std::string s = schema.get<std::string>();
      return s.starts_with("@") ? "v1." + s.substr(1) : s;
    }
    return schema.is_array() ? "[]" + ItemName(schema[0]) : "object";
  }
};

}  // namespace

std::string BuiltinTypeError(const std::string& kind, bool builtin, const json& obj) {
  Walker w;
  if (auto meta = obj.find("metadata"); meta != obj.end()) {
    w.Walk(Types()["objectMeta"], *meta, kind + ".metadata");
  }
  if (builtin && w.error.empty()) {
    const json& kinds = Types()["kinds"];
    if (auto k = kinds.find(kind); k != kinds.end()) w.Walk(*k, obj, kind);
  }
  return w.error;
}

}  // namespace lockstep::local
