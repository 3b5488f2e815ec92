// Plain POSIX file I/O for checkpoints, with errors that name the file: whole
// writes, positioned reads (pread), fsync of files and directories, and the
// atomic swap of a finished checkpoint directory into place.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

namespace dtr::checkpoint {

// A file opened for writing (created or truncated); close() fsyncs it first.
class FileWriter {
 public:
  explicit FileWriter(std::filesystem::path path);
  ~FileWriter();
  FileWriter(const FileWriter&) = delete;
  FileWriter& operator=(const FileWriter&) = delete;

  void write(const void* data, size_t bytes);
  int64_t position() const { return position_; }
  void sync_and_close();

 private:
  std::filesystem::path path_;
  int fd_ = -1;
  int64_t position_ = 0;
};

// A file opened for reading; errors name the file.
class FileReader {
 public:
  explicit FileReader(std::filesystem::path path);  // error when missing
  ~FileReader();
  FileReader(const FileReader&) = delete;
  FileReader& operator=(const FileReader&) = delete;

  int64_t size() const;
  // Reads exactly `bytes` at `offset`; error when the file ends first.
  void read_at(void* out, size_t bytes, int64_t offset) const;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  int fd_ = -1;
};

void fsync_directory(const std::filesystem::path& dir);

// Makes `from` (a finished checkpoint directory) appear at `to` in one rename:
// when `to` exists the two are exchanged atomically (renameat2 RENAME_EXCHANGE)
// and the old checkpoint, now at `from`, is removed; otherwise a plain rename.
// The parent directory is fsynced.
void commit_directory(const std::filesystem::path& from, const std::filesystem::path& to);

}  // namespace dtr::checkpoint
