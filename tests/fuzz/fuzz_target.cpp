#include "fuzz_target.h"

#include <fstream>
#include <stdexcept>
#include <system_error>

#include <unistd.h>

namespace dtr::fuzz {

ScratchFile::ScratchFile(const std::string& name)
    : dir_(std::filesystem::temp_directory_path() / ("dtr_fuzz_" + std::to_string(::getpid()))),
      path_(dir_ / name) {
  std::filesystem::create_directories(dir_);
}

ScratchFile::~ScratchFile() {
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
}

void ScratchFile::write(const uint8_t* data, size_t size) const {
  std::ofstream out(path_, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  if (!out) throw std::runtime_error("fuzz: cannot write the scratch file " + path_.string());
}

}  // namespace dtr::fuzz
