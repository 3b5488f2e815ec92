// Logging through spdlog. Every line carries the process's rank once distributed
// init has called set_log_rank(); before that the rank shows as "-".
// The level comes from the DTR_LOG_LEVEL environment variable
// (trace, debug, info, warn, error, critical, off; default info).
#pragma once

#include <spdlog/spdlog.h>

namespace dtr {

// The project's logger (created on first use).
spdlog::logger& logger();

// Sets the rank shown in every log line; -1 shows "-".
void set_log_rank(int rank);

}  // namespace dtr

#define DTR_LOG_TRACE(...) ::dtr::logger().trace(__VA_ARGS__)
#define DTR_LOG_DEBUG(...) ::dtr::logger().debug(__VA_ARGS__)
#define DTR_LOG_INFO(...) ::dtr::logger().info(__VA_ARGS__)
#define DTR_LOG_WARN(...) ::dtr::logger().warn(__VA_ARGS__)
#define DTR_LOG_ERROR(...) ::dtr::logger().error(__VA_ARGS__)
