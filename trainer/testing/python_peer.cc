#include "trainer/testing/python_peer.h"

#include <sys/wait.h>

#include <cstdio>

namespace lockstep::trainer::testing {
namespace {

std::string Quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

}  // namespace

absl::StatusOr<nlohmann::json> RunPythonPeer(const std::string& script,
                                             const std::vector<std::string>& args) {
  const std::string python = "/usr/bin/python3";
  if (std::FILE* f = std::fopen(python.c_str(), "r"); f == nullptr) {
    return absl::UnavailableError("no " + python);
  } else {
    std::fclose(f);
  }
  std::string cmd = python + " " + Quoted(std::string(LOCKSTEP_SOURCE_DIR) + "/" + script);
  for (const std::string& a : args) cmd += " " + Quoted(a);
  cmd += " 2>&1";
  std::FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return absl::UnavailableError("cannot run " + cmd);
  std::string out;
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (code == 77) return absl::UnavailableError(script + ": " + out);
  if (code != 0) return absl::InternalError(cmd + " exited " + std::to_string(code) + ": " + out);
  nlohmann::json j = nlohmann::json::parse(out, nullptr, false);
  if (j.is_discarded()) return absl::InternalError(cmd + " printed no JSON: " + out.substr(0, 500));
  return j;
}

}  // namespace lockstep::trainer::testing
