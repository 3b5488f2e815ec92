// The names of the values of dtr-train's enum options: the text a flag accepts
// and the text config.json, metrics.jsonl and checkpoints record. Each enum
// specialises EnumNames beside its declaration; to_string, parse_enum and
// names_list work from that one table.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace dtr::train {

// Specialised for each named enum E as
//   static constexpr std::array<std::string_view, N> names = {...};
// where names[i] is the name of the value static_cast<E>(i) (the values are 0 .. N - 1).
template <class E>
struct EnumNames;

template <class E>
concept NamedEnum = requires { EnumNames<E>::names; };

template <NamedEnum E>
std::string to_string(E value) {
  return std::string(EnumNames<E>::names[static_cast<std::size_t>(value)]);
}

// The value called `name`, or none.
template <NamedEnum E>
std::optional<E> parse_enum(std::string_view name) {
  const auto& names = EnumNames<E>::names;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (names[i] == name) return static_cast<E>(i);
  }
  return std::nullopt;
}

// The names as a message lists them: "a or b", "a, b or c".
template <NamedEnum E>
std::string names_list() {
  const auto& names = EnumNames<E>::names;
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += i + 1 == names.size() ? " or " : ", ";
    out += names[i];
  }
  return out;
}

}  // namespace dtr::train
