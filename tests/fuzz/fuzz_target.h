// What every fuzz target shares: the libFuzzer entry point it defines, and a
// scratch file for parsers that read from a path.
//
// A target feeds the bytes to one parser of outside input. A dtr::Error or other
// std::exception is the parser refusing bad input, which is right; a crash, a
// hang or a sanitizer report is a finding. The same target runs two ways: under
// libFuzzer (scripts/fuzz.sh, built with clang) and, in every build, as a replay
// of its seed corpus and of past findings (tests/fuzz/fixtures/<target>/), so a
// fixed finding stays a regression test.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace dtr::fuzz {

// A file of this process's own in the temp directory, rewritten by each input.
class ScratchFile {
 public:
  explicit ScratchFile(const std::string& name);
  ~ScratchFile();
  ScratchFile(const ScratchFile&) = delete;
  ScratchFile& operator=(const ScratchFile&) = delete;

  // Replaces the file's content with `size` bytes.
  void write(const uint8_t* data, size_t size) const;
  const std::filesystem::path& path() const { return path_; }
  const std::filesystem::path& dir() const { return dir_; }

 private:
  std::filesystem::path dir_;
  std::filesystem::path path_;
};

// Runs `parse`; a refusal (any std::exception) is an expected outcome.
template <class F>
void expect_clean_refusal(F&& parse) {
  try {
    parse();
  } catch (const std::exception&) {
  }
}

}  // namespace dtr::fuzz
