// Events: the columns `kubectl get events` shows (Last Seen, Type, Reason, Object, Message).

#include "common/str_util.h"
#include "operator/api/json_reader.h"
#include "operator/local/kinds/kind_strategy.h"

namespace lockstep::local {

using nlohmann::json;

namespace {

class Events final : public KindStrategy {
 public:
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
