// dtr-train's output directory (--out): one job at a time, and a new run never
// silently replaces an earlier run's checkpoints.
//   - OutputDirLock: rank 0 holds an fcntl lock on <out>/.lock for the whole run; a
//     second job with the same --out fails at its start, naming the holder's pid
//     and host (recorded in the file). The lock goes with the process, however it
//     ends.
//   - claim_checkpoints: a new run (no --resume) into an --out that holds
//     checkpoints is refused unless --overwrite, which removes them first.
#pragma once

#include <filesystem>

namespace dtr::train {

class OutputDirLock {
 public:
  // Creates `dir` if needed and locks it for this process, or throws naming the holder.
  explicit OutputDirLock(const std::filesystem::path& dir);
  ~OutputDirLock();
  OutputDirLock(const OutputDirLock&) = delete;
  OutputDirLock& operator=(const OutputDirLock&) = delete;

 private:
  int fd_ = -1;
};

void claim_checkpoints(const std::filesystem::path& dir, bool resuming, bool overwrite);

}  // namespace dtr::train
