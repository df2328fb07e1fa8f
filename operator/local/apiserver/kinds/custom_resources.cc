// Custom resources: their CRD's schema gives defaults, prunes unknown fields (an error under
// fieldValidation=Strict) and validates; with a status subresource, status is set through
// /status only; the CRD's additionalPrinterColumns are the table.

#include "common/str_util.h"
#include "operator/api/crd_schema.h"
#include "operator/api/json_reader.h"
#include "operator/local/apiserver/kinds/kind_strategy.h"

namespace lockstep::local {

using nlohmann::json;

namespace {

class CustomResources final : public KindStrategy {
 public:
  void PrepareForCreate(const ResourceType& type, json& obj) const override {
    if (type.status_subresource) obj.erase("status");
  }

  absl::Status Normalize(const ResourceType& type, json& obj, bool strict_fields) const override {
    api::ApplySchemaDefaults(type.schema, &obj);
    std::vector<std::string> unknown = api::PruneUnknownFields(type.schema, &obj);
    if (!strict_fields || unknown.empty()) return absl::OkStatus();
    std::vector<std::string> parts;
    for (const std::string& u : unknown) parts.push_back(StrCat("unknown field \"", u, "\""));
    return absl::InvalidArgumentError(StrCat("strict decoding error: ", StrJoin(parts, ", ")));
  }

  api::FieldErrors Validate(const ResourceType& type, const json& obj,
                            const json* old) const override {
    return api::ValidateAgainstSchema(type.schema, obj, api::FieldPath(), old);
  }

  std::vector<TableColumn> TableColumns(const ResourceType& type) const override {
    if (!type.printer_columns.is_array() || type.printer_columns.empty()) {
      return {NameColumn(), AgeColumn()};
    }
    std::vector<TableColumn> cols = {NameColumn()};
    for (const json& c : type.printer_columns) {
      if (!c.is_object()) continue;
      int priority = c.contains("priority") && c["priority"].is_number_integer()
                         ? c["priority"].get<int>()
                         : 0;
      cols.push_back(PathColumn(api::StringAt(c, "name"), api::StringAt(c, "type"),
                                api::StringAt(c, "jsonPath"), priority));
    }
    return cols;
  }
};

}  // namespace

const KindStrategy& CustomResourceStrategy() {
  static const CustomResources custom_resources;
  return custom_resources;
}

}  // namespace lockstep::local
