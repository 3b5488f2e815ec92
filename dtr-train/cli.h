// The dtr-train command line (CLI11): parse_cli() turns argv into a TrainConfig
// and checks every value, so a bad flag ends the job before any collective.
//
// Each rank parses the same argv and reaches the same verdict. Bad input gives
// exit code 2 and ONE line naming the flag ("dtr-train: --global-batch 10 is not
// divisible by ranks (2) x --micro-batch (4)"); --help gives the usage and exit
// code 0. The caller prints `message` on rank 0 only.
#pragma once

#include "config.h"

#include <optional>
#include <string>

namespace dtr::train {

struct CliResult {
  std::optional<TrainConfig> config;  // set when training should run
  int exit_code = 0;                  // when config is empty: 0 (--help) or 2 (bad input)
  std::string message;                // the usage text, or the one-line error
};

CliResult parse_cli(int argc, const char* const* argv, int world_size);

}  // namespace dtr::train
