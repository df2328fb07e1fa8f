#pragma once
// Server-side printing, as `kubectl get` asks for it (Accept: ...;as=Table;g=meta.k8s.io):
// objects become a meta.k8s.io/v1 Table whose columns are a custom resource's
// additionalPrinterColumns, the usual ones for pods and services, or Name and Age.
// Thread-safety: pure functions.

#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "operator/local/object_store.h"
#include "operator/local/resource_registry.h"

namespace lockstep::local {

// True when an Accept header asks for a Table.
bool WantsTable(std::string_view accept);

// Each row carries the object's metadata (PartialObjectMetadata), or the whole object when
// `full_objects` (the request's includeObject=Object, which kubectl sends to sort by a field).
nlohmann::json ToTable(const ResourceType& type, const std::vector<ObjectPtr>& objects,
                       const std::string& resource_version, bool full_objects = false);

}  // namespace lockstep::local
