#pragma once
// Server-side printing, as `kubectl get` asks for it (Accept: ...;as=Table;g=meta.k8s.io):
// objects become a meta.k8s.io/v1 Table whose columns are the kind's (KindStrategy::
// TableColumns: a custom resource's additionalPrinterColumns, the usual ones for pods,
// services and events, or Name and Age).
// Thread-safety: pure functions.

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "operator/local/apiserver/object_store.h"
#include "operator/local/apiserver/resource_registry.h"

namespace lockstep::local {

struct TableColumn {
  std::string name;
  std::string type;    // string, integer, number, boolean, date
  std::string format;  // "name" for the Name column
  int priority = 0;
  std::function<nlohmann::json(const nlohmann::json& object)> cell;
};

// Name (from metadata.name) and Age (from metadata.creationTimestamp).
TableColumn NameColumn();
TableColumn AgeColumn();
// The value at a simple JSONPath (".status.state"); a "date" column shows it as an age, a
// missing string as "", another missing value as null.
TableColumn PathColumn(std::string name, std::string type, std::string path, int priority = 0);

// "5s", "3m20s", "4h", "2d": how kubectl shows the age of a timestamp.
std::string HumanAge(const std::string& timestamp);

// True when an Accept header asks for a Table.
bool WantsTable(std::string_view accept);

// Each row carries the object's metadata (PartialObjectMetadata), or the whole object when
// `full_objects` (the request's includeObject=Object, which kubectl sends to sort by a field).
nlohmann::json ToTable(const ResourceType& type, const std::vector<ObjectPtr>& objects,
                       const std::string& resource_version, bool full_objects = false);

}  // namespace lockstep::local
