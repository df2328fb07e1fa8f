#pragma once
// Minimal structured logging for the operator and the trainer, in one line format: one line
// per message on stderr, "2026-11-21T17:05:00.123Z I watcher] message", or JSON objects.
// Tests may install a sink to capture lines.
// Nothing that is a secret (tokens, keys, Secret data) may be passed here.
// Thread-safety: thread-safe.

#include <functional>
#include <string>
#include <string_view>

#include "common/str_util.h"

namespace lockstep::common {

enum class Severity { kDebug, kInfo, kWarning, kError };

// Text: "2026-11-21T17:05:00.123Z I watcher] message". JSON: one object per line,
// {"ts":"...","level":"info","component":"watcher","msg":"message"}.
enum class LogFormat { kText, kJson };
void SetLogFormat(LogFormat format);

// Messages below `min` are dropped (default kInfo; LOCKSTEP_LOG=debug lowers it).
void SetMinSeverity(Severity min);
// Replaces stderr; an empty function restores it.
void SetLogSink(std::function<void(Severity, std::string_view line)> sink);
void Log(Severity severity, std::string_view component, std::string_view message);

template <typename... Args>
void LogInfo(std::string_view component, const Args&... args) {
  Log(Severity::kInfo, component, StrCat(args...));
}
template <typename... Args>
void LogWarning(std::string_view component, const Args&... args) {
  Log(Severity::kWarning, component, StrCat(args...));
}
template <typename... Args>
void LogError(std::string_view component, const Args&... args) {
  Log(Severity::kError, component, StrCat(args...));
}
template <typename... Args>
void LogDebug(std::string_view component, const Args&... args) {
  Log(Severity::kDebug, component, StrCat(args...));
}

}  // namespace lockstep::common
