#include "dtr/base/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <cstdlib>
#include <string>

namespace dtr {

namespace {

std::string pattern_for(int rank) {
  std::string r = rank < 0 ? "-" : std::to_string(rank);
  return "[%H:%M:%S.%e] [dtr rank " + r + "] [%^%l%$] %v";
}

std::shared_ptr<spdlog::logger> make_logger() {
  auto log = spdlog::stderr_color_mt("dtr");
  log->set_pattern(pattern_for(-1));
  log->set_level(spdlog::level::info);
  if (const char* name = std::getenv("DTR_LOG_LEVEL")) {
    auto level = spdlog::level::from_str(name);
    // from_str maps unknown names to "off"; say so instead of silently going quiet.
    if (level == spdlog::level::off && std::string(name) != "off") {
      log->warn("DTR_LOG_LEVEL='{}' is not one of trace, debug, info, warn, error, critical, off; using info", name);
    } else {
      log->set_level(level);
    }
  }
  return log;
}

}  // namespace

spdlog::logger& logger() {
  static std::shared_ptr<spdlog::logger> log = make_logger();
  return *log;
}

void set_log_rank(int rank) { logger().set_pattern(pattern_for(rank)); }

}  // namespace dtr
