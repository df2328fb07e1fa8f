#pragma once
// String building for messages. Debian's Abseil has its own string_view, so absl::StrCat does
// not take std::string_view; these take anything {fmt} can format (numbers print in their
// shortest round-trip form).

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <iterator>
#include <string>
#include <string_view>

#include "absl/strings/string_view.h"

// Debian's absl::string_view is a distinct type; format it as a std::string_view.
template <>
struct fmt::formatter<absl::string_view> : fmt::formatter<std::string_view> {
  template <typename Context>
  auto format(absl::string_view s, Context& ctx) const {
    return fmt::formatter<std::string_view>::format(std::string_view(s.data(), s.size()), ctx);
  }
};

namespace lockstep {

template <typename... Args>
std::string StrCat(const Args&... args) {
  std::string out;
  (fmt::format_to(std::back_inserter(out), "{}", args), ...);
  return out;
}

template <typename Range>
std::string StrJoin(const Range& parts, std::string_view separator) {
  return fmt::format("{}", fmt::join(parts, separator));
}

}  // namespace lockstep
