// NcclCommunicator: owns one ncclComm_t and its error state. Shared by the group
// that made it and by every Work issued on it (a Work may outlive its group), so
// the communicator is destroyed (ncclCommDestroy) when the last of them goes.
//
// Asynchronous errors: NCCL reports a failure inside a running collective (a
// peer died, a network error) only through ncclCommGetAsyncError; the
// collective's event then never completes. async_error() polls it (any thread:
// the watchdog and waiters call it); the first error aborts the communicator
// (ncclCommAbort, which also unblocks any rank-local NCCL call on it) and is
// remembered, so every later query, and the destructor, see the aborted state.
// Internal to the NCCL backend.
#pragma once

#include <nccl.h>

#include <atomic>
#include <mutex>
#include <optional>
#include <string>

namespace dtr::mesh::nccl {

class NcclCommunicator {
 public:
  // Takes ownership of `comm`, which lives on CUDA device `device`.
  NcclCommunicator(ncclComm_t comm, int device, std::string group_description);
  ~NcclCommunicator();
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  ncclComm_t get() const { return comm_; }
  int device() const { return device_; }
  bool aborted() const { return aborted_.load(std::memory_order_acquire); }

  // The communicator's asynchronous error, if any (aborting it the first time);
  // nullopt while it is healthy. Never blocks on running collectives.
  std::optional<std::string> async_error();

 private:
  ncclComm_t comm_;
  int device_;
  std::string group_description_;
  std::mutex mutex_;  // orders queries against abort and destroy
  std::atomic<bool> aborted_{false};
  std::string error_;  // set when aborted
};

}  // namespace dtr::mesh::nccl
