#pragma once
// How the trainer ends (DESIGN section 3): exit codes, and the JSON termination message
// {"reason","retryable","message"} that the operator reads from the container status.
// Codes 1-127 are permanent, 128 and above retryable.
// Thread-safety: WriteTerminationMessage may be called once, from any thread.

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace lockstep::trainer {

inline constexpr int kExitOk = 0;
inline constexpr int kExitBadConfig = 2;     // flags, TF_CONFIG, unsupported strategy
inline constexpr int kExitBadData = 3;       // missing or malformed data files
inline constexpr int kExitRetryable = 128;   // transient: I/O, a lost peer
inline constexpr int kExitTerminated = 143;  // SIGTERM: checkpointed, then exited

// Writes the message to `path` (best effort: a path that cannot be written is ignored) and
// also prints it to stderr.
void WriteTerminationMessage(const std::string& path, const std::string& reason, bool retryable,
                             const std::string& message);

// A successful run's message: {"reason":"Completed","retryable":false,"message",
// "progress" (GET /progress's JSON without its recoveries), "evaluation" ({"loss","metrics"},
// where this task evaluated the test set)}, from which the operator takes the job's final
// figures (the last poll of /progress is up to an interval old when the trainer exits). Kept
// under the kubelet's 4096 bytes.
void WriteCompletionMessage(const std::string& path, const std::string& message,
                            nlohmann::json progress, std::optional<nlohmann::json> evaluation);

}  // namespace lockstep::trainer
