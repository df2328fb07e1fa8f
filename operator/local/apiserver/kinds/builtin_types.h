#pragma once
// Whether a request's object fits the Go types of its kind, as a Kubernetes API server decodes
// it before anything else: the metadata of every kind, and the common fields of the built-in
// kinds `lockstep local` serves (ConfigMap, Secret, Pod, Service, Deployment, ...).
// Thread-safety: pure function.

#include <string>

#include <nlohmann/json.hpp>

namespace lockstep::local {

// The first value of the wrong JSON type, as Go's decoder words it ("json: cannot unmarshal
// number into Go struct field ConfigMap.data of type string"); "" when the object fits.
// `builtin`: the kind is a built-in one (a custom resource's fields are its schema's to check).
std::string BuiltinTypeError(const std::string& kind, bool builtin, const nlohmann::json& obj);

}  // namespace lockstep::local
