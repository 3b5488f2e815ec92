// Replays inputs through a fuzz target without libFuzzer: every file named, and
// every file in every directory named, once each. Exit 0 when all ran (a finding
// crashes or aborts); a named path that does not exist is an error.
#include "fuzz_target.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

namespace fs = std::filesystem;

namespace {

void run_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
}

}  // namespace

int main(int argc, char** argv) {
  int64_t inputs = 0;
  for (int i = 1; i < argc; ++i) {
    const fs::path path(argv[i]);
    if (!fs::exists(path)) {
      std::fprintf(stderr, "replay: %s does not exist\n", argv[i]);
      return 2;
    }
    std::vector<fs::path> files;
    if (fs::is_directory(path)) {
      for (const auto& entry : fs::recursive_directory_iterator(path)) {
        if (entry.is_regular_file()) files.push_back(entry.path());
      }
      std::sort(files.begin(), files.end());
    } else {
      files.push_back(path);
    }
    for (const auto& file : files) {
      run_file(file);
      ++inputs;
    }
  }
  std::printf("replayed %lld inputs\n", static_cast<long long>(inputs));
  return inputs > 0 ? 0 : 2;  // an empty corpus would test nothing
}
