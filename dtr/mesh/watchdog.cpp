#include "dtr/mesh/watchdog.h"

#include "dtr/base/error.h"
#include "dtr/base/log.h"

#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace dtr::mesh {

namespace {

using Clock = Work::Clock;

std::chrono::milliseconds timeout_from_environment() {
  constexpr std::chrono::milliseconds kDefault{600'000};
  const char* value = std::getenv("DTR_COLLECTIVE_TIMEOUT");
  if (value == nullptr || *value == '\0') return kDefault;
  char* end = nullptr;
  double seconds = std::strtod(value, &end);
  if (end == value || *end != '\0' || !(seconds > 0)) {
    DTR_LOG_WARN("DTR_COLLECTIVE_TIMEOUT='{}' is not a positive number of seconds; using {} s", value,
                 kDefault.count() / 1000);
    return kDefault;
  }
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000.0));
}

struct Watched {
  std::weak_ptr<Work> work;
  Clock::time_point deadline;
};

class Watchdog {
 public:
  static Watchdog& instance() {
    static Watchdog* dog = new Watchdog();  // never destroyed: its thread may outlive statics
    return *dog;
  }

  std::chrono::milliseconds timeout() {
    std::lock_guard lock(mutex_);
    if (!timeout_) timeout_ = timeout_from_environment();
    return *timeout_;
  }
  void set_timeout(std::chrono::milliseconds t) {
    DTR_CHECK(t.count() > 0, "set_collective_timeout: expected a positive timeout, got {} ms", t.count());
    std::lock_guard lock(mutex_);
    timeout_ = t;
  }
  void set_handler(std::function<void()> handler) {
    std::lock_guard lock(mutex_);
    handler_ = std::move(handler);
  }
  void set_diagnosis(std::function<std::string()> diagnosis) {
    std::lock_guard lock(mutex_);
    diagnosis_ = std::move(diagnosis);
  }

  void watch(const WorkPtr& work) {
    auto deadline = work->start_time() + timeout();
    std::lock_guard lock(mutex_);
    watched_.push_back({work, deadline});
    if (!thread_.joinable()) {
      stopping_ = false;
      thread_ = std::thread([this] { run(); });
    }
  }

  [[noreturn]] void end(const std::string& message) {
    DTR_LOG_ERROR("{}", message);
    logger().flush();
    std::fflush(stderr);
    std::function<void()> handler;
    {
      std::lock_guard lock(mutex_);
      handler = handler_;
    }
    if (handler) handler();
    std::_Exit(1);
  }

  void stop() {
    {
      std::lock_guard lock(mutex_);
      if (!thread_.joinable()) return;
      stopping_ = true;
    }
    wake_.notify_all();
    thread_.join();
    std::lock_guard lock(mutex_);
    watched_.clear();
  }

 private:
  void run() {
    std::unique_lock lock(mutex_);
    while (!stopping_) {
      auto period = std::min<std::chrono::milliseconds>(std::chrono::milliseconds(200), *timeout_ / 4);
      wake_.wait_for(lock, std::max(period, std::chrono::milliseconds(10)));
      if (stopping_) break;
      std::vector<Watched> current;
      current.swap(watched_);
      lock.unlock();
      std::vector<Watched> still_pending;
      const auto now = Clock::now();
      for (auto& entry : current) {
        WorkPtr work = entry.work.lock();
        if (!work || work->is_completed()) continue;
        if (now >= entry.deadline) fail(*work, now);
        still_pending.push_back(std::move(entry));
      }
      lock.lock();
      watched_.insert(watched_.end(), still_pending.begin(), still_pending.end());
    }
  }

  [[noreturn]] void fail(const Work& work, Clock::time_point now) {
    auto waited = std::chrono::duration<double>(now - work.start_time()).count();
    std::string message = fmt::format(
        "collective timed out: {} still pending after {:.1f} s (DTR_COLLECTIVE_TIMEOUT={:.1f} s); "
        "a rank that died, hangs, is unreachable or issued different collectives on this group",
        work.description(), waited, std::chrono::duration<double>(*timeout_).count());
    std::function<std::string()> diagnosis;
    {
      std::lock_guard lock(mutex_);
      diagnosis = diagnosis_;
    }
    if (diagnosis) {
      try {
        const std::string found = diagnosis();
        if (!found.empty()) message += "; " + found;
      } catch (const std::exception& e) {
        message += fmt::format("; (no reachability check: {})", e.what());
      }
    }
    end(message + "; ending the process");
  }


  std::mutex mutex_;
  std::condition_variable wake_;
  std::optional<std::chrono::milliseconds> timeout_;
  std::function<void()> handler_;
  std::function<std::string()> diagnosis_;
  std::vector<Watched> watched_;
  std::thread thread_;
  bool stopping_ = false;
};

}  // namespace

std::chrono::milliseconds collective_timeout() { return Watchdog::instance().timeout(); }
void set_collective_timeout(std::chrono::milliseconds timeout) { Watchdog::instance().set_timeout(timeout); }
void watch(const WorkPtr& work) { Watchdog::instance().watch(work); }
void set_timeout_handler(std::function<void()> handler) { Watchdog::instance().set_handler(std::move(handler)); }
void set_timeout_diagnosis(std::function<std::string()> diagnosis) {
  Watchdog::instance().set_diagnosis(std::move(diagnosis));
}
void stop_watchdog() { Watchdog::instance().stop(); }
void end_on_timeout(const std::string& message) { Watchdog::instance().end(message); }

}  // namespace dtr::mesh
