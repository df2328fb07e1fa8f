#include <algorithm>
#include <chrono>
#include <random>
#include <utility>

#include "absl/strings/escaping.h"
#include "common/str_util.h"
#include "operator/api/json_reader.h"
#include "operator/local/apiserver/api_server_impl.h"
#include "operator/local/apiserver/table.h"

namespace lockstep::local {

using nlohmann::json;

namespace {

absl::StatusOr<std::vector<FieldRequirement>> ParseFieldSelector(const std::string& text) {
  std::vector<FieldRequirement> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t comma = text.find(',', pos);
    std::string part =
        text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    pos = comma == std::string::npos ? text.size() : comma + 1;
    if (part.empty()) continue;
    size_t op = part.find("!=");
    bool equal = op == std::string::npos;
    size_t op_len = 2;
    if (equal) {
      op = part.find("==");
      if (op == std::string::npos) {
        op = part.find('=');
        op_len = 1;
      }
    }
    if (op == std::string::npos || op == 0) {
      return absl::InvalidArgumentError(StrCat("invalid field selector \"", text, "\""));
    }
    FieldRequirement r{{}, part.substr(op + op_len), equal};
    std::string field = part.substr(0, op);
    size_t start = 0;
    while (true) {
      size_t dot = field.find('.', start);
      r.path.push_back(
          field.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
    out.push_back(std::move(r));
  }
  return out;
}

std::string FieldValue(const json& obj, const std::vector<std::string>& path) {
  const json* at = &obj;
  for (const std::string& p : path) {
    if (!at->is_object()) return "";
    auto it = at->find(p);
    if (it == at->end()) return "";
    at = &*it;
  }
  if (at->is_string()) return at->get<std::string>();
  if (at->is_boolean() || at->is_number()) return at->dump();
  return "";
}

// A watch response: the store's events for one collection, filtered, with bookmarks.
class CollectionWatch final : public WatchSource {
 public:
  CollectionWatch(ObjectStore* store, std::shared_ptr<Subscription> sub,
                  std::shared_ptr<const ResourceType> type, Filter filter, bool bookmarks,
                  absl::Duration bookmark_interval, absl::Duration timeout, bool tables)
      : tables_(tables),
        store_(store),
        sub_(std::move(sub)),
        type_(std::move(type)),
        filter_(std::move(filter)),
        bookmarks_(bookmarks),
        interval_(std::chrono::milliseconds(absl::ToInt64Milliseconds(bookmark_interval))),
        deadline_(std::chrono::steady_clock::now() +
                  std::chrono::milliseconds(absl::ToInt64Milliseconds(timeout))),
        next_bookmark_(std::chrono::steady_clock::now() + interval_) {}

  ~CollectionWatch() override { sub_->Close(); }

  void Cancel() override { sub_->Close(); }

  std::optional<std::string> Next() override {
    while (true) {
      auto now = std::chrono::steady_clock::now();
      if (now >= deadline_) return std::nullopt;
      auto wake = std::min(
          {deadline_, bookmarks_ ? next_bookmark_ : deadline_, now + std::chrono::seconds(1)});
      std::vector<StoreEvent> events = sub_->Next(
          std::chrono::duration_cast<std::chrono::milliseconds>(std::max(wake - now, {})));
      std::string lines = Format(events);
      if (!lines.empty()) return lines;
      if (sub_->closed()) return std::nullopt;
      now = std::chrono::steady_clock::now();
      if (now < next_bookmark_ || !bookmarks_) return std::string();  // still alive
      if (bookmarks_ && now >= next_bookmark_) {
        next_bookmark_ = now + interval_;
        // Every event up to this version has been queued to us (the store publishes under
        // the same lock); deliver any that raced in before claiming it.
        int64_t rv = store_->resource_version();
        std::string pending = Format(sub_->Next(std::chrono::milliseconds(0)));
        if (!pending.empty()) return pending;
        return Dump({{"type", "BOOKMARK"},
                     {"object",
                      {{"kind", type_->kind},
                       {"apiVersion", type_->ApiVersion()},
                       {"metadata", {{"resourceVersion", std::to_string(rv)}}}}}}) +
               "\n";
      }
    }
  }

 private:
  std::string Format(const std::vector<StoreEvent>& events) {
    std::string out;
    for (const StoreEvent& e : events) {
      bool now_in = e.type != StoreEvent::Type::kDeleted && filter_.Matches(*e.object);
      bool was_in = e.type == StoreEvent::Type::kDeleted
                        ? filter_.Matches(*e.object)
                        : (e.old_object && filter_.Matches(*e.old_object));
      const char* type = nullptr;
      if (e.type == StoreEvent::Type::kDeleted) {
        type = was_in ? "DELETED" : nullptr;
      } else if (now_in) {
        type = was_in && e.type == StoreEvent::Type::kModified ? "MODIFIED" : "ADDED";
      } else if (was_in) {
        type = "DELETED";  // it left the selector
      }
      if (!type) continue;
      // `kubectl get -w` asks for tables: each event carries a one-row Table.
      out +=
          Dump({{"type", type},
                {"object", tables_ ? ToTable(*type_, {e.object}, std::to_string(e.resource_version))
                                   : *e.object}});
      out += '\n';
    }
    return out;
  }

  bool tables_;
  ObjectStore* store_;
  std::shared_ptr<Subscription> sub_;
  std::shared_ptr<const ResourceType> type_;
  Filter filter_;
  bool bookmarks_;
  std::chrono::steady_clock::duration interval_;
  std::chrono::steady_clock::time_point deadline_;
  std::chrono::steady_clock::time_point next_bookmark_;
};

}  // namespace

uint64_t ApiServer::Impl::NewTokenEpoch() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 20) ^ rd();
}

bool Filter::Matches(const json& obj) const {
  std::map<std::string, std::string> l;
  if (const json* m = api::ObjectAt(obj, "metadata")) {
    if (const json* ls = api::ObjectAt(*m, "labels")) {
      for (auto it = ls->begin(); it != ls->end(); ++it) {
        if (it->is_string()) l[it.key()] = it->get<std::string>();
      }
    }
  }
  if (!labels.Matches(l)) return false;
  for (const FieldRequirement& f : fields) {
    if ((FieldValue(obj, f.path) == f.value) != f.equal) return false;
  }
  return true;
}

absl::StatusOr<Filter> FilterOf(const ResourceType& type,
                                const std::map<std::string, std::string>& query) {
  Filter f;
  if (auto it = query.find("labelSelector"); it != query.end()) {
    absl::StatusOr<kube::LabelSelector> s = kube::LabelSelector::Parse(it->second);
    if (!s.ok()) return s.status();
    f.labels = std::move(*s);
  }
  if (auto it = query.find("fieldSelector"); it != query.end()) {
    absl::StatusOr<std::vector<FieldRequirement>> s = ParseFieldSelector(it->second);
    if (!s.ok()) return s.status();
    // As the API server's field label conversion: metadata.name and metadata.namespace, and
    // what the kind adds; a selector naming anything else is refused, not ignored.
    std::vector<std::string> labels = StrategyFor(type).FieldLabels();
    labels.insert(labels.begin(), {"metadata.name", "metadata.namespace"});
    for (FieldRequirement& r : *s) {
      std::string label = StrJoin(r.path, ".");
      if (std::find(labels.begin(), labels.end(), label) == labels.end()) {
        return absl::InvalidArgumentError(StrCat("\"", label,
                                                 "\" is not a known field selector: only \"",
                                                 StrJoin(labels, "\", \""), "\""));
      }
      if (label == "source") r.path = {"source", "component"};  // an event's source
    }
    f.fields = std::move(*s);
  }
  return f;
}

ApiResponse ApiServer::Impl::List(const Route& route, const ApiRequest& r) {
  const ResourceType& t = *route.type;
  absl::StatusOr<Filter> filter = FilterOf(t, r.query);
  if (!filter.ok()) return Fail(400, "BadRequest", std::string(filter.status().message()));
  absl::StatusOr<std::optional<int64_t>> limit_param = QueryInt(r.query, "limit");
  if (!limit_param.ok())
    return Fail(400, "BadRequest", std::string(limit_param.status().message()));
  int64_t limit = limit_param->value_or(0);
  std::string token = Query(r.query, "continue");
  std::shared_ptr<Snapshot> snap;
  size_t start = 0;
  if (!token.empty()) {
    // "<epoch>:<snapshot>:<offset>" in base64. A token that does not parse is a bad request; one
    // from another run of the server, or for a snapshot no longer kept, has expired.
    std::string decoded;
    std::vector<uint64_t> fields;
    bool valid = absl::Base64Unescape(token, &decoded) && !decoded.empty();
    for (size_t pos = 0; valid && pos <= decoded.size();) {
      size_t colon = std::min(decoded.find(':', pos), decoded.size());
      std::string part = decoded.substr(pos, colon - pos);
      valid = !part.empty() && part.size() <= 19 &&
              std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
      if (valid) fields.push_back(std::strtoull(part.c_str(), nullptr, 10));
      pos = colon + 1;
    }
    valid = valid && fields.size() == 3;
    std::lock_guard lock(tokens_mu_);
    if (!valid || (fields[0] == token_epoch_ && fields[1] >= next_token_)) {
      return Fail(
          400, "BadRequest",
          StrCat("invalid continue token \"", token, "\": it is not a token this server issued"));
    }
    start = fields[2];
    auto it = fields[0] == token_epoch_ ? snapshots_.find(fields[1]) : snapshots_.end();
    if (it == snapshots_.end()) {
      return Fail(410, "Expired",
                  "the provided continue parameter is too old to display a consistent list "
                  "result; list again without it");
    }
    snap = it->second;
  } else {
    snap = std::make_shared<Snapshot>();
    auto [items, rv] =
        s_->store_->List(StorePrefix(t.GroupResource(), t.namespaced ? route.ns : ""));
    snap->rv = rv;
    for (auto& [key, obj] : items) {
      if (filter->Matches(*obj)) snap->items.push_back(std::move(obj));
    }
  }
  size_t end = snap->items.size();
  if (limit > 0) end = std::min(end, start + static_cast<size_t>(limit));
  json items = json::array();
  std::vector<ObjectPtr> page;
  for (size_t i = std::min(start, end); i < end; ++i) page.push_back(snap->items[i]);
  json list;
  if (WantsTable(r.accept)) {
    list = ToTable(t, page, std::to_string(snap->rv), Query(r.query, "includeObject") == "Object");
  } else {
    for (const ObjectPtr& obj : page) items.push_back(*obj);
    list = {{"kind", t.list_kind},
            {"apiVersion", t.ApiVersion()},
            {"metadata", {{"resourceVersion", std::to_string(snap->rv)}}},
            {"items", std::move(items)}};
  }
  if (end < snap->items.size()) {
    std::lock_guard lock(tokens_mu_);
    uint64_t id = next_token_++;
    snapshots_[id] = snap;
    while (snapshots_.size() > 64) snapshots_.erase(snapshots_.begin());
    list["metadata"]["continue"] = absl::Base64Escape(StrCat(token_epoch_, ":", id, ":", end));
    list["metadata"]["remainingItemCount"] = snap->items.size() - end;
  }
  return Reply(200, list);
}

ApiResponse ApiServer::Impl::Watch(const Route& route, const ApiRequest& r) {
  const ResourceType& t = *route.type;
  absl::StatusOr<Filter> filter = FilterOf(t, r.query);
  if (!filter.ok()) return Fail(400, "BadRequest", std::string(filter.status().message()));
  std::string rv_text = Query(r.query, "resourceVersion");
  std::optional<int64_t> from;
  if (!rv_text.empty() && rv_text != "0") {
    char* end = nullptr;
    long long v = std::strtoll(rv_text.c_str(), &end, 10);
    if (*end != '\0' || v < 0) {
      return Fail(400, "BadRequest", StrCat("invalid resourceVersion \"", rv_text, "\""));
    }
    from = v;
  }
  std::string prefix = StorePrefix(t.GroupResource(), t.namespaced ? route.ns : "");
  absl::StatusOr<std::shared_ptr<Subscription>> sub = s_->store_->Watch(prefix, from);
  if (!sub.ok()) {
    // As the API server does: a 200 stream whose only event is the 410 error.
    json error = StatusBody(410, "Expired", std::string(sub.status().message()));
    struct Once final : WatchSource {
      std::optional<std::string> line;
      std::optional<std::string> Next() override { return std::exchange(line, std::nullopt); }
    };
    auto once = std::make_shared<Once>();
    once->line = Dump({{"type", "ERROR"}, {"object", error}}) + "\n";
    return {200, "", once};
  }
  absl::StatusOr<std::optional<int64_t>> timeout_seconds = QueryInt(r.query, "timeoutSeconds");
  if (!timeout_seconds.ok()) {
    return Fail(400, "BadRequest", std::string(timeout_seconds.status().message()));
  }
  absl::Duration timeout = s_->options_.default_watch_timeout;
  if (*timeout_seconds) timeout = absl::Seconds(std::max<int64_t>(1, **timeout_seconds));
  bool bookmarks = QueryBool(r.query, "allowWatchBookmarks");
  return {200, "",
          std::make_shared<CollectionWatch>(s_->store_.get(), *sub, route.type, *filter, bookmarks,
                                            s_->options_.bookmark_interval, timeout,
                                            WantsTable(r.accept))};
}

}  // namespace lockstep::local
