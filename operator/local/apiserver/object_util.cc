#include "operator/local/apiserver/object_util.h"

#include <random>

#include <fmt/format.h>

#include "absl/time/clock.h"
#include "operator/api/json_reader.h"

namespace lockstep::local {

using nlohmann::json;

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string Now() { return api::FormatKubeTime(absl::Now()); }

std::string RandomSuffix(size_t n) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static constexpr char kChars[] = "bcdfghjklmnpqrstvwxz2456789";
  std::string out;
  for (size_t i = 0; i < n; ++i) out += kChars[rng() % (sizeof(kChars) - 1)];
  return out;
}

std::string NewUid() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  uint64_t a = rng(), b = rng();
  return fmt::format("{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}", a >> 32, (a >> 16) & 0xffff, a & 0xfff,
                     (b >> 48 & 0x3fff) | 0x8000, b & 0xffffffffffff);
}

json& Meta(json& obj) {
  json& m = obj["metadata"];
  if (!m.is_object()) m = json::object();
  return m;
}

std::string MetaString(const json& obj, const char* key) {
  const json* m = api::ObjectAt(obj, "metadata");
  return m ? api::StringAt(*m, key) : "";
}

}  // namespace lockstep::local
