// The MPI progress engine: how non-blocking MPI collectives make progress while
// the caller computes.
//
// Open MPI's non-blocking collectives (libnbc) advance one round only when some
// thread enters the MPI library; a request that nobody tests sits still until
// wait(). So the engine runs one progress thread per process that tests the
// pending requests every few microseconds (DTR_MPI_PROGRESS_INTERVAL_US, default
// 20; 0 = yield between passes) while any are pending, and sleeps on a condition
// variable when none are or while a thread is inside wait() (that thread's tests
// advance MPI; the last waiter to leave wakes the progress thread).
//
// Thread level: every MPI call dtr makes, from any thread, goes through one mutex
// held here, so MPI_THREAD_SERIALIZED is enough for correctness. init() asks for
// MPI_THREAD_MULTIPLE anyway so that the watchdog may call MPI_Abort without the
// lock (a hung MPI call may hold it); with less than SERIALIZED there is no
// progress thread and requests advance only when tested or waited on.
//
// Why a progress thread rather than funnelling every MPI call through one
// communication thread: issuing on the caller's thread costs no hand-off, and a
// waiter tests its own request in a loop (as MPI_Wait would), so a blocking
// collective runs at raw-MPI speed; the thread only matters while the caller is
// busy computing, which is when overlap is wanted (bench/comm_bench shows it).
#pragma once

#include "dtr/mesh/work.h"

#include <mpi.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace dtr::mesh::mpi {

// The Work of one MPI operation: its requests, and what to do once they complete
// (divide for avg, copy a staging buffer back to the GPU, ...).
class MpiWork final : public Work {
 public:
  MpiWork(std::string description, std::function<void()> finish, std::vector<std::shared_ptr<void>> keep_alive);

  bool is_completed() override;

 protected:
  bool wait_until(std::optional<Clock::time_point> deadline) override;
  std::exception_ptr error() const override;

 private:
  friend class ProgressEngine;
  enum State : int { pending = 0, claimed = 1, done = 2 };

  // Runs `finish` (errors are kept for wait()) and marks the work done.
  void complete();

  std::vector<MPI_Request> requests_;  // guarded by the engine's MPI mutex
  std::function<void()> finish_;
  std::vector<std::shared_ptr<void>> keep_alive_;  // buffers MPI reads or writes
  std::atomic<int> state_{pending};
  std::exception_ptr error_;
  std::mutex done_mutex_;
  std::condition_variable done_cv_;
};

class ProgressEngine {
 public:
  static ProgressEngine& instance();

  // Called by distributed::init()/finalize().
  void start(int thread_level);
  void stop();
  bool has_progress_thread() const { return thread_.joinable(); }

  // Under the MPI lock: `issue` starts the work's requests (appending to the vector
  // it is given); the work then becomes pending. An exception from `issue` leaves
  // nothing pending. A work whose issue started no request completes at once.
  void submit(const std::shared_ptr<MpiWork>& work, const std::function<void(std::vector<MPI_Request>&)>& issue);

  // Runs a blocking MPI call under the MPI lock (communicator split, the desync
  // check's exchange, teardown).
  template <class Fn>
  decltype(auto) blocking(Fn&& fn) {
    std::lock_guard lock(mpi_mutex_);
    return fn();
  }

  // Number of pending MPI works (for finalize's warning).
  size_t pending_count();

 private:
  friend class MpiWork;
  ProgressEngine() = default;

  // Tests `work` under the lock; true when this call claimed it (the caller then completes it).
  bool test_and_claim(MpiWork& work);
  void run();

  std::mutex mpi_mutex_;  // serialises every MPI call; also guards pending_
  std::condition_variable has_pending_;
  std::vector<std::shared_ptr<MpiWork>> pending_;
  std::atomic<int> waiters_{0};
  std::thread thread_;
  bool stopping_ = false;
  int interval_us_ = 20;
};

}  // namespace dtr::mesh::mpi
