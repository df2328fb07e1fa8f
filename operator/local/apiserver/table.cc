#include "operator/local/apiserver/table.h"

#include <algorithm>
#include <charconv>
#include <vector>

#include "absl/time/clock.h"
#include "common/str_util.h"
#include "operator/api/json_reader.h"
#include "operator/local/apiserver/kinds/kind_strategy.h"

namespace lockstep::local {

using nlohmann::json;

namespace {

// One step of a printer column's JSONPath, applied to each value: a field, then an optional
// subscript ("conditions[0]", "conditions[-1:]": an index or a slice, negative from the end).
std::vector<const json*> Step(const std::vector<const json*>& in, std::string_view step) {
  std::string_view key = step;
  std::string_view subscript;
  if (size_t open = step.find('['); open != std::string_view::npos && step.ends_with(']')) {
    key = step.substr(0, open);
    subscript = step.substr(open + 1, step.size() - open - 2);
  }
  std::vector<const json*> out;
  for (const json* at : in) {
    if (!key.empty()) {
      if (!at->is_object()) continue;
      auto it = at->find(std::string(key));
      if (it == at->end()) continue;
      at = &*it;
    }
    if (subscript.empty()) {
      out.push_back(at);
      continue;
    }
    if (!at->is_array()) continue;
    const int64_t n = static_cast<int64_t>(at->size());
    const size_t colon = subscript.find(':');
    auto parse = [n](std::string_view text, int64_t fallback) {
      if (text.empty()) return fallback;
      int64_t v = 0;
      auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
      if (ec != std::errc() || end != text.data() + text.size()) {
        return int64_t{-1} - n;  // matches nothing
      }
      return v < 0 ? v + n : v;
    };
    const int64_t begin = parse(subscript.substr(0, colon), 0);
    const int64_t end =
        colon == std::string_view::npos ? begin + 1 : parse(subscript.substr(colon + 1), n);
    for (int64_t i = std::max<int64_t>(begin, 0); i < std::min(end, n); ++i) {
      out.push_back(&(*at)[static_cast<size_t>(i)]);
    }
  }
  return out;
}

// The value at a printer column's JSONPath (".a.b", ".a[-1:].b"), or null; several values (a
// slice's) are joined by commas, as kubectl prints them.
json At(const json& obj, std::string_view path) {
  std::vector<const json*> values = {&obj};
  size_t pos = path.starts_with('.') ? 1 : 0;
  while (pos < path.size() && !values.empty()) {
    size_t dot = path.find('.', pos);
    values = Step(values, path.substr(pos, dot == std::string_view::npos ? std::string_view::npos
                                                                         : dot - pos));
    if (dot == std::string_view::npos) break;
    pos = dot + 1;
  }
  if (values.empty()) return nullptr;
  if (values.size() == 1) return *values[0];
  std::string joined;
  for (const json* v : values) {
    joined = StrCat(joined, joined.empty() ? "" : ",",
                    v->is_string() ? v->get<std::string>() : v->dump());
  }
  return joined;
}

}  // namespace

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

TableColumn PathColumn(std::string name, std::string type, std::string path, int priority) {
  TableColumn c{std::move(name), type, "", priority, nullptr};
  c.cell = [type, path = std::move(path)](const json& obj) -> json {
    json v = At(obj, path);
    if (type == "date") {
      return v.is_string() ? json(HumanAge(v.get<std::string>())) : json("<unknown>");
    }
    if (v.is_null()) return type == "string" ? json("") : json(nullptr);
    return v;
  };
  return c;
}

TableColumn NameColumn() {
  TableColumn c = PathColumn("Name", "string", ".metadata.name");
  c.format = "name";
  return c;
}

TableColumn AgeColumn() { return PathColumn("Age", "date", ".metadata.creationTimestamp"); }

bool WantsTable(std::string_view accept) {
  return accept.find("as=Table") != std::string_view::npos;
}

json ToTable(const ResourceType& t, const std::vector<ObjectPtr>& objects,
             const std::string& resource_version, bool full_objects) {
  std::vector<TableColumn> cols = StrategyFor(t).TableColumns(t);
  json defs = json::array();
  for (const TableColumn& c : cols) {
    defs.push_back({{"name", c.name},
                    {"type", c.type == "date" ? "string" : c.type},
                    {"format", c.format},
                    {"description", ""},
                    {"priority", c.priority}});
  }
  json rows = json::array();
  for (const ObjectPtr& obj : objects) {
    json cells = json::array();
    for (const TableColumn& c : cols) cells.push_back(c.cell(*obj));
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
