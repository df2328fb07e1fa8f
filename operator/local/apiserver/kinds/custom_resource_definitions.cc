// CustomResourceDefinitions: the name must be <plural>.<group>, a version and structural
// schemas are required, a valid CRD is Established at once, its types are served from the
// moment it is stored, and its custom resources go with it.

#include "common/str_util.h"
#include "operator/api/crd_schema.h"
#include "operator/api/json_reader.h"
#include "operator/local/apiserver/kinds/kind_strategy.h"
#include "operator/local/apiserver/object_util.h"

namespace lockstep::local {

using nlohmann::json;

namespace {

class CustomResourceDefinitions final : public KindStrategy {
 public:
  api::FieldErrors Validate(const ResourceType&, const json& obj, const json*) const override {
    api::FieldErrors errors;
    std::string name = MetaString(obj, "name");
    const json* spec = api::ObjectAt(obj, "spec");
    const json* names = spec ? api::ObjectAt(*spec, "names") : nullptr;
    std::string want =
        names ? StrCat(api::StringAt(*names, "plural"), ".", api::StringAt(*spec, "group")) : "";
    if (!names || want != name) {
      errors.push_back(
          api::Invalid(api::FieldPath("metadata.name"), api::QuoteJson(name),
                       StrCat("must be spec.names.plural+\".\"+spec.group (", want, ")")));
    }
    auto versions = spec ? spec->find("versions") : obj.end();
    if (!spec || versions == spec->end() || !versions->is_array() || versions->empty()) {
      errors.push_back(
          api::Required(api::FieldPath("spec.versions"), "must have at least one version"));
      return errors;
    }
    for (size_t i = 0; i < versions->size(); ++i) {
      const json* schema = api::ObjectAt((*versions)[i], "schema");
      const json* open_api = schema ? api::ObjectAt(*schema, "openAPIV3Schema") : nullptr;
      if (!open_api) continue;
      api::FieldErrors e = api::CheckStructuralSchema(
          *open_api,
          api::FieldPath("spec.versions").Index(i).Child("schema").Child("openAPIV3Schema"));
      errors.insert(errors.end(), e.begin(), e.end());
    }
    return errors;
  }

  // Names accepted and Established, and the stored versions (those marked storage: true).
  void Canonicalize(const ResourceType&, json& obj) const override {
    const json* spec = api::ObjectAt(obj, "spec");
    const json* names = spec ? api::ObjectAt(*spec, "names") : nullptr;
    if (!names) return;
    json status = {{"acceptedNames", *names},
                   {"storedVersions", json::array()},
                   {"conditions",
                    {{{"type", "NamesAccepted"},
                      {"status", "True"},
                      {"reason", "NoConflicts"},
                      {"lastTransitionTime", Now()}},
                     {{"type", "Established"},
                      {"status", "True"},
                      {"reason", "InitialNamesAccepted"},
                      {"lastTransitionTime", Now()}}}}};
    // Validate has made sure spec.versions is a non-empty array.
    for (const json& v : spec->at("versions")) {
      if (v.is_object() && v.contains("storage") && v["storage"] == true) {
        status["storedVersions"].push_back(v.value("name", ""));
      }
    }
    obj["status"] = std::move(status);
  }

  absl::Status AfterCreate(ServerContext& server, const json& obj) const override {
    server.registry().SetCustomResources(MetaString(obj, "name"), &obj);
    return absl::OkStatus();
  }

  void AfterUpdate(ServerContext& server, const json& obj) const override {
    server.registry().SetCustomResources(MetaString(obj, "name"), &obj);
  }

  void OnRemoved(ServerContext& server, const json& obj) const override {
    std::string name = MetaString(obj, "name");
    bool served = false;
    for (const auto& type : server.registry().All()) {
      served = served || (type->custom() && type->GroupResource() == name);
    }
    server.registry().SetCustomResources(name, nullptr);
    if (!served) return;
    for (const auto& [key, child] : server.store().List(name + "/").first) {
      (void)server.store().Remove(key);
    }
  }

  std::vector<TableColumn> TableColumns(const ResourceType&) const override {
    return {NameColumn(), AgeColumn()};
  }
};

}  // namespace

const KindStrategy& CustomResourceDefinitionStrategy() {
  static const CustomResourceDefinitions crds;
  return crds;
}

}  // namespace lockstep::local
