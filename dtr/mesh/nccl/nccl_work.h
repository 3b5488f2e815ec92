// NcclWork: the Work of NCCL collectives, backed by a CUDA event recorded on the
// group's stream after them (NcclCompletion).
//
// - wait() does not block the host: it makes the caller's current stream wait
//   on the event, so work issued there afterwards sees the results. A Work made
//   with `blocking_wait` (barrier) instead blocks the host until the event
//   completes, as a barrier is expected to.
// - wait(timeout) polls the event on the host until it completes or the deadline
//   passes, then also orders the caller's current stream after it.
// - is_completed() queries the event and the communicator's asynchronous error;
//   an NCCL error becomes the Work's error (and aborts the communicator).
//
// Collectives issued while coalescing share one NcclCompletion, recorded at
// end_coalescing() after ncclGroupEnd (which is when NCCL launches them); until
// then they are not complete, and waiting on them is an error.
//
// The Work keeps its tensors alive until it is destroyed (their memory is also
// recorded on the group's stream with the caching allocator).
// Internal to the NCCL backend.
#pragma once

#include "dtr/mesh/nccl/nccl_communicator.h"
#include "dtr/mesh/work.h"
#include "dtr/tensor/cuda/cuda_runtime.h"
#include "dtr/tensor/tensor.h"

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

namespace dtr::mesh::nccl {

// The CUDA event that marks the end of one or more NCCL operations on a stream.
class NcclCompletion {
 public:
  explicit NcclCompletion(int device);  // creates the event on `device`

  int device() const { return device_; }
  // Records the event on `stream` (after the operations were enqueued/launched).
  void record(cudaStream_t stream);
  bool recorded() const { return recorded_.load(std::memory_order_acquire); }
  bool query() const { return event_->query(); }
  void make_wait(cudaStream_t stream) const { event_->wait(stream); }

 private:
  int device_;
  std::unique_ptr<cuda::Event> event_;
  std::atomic<bool> recorded_{false};
};

class NcclWork final : public Work {
 public:
  NcclWork(std::string description, std::shared_ptr<NcclCommunicator> comm,
           std::shared_ptr<NcclCompletion> completion, std::vector<Tensor> tensors, bool blocking_wait = false);

  bool is_completed() override;

 protected:
  bool wait_until(std::optional<Clock::time_point> deadline) override;
  void synchronize_after_wait() override;
  std::exception_ptr error() const override;

 private:
  void fail(std::exception_ptr error);

  std::shared_ptr<NcclCommunicator> comm_;
  std::shared_ptr<NcclCompletion> completion_;
  std::vector<Tensor> tensors_;  // what the collective reads and writes
  bool blocking_wait_;
  std::atomic<bool> done_{false};
  mutable std::mutex mutex_;  // guards error_
  std::exception_ptr error_;
};

}  // namespace dtr::mesh::nccl
