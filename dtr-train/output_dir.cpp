#include "output_dir.h"

#include <fmt/chrono.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace dtr::train {

namespace fs = std::filesystem;

namespace {

std::string host_name() {
  char name[256] = {};
  return gethostname(name, sizeof name - 1) == 0 ? std::string(name) : std::string("?");
}

}  // namespace

OutputDirLock::OutputDirLock(const fs::path& dir) {
  fs::create_directories(dir);
  const fs::path path = dir / ".lock";
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw std::runtime_error(fmt::format("--out: cannot open {}: {}", path.string(), std::strerror(errno)));
  struct flock whole {};
  whole.l_type = F_WRLCK;
  whole.l_whence = SEEK_SET;
  if (fcntl(fd_, F_SETLK, &whole) != 0) {
    const int error = errno;
    char holder[512] = {};
    const ssize_t n = pread(fd_, holder, sizeof holder - 1, 0);
    ::close(fd_);
    fd_ = -1;
    if (error == EACCES || error == EAGAIN) {
      throw std::runtime_error(fmt::format("--out {} is in use by another dtr-train job ({}); give this run its own --out",
                                           dir.string(), n > 0 ? std::string(holder, static_cast<size_t>(n)) : "?"));
    }
    throw std::runtime_error(fmt::format("--out: cannot lock {}: {}", path.string(), std::strerror(error)));
  }
  const auto now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  const std::string me = fmt::format("pid {} on host {}, since {:%Y-%m-%d %H:%M:%S}", getpid(), host_name(),
                                     fmt::localtime(now));
  if (ftruncate(fd_, 0) != 0 || pwrite(fd_, me.data(), me.size(), 0) != static_cast<ssize_t>(me.size())) {
    throw std::runtime_error(fmt::format("--out: cannot write {}: {}", path.string(), std::strerror(errno)));
  }
}

OutputDirLock::~OutputDirLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock
}

void claim_checkpoints(const fs::path& dir, bool resuming, bool overwrite) {
  const fs::path checkpoints = dir / "checkpoints";
  if (resuming || !fs::is_directory(checkpoints)) return;
  std::vector<std::string> found;
  for (const auto& entry : fs::directory_iterator(checkpoints)) found.push_back(entry.path().filename().string());
  if (found.empty()) return;
  if (!overwrite) {
    std::sort(found.begin(), found.end());
    throw std::runtime_error(fmt::format(
        "--out {} holds checkpoints of an earlier run ({}); pass --resume {}/<step> to continue it, or --overwrite "
        "to start afresh (removing them)",
        dir.string(), fmt::join(found, ", "), checkpoints.string()));
  }
  fs::remove_all(checkpoints);
}

}  // namespace dtr::train
