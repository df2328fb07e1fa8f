#include "trainer/cli/termination.h"

#include <fstream>
#include <nlohmann/json.hpp>

#include "common/log.h"

namespace lockstep::trainer {

void WriteTerminationMessage(const std::string& path, const std::string& reason, bool retryable,
                             const std::string& message) {
  nlohmann::json j = {{"reason", reason}, {"retryable", retryable}, {"message", message}};
  std::string text = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  common::LogError("trainer", reason, ": ", message);
  if (path.empty()) return;
  std::ofstream out(path, std::ios::trunc);
  if (out) out << text;
}

void WriteCompletionMessage(const std::string& path, const std::string& message,
                            nlohmann::json progress, std::optional<nlohmann::json> evaluation) {
  if (path.empty()) return;
  progress.erase("recoveries");
  nlohmann::json j = {{"reason", "Completed"}, {"retryable", false}, {"message", message}};
  if (!progress.empty()) j["progress"] = std::move(progress);
  if (evaluation) j["evaluation"] = std::move(*evaluation);
  std::string text = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  constexpr size_t kKubeletLimit = 4096;
  if (text.size() > kKubeletLimit) {  // never a truncated document: the figures go first
    j.erase("progress");
    text = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    if (text.size() > kKubeletLimit) return;
  }
  std::ofstream out(path, std::ios::trunc);
  if (out) out << text;
}

}  // namespace lockstep::trainer
