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

}  // namespace lockstep::trainer
