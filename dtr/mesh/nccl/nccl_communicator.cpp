#include "dtr/mesh/nccl/nccl_communicator.h"

#include "dtr/base/error.h"
#include "dtr/base/log.h"
#include "dtr/mesh/nccl/nccl_check.h"

#include <cuda_runtime.h>

namespace dtr::mesh::nccl {

NcclCommunicator::NcclCommunicator(ncclComm_t comm, int device, std::string group_description)
    : comm_(comm), device_(device), group_description_(std::move(group_description)) {}

NcclCommunicator::~NcclCommunicator() {
  std::lock_guard lock(mutex_);
  if (aborted() || comm_ == nullptr) return;
  // ncclCommDestroy frees resources on the communicator's device.
  int previous = -1;
  cudaGetDevice(&previous);
  if (previous != device_) cudaSetDevice(device_);
  ncclResult_t status = ncclCommDestroy(comm_);
  if (status != ncclSuccess) {
    DTR_LOG_WARN("NCCL group {}: ncclCommDestroy failed: {}", group_description_, nccl_error_message(status));
  }
  if (previous >= 0 && previous != device_) cudaSetDevice(previous);
  comm_ = nullptr;
}

std::optional<std::string> NcclCommunicator::async_error() {
  std::lock_guard lock(mutex_);
  if (aborted()) return error_;
  ncclResult_t async = ncclSuccess;
  ncclResult_t status = ncclCommGetAsyncError(comm_, &async);
  if (status == ncclSuccess && (async == ncclSuccess || async == ncclInProgress)) return std::nullopt;
  ncclResult_t failure = status != ncclSuccess ? status : async;
  error_ = fmt::format("NCCL reported an asynchronous error on group {}: {}; the communicator was aborted",
                       group_description_, nccl_error_message(failure));
  DTR_LOG_ERROR("{}", error_);
  ncclCommAbort(comm_);
  aborted_.store(true, std::memory_order_release);
  return error_;
}

}  // namespace dtr::mesh::nccl
