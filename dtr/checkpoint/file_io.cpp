#include "dtr/checkpoint/file_io.h"

#include "dtr/base/error.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace dtr::checkpoint {

namespace fs = std::filesystem;

namespace {
std::string errno_text() { return std::strerror(errno); }
}  // namespace

FileWriter::FileWriter(fs::path path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  DTR_CHECK(fd_ >= 0, "checkpoint: cannot create {}: {}", path_.string(), errno_text());
}

FileWriter::~FileWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void FileWriter::write(const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = ::write(fd_, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    DTR_CHECK(n > 0, "checkpoint: writing {} at byte {} failed: {}", path_.string(), position_, errno_text());
    p += n;
    bytes -= static_cast<size_t>(n);
    position_ += n;
  }
}

void FileWriter::sync_and_close() {
  DTR_CHECK(::fsync(fd_) == 0, "checkpoint: fsync of {} failed: {}", path_.string(), errno_text());
  int fd = fd_;
  fd_ = -1;
  DTR_CHECK(::close(fd) == 0, "checkpoint: closing {} failed: {}", path_.string(), errno_text());
}

FileReader::FileReader(fs::path path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  DTR_CHECK(fd_ >= 0, "file {} cannot be opened: {}", path_.string(), errno_text());
}

FileReader::~FileReader() {
  if (fd_ >= 0) ::close(fd_);
}

int64_t FileReader::size() const {
  struct stat st {};
  DTR_CHECK(::fstat(fd_, &st) == 0, "file {}: fstat failed: {}", path_.string(), errno_text());
  return st.st_size;
}

void FileReader::read_at(void* out, size_t bytes, int64_t offset) const {
  char* p = static_cast<char*>(out);
  while (bytes > 0) {
    ssize_t n = ::pread(fd_, p, bytes, offset);
    if (n < 0 && errno == EINTR) continue;
    DTR_CHECK(n >= 0, "file {}: read at byte {} failed: {}", path_.string(), offset, errno_text());
    DTR_CHECK(n > 0, "file {} ends at byte {}, before the {} more bytes expected there (truncated?)",
              path_.string(), offset, bytes);
    p += n;
    bytes -= static_cast<size_t>(n);
    offset += n;
  }
}

void fsync_directory(const fs::path& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DTR_CHECK(fd >= 0, "checkpoint: cannot open directory {}: {}", dir.string(), errno_text());
  int rc = ::fsync(fd);
  int saved = errno;
  ::close(fd);
  errno = saved;
  DTR_CHECK(rc == 0, "checkpoint: fsync of directory {} failed: {}", dir.string(), errno_text());
}

void commit_directory(const fs::path& from, const fs::path& to) {
  if (fs::exists(to)) {
    DTR_CHECK(::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_EXCHANGE) == 0,
              "checkpoint: exchanging {} with {} failed: {}", from.string(), to.string(), errno_text());
    fs::remove_all(from);
  } else {
    DTR_CHECK(::rename(from.c_str(), to.c_str()) == 0, "checkpoint: renaming {} to {} failed: {}", from.string(),
              to.string(), errno_text());
  }
  fsync_directory(fs::absolute(to).parent_path());
}

}  // namespace dtr::checkpoint
