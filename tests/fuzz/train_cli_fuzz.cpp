// Fuzz target: a dtr-train command line, the input's NUL-separated pieces as the
// arguments (at most 64), parsed for a world of 2 ranks.
#include "fuzz_target.h"

#include "cli.h"

#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> args{"dtr-train"};
  std::string piece;
  for (size_t i = 0; i < size && args.size() < 65; ++i) {
    if (data[i] == '\0') {
      args.push_back(piece);
      piece.clear();
    } else {
      piece.push_back(static_cast<char>(data[i]));
    }
  }
  if (!piece.empty() && args.size() < 65) args.push_back(piece);
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  dtr::fuzz::expect_clean_refusal(
      [&] { dtr::train::parse_cli(static_cast<int>(argv.size()), argv.data(), /*world_size=*/2); });
  return 0;
}
