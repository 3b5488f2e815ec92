// KernelTable: where a GPU step's time goes, kernel by kernel, from CUPTI's
// activity records (no nsys or ncu needed). While a KernelTable lives, every
// kernel, memcpy and memset the process runs on a GPU is timed by the driver;
// table() groups the records by kernel name (demangled, template and argument
// lists cut) or by copy kind and lists the largest totals. For benchmarks only:
// CUPTI adds a little overhead to every launch, so time steps without it.
#pragma once

#include <string>

namespace dtr::bench {

class KernelTable {
 public:
  // Enables the activity records; throws dtr::Error (with CUPTI's message) when
  // CUPTI refuses, e.g. another profiler is attached. One at a time per process.
  KernelTable();
  ~KernelTable();
  KernelTable(const KernelTable&) = delete;
  KernelTable& operator=(const KernelTable&) = delete;

  // Drops what was recorded so far (flushing first).
  void reset();
  // The `rows` largest entries by total GPU time since the last reset(), each per
  // step (the totals divided by `steps`): count, ms, mean us and share of the sum.
  std::string table(int rows, int steps);
};

}  // namespace dtr::bench
