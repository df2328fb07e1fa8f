#include "operator/local/table.h"

#include "absl/time/clock.h"
#include "common/str_util.h"
#include "operator/api/json_reader.h"

namespace lockstep::local {

using nlohmann::json;

namespace {

// "5s", "3m20s", "4h", "2d": how kubectl shows ages.
std::string HumanAge(const std::string& timestamp) {
  std::optional<absl::Time> t = api::ParseKubeTime(timestamp);
  if (!t) return "<unknown>";
  int64_t s = std::max<int64_t>(0, absl::ToInt64Seconds(absl::Now() - *t));
  int64_t m = s / 60, h = m / 60, d = h / 24;
  if (s < 120) return StrCat(s, "s");
  if (m < 10) return s % 60 ? StrCat(m, "m", s % 60, "s") : StrCat(m, "m");
  if (h < 3) return StrCat(m, "m");
  if (h < 8) return m % 60 ? StrCat(h, "h", m % 60, "m") : StrCat(h, "h");
  if (h < 48) return StrCat(h, "h");
  if (d < 8) return h % 24 ? StrCat(d, "d", h % 24, "h") : StrCat(d, "d");
  if (d < 730) return StrCat(d, "d");
  return StrCat(d / 365, "y");
}

struct Column {
  std::string name;
  std::string type;    // string, integer, number, boolean, date
  std::string format;  // "name" for the Name column
  std::string path;    // simple JSONPath: .status.state
  int priority = 0;
};

// The value at a simple JSONPath (".a.b"), or null.
json At(const json& obj, std::string_view path) {
  const json* at = &obj;
  size_t pos = path.starts_with('.') ? 1 : 0;
  while (pos < path.size()) {
    size_t dot = path.find('.', pos);
    std::string key(
        path.substr(pos, dot == std::string_view::npos ? std::string_view::npos : dot - pos));
    if (!at->is_object() || !at->contains(key)) return nullptr;
    at = &(*at)[key];
    if (dot == std::string_view::npos) break;
    pos = dot + 1;
  }
  return *at;
}

std::vector<Column> ColumnsFor(const ResourceType& t) {
  std::vector<Column> cols = {{"Name", "string", "name", ".metadata.name"}};
  if (t.custom() && t.printer_columns.is_array() && !t.printer_columns.empty()) {
    for (const json& c : t.printer_columns) {
      if (!c.is_object()) continue;
      cols.push_back(
          {api::StringAt(c, "name"), api::StringAt(c, "type"), "", api::StringAt(c, "jsonPath"),
           c.contains("priority") && c["priority"].is_number_integer() ? c["priority"].get<int>()
                                                                       : 0});
    }
    return cols;
  }
  if (t.plural == "pods") {
    cols.push_back({"Ready", "string", "", "ready"});
    cols.push_back({"Status", "string", "", "status"});
    cols.push_back({"Restarts", "string", "", "restarts"});
  } else if (t.plural == "services") {
    cols.push_back({"Type", "string", "", ".spec.type"});
    cols.push_back({"Cluster-IP", "string", "", ".spec.clusterIP"});
    cols.push_back({"Port(s)", "string", "", "ports"});
  } else if (t.plural == "events") {
    cols = {{"Last Seen", "date", "", ".lastTimestamp"},
            {"Type", "string", "", ".type"},
            {"Reason", "string", "", ".reason"},
            {"Object", "string", "", "object"},
            {"Message", "string", "", ".message"}};
    return cols;
  }
  cols.push_back({"Age", "date", "", ".metadata.creationTimestamp"});
  return cols;
}

json Cell(const Column& c, const json& obj) {
  if (c.path == "ready" || c.path == "restarts") {
    int ready = 0, total = 0, restarts = 0;
    if (const json* spec = api::ObjectAt(obj, "spec");
        spec && spec->contains("containers") && (*spec)["containers"].is_array()) {
      total = static_cast<int>((*spec)["containers"].size());
    }
    if (const json* status = api::ObjectAt(obj, "status")) {
      auto cs = status->find("containerStatuses");
      if (cs != status->end() && cs->is_array()) {
        for (const json& s : *cs) {
          if (s.is_object() && s.contains("ready") && s["ready"] == true) ++ready;
          if (s.is_object() && s.contains("restartCount") &&
              s["restartCount"].is_number_integer()) {
            restarts += s["restartCount"].get<int>();
          }
        }
      }
    }
    return c.path == "ready" ? json(StrCat(ready, "/", total)) : json(std::to_string(restarts));
  }
  if (c.path == "status") {
    const json* meta = api::ObjectAt(obj, "metadata");
    if (meta && meta->contains("deletionTimestamp")) return "Terminating";
    const json* status = api::ObjectAt(obj, "status");
    if (!status) return "Pending";
    std::string reason = api::StringAt(*status, "reason");
    if (auto cs = status->find("containerStatuses"); cs != status->end() && cs->is_array()) {
      for (const json& s : *cs) {
        const json* state = api::ObjectAt(s, "state");
        for (const char* k : {"waiting", "terminated"}) {
          const json* detail = state ? api::ObjectAt(*state, k) : nullptr;
          if (detail && !api::StringAt(*detail, "reason").empty())
            reason = api::StringAt(*detail, "reason");
        }
      }
    }
    return reason.empty() ? json(api::StringAt(*status, "phase")) : json(reason);
  }
  if (c.path == "ports") {
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
  if (c.path == "object") {
    const json* o = api::ObjectAt(obj, "involvedObject");
    return o ? json(StrCat(api::StringAt(*o, "kind"), "/", api::StringAt(*o, "name"))) : json("");
  }
  json v = At(obj, c.path);
  if (c.type == "date")
    return v.is_string() ? json(HumanAge(v.get<std::string>())) : json("<unknown>");
  if (v.is_null()) return c.type == "string" ? json("") : json(nullptr);
  return v;
}

}  // namespace

bool WantsTable(std::string_view accept) {
  return accept.find("as=Table") != std::string_view::npos;
}

json ToTable(const ResourceType& t, const std::vector<ObjectPtr>& objects,
             const std::string& resource_version, bool full_objects) {
  std::vector<Column> cols = ColumnsFor(t);
  json defs = json::array();
  for (const Column& c : cols) {
    defs.push_back({{"name", c.name},
                    {"type", c.type == "date" ? "string" : c.type},
                    {"format", c.format},
                    {"description", ""},
                    {"priority", c.priority}});
  }
  json rows = json::array();
  for (const ObjectPtr& obj : objects) {
    json cells = json::array();
    for (const Column& c : cols) cells.push_back(Cell(c, *obj));
    json meta = obj->contains("metadata") ? (*obj)["metadata"] : json::object();
    json row_object = full_objects ? *obj
                                   : json{{"kind", "PartialObjectMetadata"},
                                          {"apiVersion", "meta.k8s.io/v1"},
                                          {"metadata", meta}};
    rows.push_back({{"cells", cells}, {"object", std::move(row_object)}});
  }
  return {{"kind", "Table"},
          {"apiVersion", "meta.k8s.io/v1"},
          {"metadata", {{"resourceVersion", resource_version}}},
          {"columnDefinitions", defs},
          {"rows", rows}};
}

}  // namespace lockstep::local
