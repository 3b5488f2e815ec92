#include "dtr/mesh/work.h"

#include "dtr/base/error.h"
#include "dtr/tensor/profiler.h"

#include <algorithm>

namespace dtr::mesh {

Work::Work(std::string description) : description_(std::move(description)), start_(Clock::now()) {}

Work::~Work() = default;

void Work::wait() {
  const int64_t t0 = profile_name_ != nullptr ? profiler::now_ns() : 0;
  wait_until(std::nullopt);
  if (profile_name_ != nullptr) record_wait(t0);
  if (auto e = error()) std::rethrow_exception(e);
  synchronize_after_wait();
}

void Work::wait(std::chrono::milliseconds timeout) {
  const int64_t t0 = profile_name_ != nullptr ? profiler::now_ns() : 0;
  const bool done = wait_until(Clock::now() + timeout);
  if (profile_name_ != nullptr && done) record_wait(t0);
  if (!done) {
    DTR_FAIL("{} did not complete within {} ms", description_, timeout.count());
  }
  if (auto e = error()) std::rethrow_exception(e);
  synchronize_after_wait();
}

void Work::record_wait(int64_t wait_start_ns) {
  const int64_t end = profiler::now_ns();
  profiler::Args args;
  args.names[0] = "bytes";
  args.values[0] = profile_bytes_;
  args.names[1] = "seq";
  args.values[1] = profile_seq_;
  args.str_name = "group";
  args.str_value = profile_group_;
  profiler::record("comm_wait", profile_name_, wait_start_ns, end, args);
  const int64_t issued = std::chrono::duration_cast<std::chrono::nanoseconds>(start_.time_since_epoch()).count();
  profiler::record_async("comm_inflight", profile_name_, issued, end, args);
  profile_name_ = nullptr;
}

namespace detail {

class WorkList final : public Work {
 public:
  WorkList(std::vector<WorkPtr> parts, std::string description)
      : Work(std::move(description)), parts_(std::move(parts)) {}

  bool is_completed() override {
    return std::all_of(parts_.begin(), parts_.end(), [](const WorkPtr& w) { return w->is_completed(); });
  }

 protected:
  bool wait_until(std::optional<Clock::time_point> deadline) override {
    for (auto& part : parts_) {
      if (!part->wait_until(deadline)) return false;
    }
    return true;
  }
  void synchronize_after_wait() override {
    for (auto& part : parts_) part->synchronize_after_wait();
  }
  std::exception_ptr error() const override {
    for (auto& part : parts_) {
      if (auto e = part->error()) return e;
    }
    return nullptr;
  }

 private:
  std::vector<WorkPtr> parts_;
};

}  // namespace detail

namespace {

class CompletedWork final : public Work {
 public:
  using Work::Work;
  bool is_completed() override { return true; }

 protected:
  bool wait_until(std::optional<Clock::time_point>) override { return true; }
  std::exception_ptr error() const override { return nullptr; }
};

}  // namespace

WorkPtr make_work_list(std::vector<WorkPtr> parts, std::string description) {
  return std::make_shared<detail::WorkList>(std::move(parts), std::move(description));
}

WorkPtr make_completed_work(std::string description) {
  return std::make_shared<CompletedWork>(std::move(description));
}

}  // namespace dtr::mesh
