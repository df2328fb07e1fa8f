#include "common/log.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include <nlohmann/json.hpp>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace lockstep::common {
namespace {

Severity InitialSeverity() {
  const char* env = std::getenv("LOCKSTEP_LOG");
  return env && std::strcmp(env, "debug") == 0 ? Severity::kDebug : Severity::kInfo;
}

std::atomic<Severity> g_min{InitialSeverity()};
std::atomic<LogFormat> g_format{LogFormat::kText};
std::mutex g_mu;
std::function<void(Severity, std::string_view)>* g_sink = nullptr;

}  // namespace

void SetMinSeverity(Severity min) { g_min = min; }
void SetLogFormat(LogFormat format) { g_format = format; }

void SetLogSink(std::function<void(Severity, std::string_view)> sink) {
  std::lock_guard lock(g_mu);
  delete g_sink;
  g_sink = sink ? new std::function<void(Severity, std::string_view)>(std::move(sink)) : nullptr;
}

void Log(Severity severity, std::string_view component, std::string_view message) {
  if (severity < g_min.load()) return;
  static constexpr char kLetters[] = "DIWE";
  static constexpr const char* kLevels[] = {"debug", "info", "warning", "error"};
  std::string ts = absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(), absl::UTCTimeZone());
  std::string line;
  if (g_format.load() == LogFormat::kJson) {
    nlohmann::json j = {{"ts", ts},
                        {"level", kLevels[static_cast<int>(severity)]},
                        {"component", component},
                        {"msg", message}};
    line = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  } else {
    line = StrCat(ts, " ", kLetters[static_cast<int>(severity)], " ", component, "] ", message);
  }
  std::lock_guard lock(g_mu);
  if (g_sink) {
    (*g_sink)(severity, line);
    return;
  }
  line += '\n';
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace lockstep::common
