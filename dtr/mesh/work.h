// Work: the handle an asynchronous collective returns. The caller issues a
// collective, computes, then wait()s; the result tensors may be read only after
// wait() returns (on CUDA: work issued afterwards on the caller's current stream
// is ordered after the collective; the host does not block).
//
// wait(timeout) blocks the host for at most `timeout` and throws dtr::Error naming
// the group, op and sequence number when the collective has not completed by then.
// Independently of wait(), every collective is watched by the process-wide
// watchdog (dtr/mesh/watchdog.h), which ends the process when one is still pending
// after DTR_COLLECTIVE_TIMEOUT seconds.
//
// Profiling (dtr/tensor/profiler.h): when the profiler recorded a collective's
// issue, the first wait() of its Work records a "comm_wait" span (the time the
// caller blocked) and the collective's in-flight interval (from the Work's
// creation to the return of wait(), category "comm_inflight").
#pragma once

#include <chrono>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dtr::mesh {

namespace detail {
class WorkList;
}
class ProcessGroup;

class Work {
 public:
  using Clock = std::chrono::steady_clock;

  explicit Work(std::string description);
  virtual ~Work();
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;

  // True once the collective has finished (successfully or with an error). Never
  // blocks; it may drive the backend's progress.
  virtual bool is_completed() = 0;

  // Blocks until the collective completes; rethrows the collective's error.
  void wait();
  // As wait(), but gives up after `timeout` with a dtr::Error.
  void wait(std::chrono::milliseconds timeout);

  // "all_reduce #3 (sum, f32 [4, 8]) on group 'world' (mpi, 2 ranks)".
  const std::string& description() const { return description_; }
  Clock::time_point start_time() const { return start_; }

 protected:
  // Blocks until completion or `deadline`; returns false on reaching the deadline.
  virtual bool wait_until(std::optional<Clock::time_point> deadline) = 0;
  // Called once wait_until() succeeded: orders later work after the collective
  // (CUDA: makes the current stream wait on the collective's event). Default: nothing.
  virtual void synchronize_after_wait() {}
  // The collective's error, if it failed (set by the backend before completing).
  virtual std::exception_ptr error() const = 0;

 private:
  friend class detail::WorkList;  // waits on its parts through the hooks above
  friend class ProcessGroup;      // labels the Work for the profiler

  void record_wait(int64_t wait_start_ns);

  std::string description_;
  Clock::time_point start_;
  // Set by ProcessGroup when the profiler recorded the issue; cleared by the first wait().
  const char* profile_name_ = nullptr;   // "all_gather", ...
  const char* profile_group_ = nullptr;  // the group's name (interned)
  int64_t profile_bytes_ = 0, profile_seq_ = 0;
};

using WorkPtr = std::shared_ptr<Work>;

// A Work that completes when all of `parts` have; what coalesced collectives return.
WorkPtr make_work_list(std::vector<WorkPtr> parts, std::string description);
// A Work that is already complete (e.g. a collective on an empty group).
WorkPtr make_completed_work(std::string description);

}  // namespace dtr::mesh
