#include "dtr/mesh/nccl/nccl_work.h"

#include "dtr/base/error.h"

#include <thread>

namespace dtr::mesh::nccl {

NcclCompletion::NcclCompletion(int device) : device_(device) {
  cuda::DeviceGuard guard(device);  // an event belongs to the device current at its creation
  event_ = std::make_unique<cuda::Event>();
}

void NcclCompletion::record(cudaStream_t stream) {
  cuda::DeviceGuard guard(device_);
  event_->record(stream);
  recorded_.store(true, std::memory_order_release);
}

NcclWork::NcclWork(std::string description, std::shared_ptr<NcclCommunicator> comm,
                   std::shared_ptr<NcclCompletion> completion, std::vector<Tensor> tensors, bool blocking_wait)
    : Work(std::move(description)),
      comm_(std::move(comm)),
      completion_(std::move(completion)),
      tensors_(std::move(tensors)),
      blocking_wait_(blocking_wait) {}

void NcclWork::fail(std::exception_ptr error) {
  {
    std::lock_guard lock(mutex_);
    if (!error_) error_ = std::move(error);
  }
  done_.store(true, std::memory_order_release);
}

bool NcclWork::is_completed() {
  if (done_.load(std::memory_order_acquire)) return true;
  try {
    // Not recorded: issued while coalescing, and end_coalescing() has not launched it yet.
    if (completion_->recorded() && completion_->query()) {
      done_.store(true, std::memory_order_release);
      return true;
    }
    if (auto message = comm_->async_error()) DTR_FAIL("{} failed: {}", description(), *message);
  } catch (...) {
    fail(std::current_exception());
    return true;
  }
  return false;
}

bool NcclWork::wait_until(std::optional<Clock::time_point> deadline) {
  DTR_CHECK(completion_->recorded() || done_.load(std::memory_order_acquire),
            "{}: waited on before end_coalescing(); collectives issued while coalescing are launched by "
            "end_coalescing(), so wait on the Work it returns",
            description());
  if (!deadline && !blocking_wait_) {
    is_completed();  // picks up an error NCCL has already reported; never blocks
    return true;
  }
  while (!is_completed()) {
    if (deadline && Clock::now() >= *deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  return true;
}

void NcclWork::synchronize_after_wait() {
  cuda::DeviceGuard guard(completion_->device());
  completion_->make_wait(cuda::current_stream(completion_->device()));
}

std::exception_ptr NcclWork::error() const {
  std::lock_guard lock(mutex_);
  return error_;
}

}  // namespace dtr::mesh::nccl
