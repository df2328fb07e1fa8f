#pragma once
// JSON text parsed with the place of the first error: "line 12, column 5: syntax error while
// parsing object - unexpected end of input; expected '}'", as users need it to fix a file.
// Thread-safety: pure functions.

#include <algorithm>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace lockstep::common {

// `text` parsed; InvalidArgument "<what>: not JSON at line L, column C (reason)" otherwise.
inline absl::StatusOr<nlohmann::json> ParseJsonText(std::string_view text,
                                                    const std::string& what) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    // e.byte counts from 1 and points past the last byte read.
    const size_t at = std::min(e.byte == 0 ? size_t{0} : e.byte - 1, text.size());
    const std::string_view before = text.substr(0, at);
    const auto line = std::count(before.begin(), before.end(), '\n') + 1;
    const size_t start = before.rfind('\n');
    const size_t column = at - (start == std::string_view::npos ? 0 : start + 1) + 1;
    std::string reason = e.what();
    // nlohmann's message starts "[json.exception.parse_error.101] parse error at line 1,
    // column 2: "; keep what follows.
    if (const size_t colon = reason.find(": "); colon != std::string::npos) {
      reason = reason.substr(colon + 2);
    }
    return absl::InvalidArgumentError(what + ": not JSON at line " + std::to_string(line) +
                                      ", column " + std::to_string(column) + " (" + reason + ")");
  }
}

}  // namespace lockstep::common
