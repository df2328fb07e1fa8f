// Events: an event lives in its object's namespace (or, for a cluster-scoped object, in
// "default"), the fields `kubectl describe` selects events by, and the columns `kubectl get
// events` shows (Last Seen, Type, Reason, Object, Message).

#include "common/str_util.h"
#include "operator/api/json_reader.h"
#include "operator/local/apiserver/kinds/kind_strategy.h"
#include "operator/local/apiserver/object_util.h"

namespace lockstep::local {

using nlohmann::json;

namespace {

class Events final : public KindStrategy {
 public:
  api::FieldErrors Validate(const ResourceType&, const json& obj, const json*) const override {
    std::string ns = MetaString(obj, "namespace");
    const json* involved = api::ObjectAt(obj, "involvedObject");
    std::string object_ns = involved ? api::StringAt(*involved, "namespace") : "";
    bool matches = object_ns.empty() ? ns == "default" : object_ns == ns;
    if (matches) return {};
    return {api::Invalid(api::FieldPath("involvedObject.namespace"), api::QuoteJson(object_ns),
                         "does not match event.namespace")};
  }

  std::vector<std::string> FieldLabels() const override {
    return {"involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type"};
  }

  std::vector<TableColumn> TableColumns(const ResourceType&) const override {
    TableColumn object{
        "Object", "string", "", 0, [](const json& obj) {
          const json* o = api::ObjectAt(obj, "involvedObject");
          return o ? json(StrCat(api::StringAt(*o, "kind"), "/", api::StringAt(*o, "name")))
                   : json("");
        }};
    return {PathColumn("Last Seen", "date", ".lastTimestamp"),
            PathColumn("Type", "string", ".type"), PathColumn("Reason", "string", ".reason"),
            std::move(object), PathColumn("Message", "string", ".message")};
  }
};

}  // namespace

const KindStrategy& EventStrategy() {
  static const Events events;
  return events;
}

}  // namespace lockstep::local
