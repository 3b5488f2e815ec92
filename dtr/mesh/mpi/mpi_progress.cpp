#include "dtr/mesh/mpi/mpi_progress.h"

#include "dtr/base/error.h"
#include "dtr/base/log.h"
#include "dtr/mesh/mpi/mpi_types.h"

#include <algorithm>
#include <cstdlib>
#include <string>

namespace dtr::mesh::mpi {

MpiWork::MpiWork(std::string description, std::function<void()> finish,
                 std::vector<std::shared_ptr<void>> keep_alive)
    : Work(std::move(description)), finish_(std::move(finish)), keep_alive_(std::move(keep_alive)) {}

void MpiWork::complete() {
  try {
    if (finish_) finish_();
  } catch (...) {
    error_ = std::current_exception();
  }
  finish_ = nullptr;
  keep_alive_.clear();
  {
    std::lock_guard lock(done_mutex_);
    state_.store(done, std::memory_order_release);
  }
  done_cv_.notify_all();
}

bool MpiWork::is_completed() {
  if (state_.load(std::memory_order_acquire) == done) return true;
  if (state_.load(std::memory_order_acquire) == pending && ProgressEngine::instance().test_and_claim(*this)) {
    complete();
  }
  return state_.load(std::memory_order_acquire) == done;
}

bool MpiWork::wait_until(std::optional<Clock::time_point> deadline) {
  auto& engine = ProgressEngine::instance();
  engine.waiters_.fetch_add(1);
  struct Leave {
    ProgressEngine& engine;
    ~Leave() {
      // The progress thread sleeps while anyone waits; the last waiter wakes it.
      // Taking the lock orders the decrement against its predicate check.
      if (engine.waiters_.fetch_sub(1) == 1) {
        bool any_pending = false;
        {
          std::lock_guard lock(engine.mpi_mutex_);
          any_pending = !engine.pending_.empty();
        }
        if (any_pending) engine.has_pending_.notify_one();
      }
    }
  } leave{engine};
  // Test our own request in a loop, as MPI_Wait would: every test advances all of
  // MPI, so completion is noticed without a hand-off from the progress thread.
  while (state_.load(std::memory_order_acquire) == pending) {
    if (engine.test_and_claim(*this)) {
      complete();
      return true;
    }
    if (deadline && Clock::now() >= *deadline) return false;
    std::this_thread::yield();
  }
  // Claimed by the progress thread: wait for it to finish.
  std::unique_lock lock(done_mutex_);
  auto is_done = [&] { return state_.load(std::memory_order_acquire) == done; };
  if (deadline) return done_cv_.wait_until(lock, *deadline, is_done);
  done_cv_.wait(lock, is_done);
  return true;
}

std::exception_ptr MpiWork::error() const { return error_; }

ProgressEngine& ProgressEngine::instance() {
  static ProgressEngine* engine = new ProgressEngine();  // outlives statics that may hold Work
  return *engine;
}

void ProgressEngine::start(int thread_level) {
  if (const char* v = std::getenv("DTR_MPI_PROGRESS_INTERVAL_US")) {
    int us = std::atoi(v);
    if (us >= 0) interval_us_ = us;
  }
  if (thread_level < MPI_THREAD_SERIALIZED) {
    DTR_LOG_WARN(
        "MPI provides thread level {} (< MPI_THREAD_SERIALIZED): no progress thread; non-blocking "
        "collectives advance only while tested or waited on",
        thread_level);
    return;
  }
  std::lock_guard lock(mpi_mutex_);
  if (thread_.joinable()) return;
  stopping_ = false;
  thread_ = std::thread([this] { run(); });
}

void ProgressEngine::stop() {
  {
    std::lock_guard lock(mpi_mutex_);
    if (!thread_.joinable()) return;
    stopping_ = true;
  }
  has_pending_.notify_all();
  thread_.join();
}

size_t ProgressEngine::pending_count() {
  std::lock_guard lock(mpi_mutex_);
  return pending_.size();
}

void ProgressEngine::submit(const std::shared_ptr<MpiWork>& work,
                            const std::function<void(std::vector<MPI_Request>&)>& issue) {
  bool nothing_to_wait_for = false;
  {
    std::lock_guard lock(mpi_mutex_);
    std::vector<MPI_Request> requests;
    try {
      issue(requests);
    } catch (...) {
      // Requests already started cannot be cancelled portably; wait them out so
      // their buffers stay valid, then report the error.
      if (!requests.empty()) MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE);
      throw;
    }
    work->requests_ = std::move(requests);
    nothing_to_wait_for = work->requests_.empty();
    if (!nothing_to_wait_for) pending_.push_back(work);
  }
  if (nothing_to_wait_for) {
    work->state_.store(MpiWork::claimed);
    work->complete();
  } else {
    has_pending_.notify_one();
  }
}

bool ProgressEngine::test_and_claim(MpiWork& work) {
  std::lock_guard lock(mpi_mutex_);
  if (work.state_.load(std::memory_order_acquire) != MpiWork::pending) return false;
  int flag = 0;
  DTR_MPI_CHECK(MPI_Testall(static_cast<int>(work.requests_.size()), work.requests_.data(), &flag,
                            MPI_STATUSES_IGNORE));
  if (!flag) return false;
  work.state_.store(MpiWork::claimed, std::memory_order_release);
  pending_.erase(std::remove_if(pending_.begin(), pending_.end(), [&](auto& w) { return w.get() == &work; }),
                 pending_.end());
  return true;
}

void ProgressEngine::run() {
  std::vector<std::shared_ptr<MpiWork>> finished;
  std::unique_lock lock(mpi_mutex_);
  while (true) {
    // Sleep while nothing is pending, and also while a thread inside wait() is
    // testing (its tests advance all of MPI): polling then only takes the lock and
    // CPU time from that thread, and with interval 0 spins against it. The last
    // waiter to leave wakes this thread when work is still pending.
    has_pending_.wait(lock, [&] { return stopping_ || (!pending_.empty() && waiters_.load() == 0); });
    if (stopping_) break;
    for (auto& work : pending_) {
      int flag = 0;
      if (MPI_Testall(static_cast<int>(work->requests_.size()), work->requests_.data(), &flag,
                      MPI_STATUSES_IGNORE) != MPI_SUCCESS) {
        flag = 0;  // the waiter's own test reports the error
      }
      if (flag) {
        work->state_.store(MpiWork::claimed, std::memory_order_release);
        finished.push_back(work);
      }
    }
    if (!finished.empty()) {
      pending_.erase(std::remove_if(pending_.begin(), pending_.end(),
                                    [](auto& w) { return w->state_.load() != MpiWork::pending; }),
                     pending_.end());
    }
    lock.unlock();
    for (auto& work : finished) work->complete();
    finished.clear();
    if (interval_us_ > 0) {
      std::this_thread::sleep_for(std::chrono::microseconds(interval_us_));
    } else {
      std::this_thread::yield();
    }
    lock.lock();
  }
}

}  // namespace dtr::mesh::mpi
