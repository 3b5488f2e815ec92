// dtr-train's command line parsed as the program would parse it, for the unit tests.
#pragma once

#include "cli.h"

#include <string>
#include <vector>

namespace dtr::train::testing {

// parse_cli on `args` (without the program name) at world size `world`.
inline CliResult parse_args(std::vector<std::string> args, int world = 2) {
  args.insert(args.begin(), "dtr-train");
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  return parse_cli(static_cast<int>(argv.size()), argv.data(), world);
}

}  // namespace dtr::train::testing
