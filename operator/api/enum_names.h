#pragma once
// One table per enum maps values to their API spelling; NameOf/ParseEnum/EnumNames read it, so
// an enum's JSON form, its validation message and its CRD enum list all come from one place.

#include <optional>
#include <span>
#include <string_view>
#include <vector>

namespace lockstep::api {

template <typename E>
struct EnumName {
  E value;
  std::string_view name;
};

template <typename E>
std::string_view NameOf(std::span<const EnumName<E>> table, E value) {
  for (const auto& entry : table) {
    if (entry.value == value) return entry.name;
  }
  return "<unknown>";
}

template <typename E>
std::optional<E> ParseEnum(std::span<const EnumName<E>> table, std::string_view name) {
  for (const auto& entry : table) {
    if (entry.name == name) return entry.value;
  }
  return std::nullopt;
}

template <typename E>
std::vector<std::string_view> EnumNames(std::span<const EnumName<E>> table) {
  std::vector<std::string_view> names;
  names.reserve(table.size());
  for (const auto& entry : table) names.push_back(entry.name);
  return names;
}

}  // namespace lockstep::api
