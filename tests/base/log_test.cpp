// Log lines carry the rank once it is set ("-" before distributed init).
#include "dtr/base/log.h"

#include <catch2/catch.hpp>
#include <spdlog/sinks/ostream_sink.h>

#include <sstream>

TEST_CASE("every log line names the rank", "[log]") {
  std::ostringstream captured;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(captured);
  spdlog::logger& log = dtr::logger();
  auto saved_sinks = log.sinks();
  log.sinks() = {sink};
  dtr::set_log_rank(-1);
  DTR_LOG_WARN("before init");
  dtr::set_log_rank(3);
  DTR_LOG_WARN("after init {}", 42);
  log.flush();
  log.sinks() = saved_sinks;
  dtr::set_log_rank(-1);
  const std::string text = captured.str();
  CHECK(text.find("[dtr rank -] [warning] before init") != std::string::npos);
  CHECK(text.find("[dtr rank 3] [warning] after init 42") != std::string::npos);
}
