// Errors: dtr::Error and the checking macros every layer uses.
//
// DTR_CHECK(cond, fmt, args...) validates user input: when cond is false it throws
// dtr::Error whose message carries file:line and a message that says what was
// expected and what was found, e.g.
//   DTR_CHECK(a.size(1) == b.size(0), "matmul: inner dims differ: a is {}, b is {}", ...)
// DTR_INTERNAL_ASSERT(cond, ...) states an invariant of dtr itself; a failure is a bug
// in dtr, not in the caller, and the message says so.
// This header depends on nothing else in dtr, so kernels/ may use it too.
#pragma once

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <stdexcept>
#include <string>

namespace dtr {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {
[[noreturn]] void throw_error(const char* file, int line, const std::string& message);
[[noreturn]] void throw_internal_error(const char* file, int line, const char* condition,
                                       const std::string& message);
}  // namespace detail

}  // namespace dtr

#define DTR_CHECK(cond, ...)                                                     \
  do {                                                                           \
    if (!(cond)) [[unlikely]] {                                                  \
      ::dtr::detail::throw_error(__FILE__, __LINE__, ::fmt::format(__VA_ARGS__)); \
    }                                                                            \
  } while (0)

#define DTR_FAIL(...) ::dtr::detail::throw_error(__FILE__, __LINE__, ::fmt::format(__VA_ARGS__))

#define DTR_INTERNAL_ASSERT(cond, ...)                                             \
  do {                                                                             \
    if (!(cond)) [[unlikely]] {                                                    \
      ::dtr::detail::throw_internal_error(__FILE__, __LINE__, #cond,               \
                                          ::fmt::format("" __VA_ARGS__));          \
    }                                                                              \
  } while (0)
