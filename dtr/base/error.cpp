#include "dtr/base/error.h"

#include <cstring>

namespace dtr::detail {

namespace {
const char* basename_of(const char* path) {
  const char* slash = std::strrchr(path, '/');
  return slash ? slash + 1 : path;
}
}  // namespace

void throw_error(const char* file, int line, const std::string& message) {
  throw Error(fmt::format("{} ({}:{})", message, basename_of(file), line));
}

void throw_internal_error(const char* file, int line, const char* condition,
                          const std::string& message) {
  throw Error(fmt::format("internal error in dtr (a bug, please report it): {} failed{}{} ({}:{})",
                          condition, message.empty() ? "" : ": ", message, basename_of(file),
                          line));
}

}  // namespace dtr::detail
