// Error checks for NCCL calls: DTR_NCCL_CHECK(expr) throws dtr::Error carrying
// the call, NCCL's error string (ncclGetErrorString) and NCCL's last error
// message (ncclGetLastError), so a failed NCCL call never goes unnoticed or exits
// the process.
// Internal to the NCCL backend (it includes nccl.h; public headers do not).
#pragma once

#include <nccl.h>

#include <string>

namespace dtr::mesh::nccl {

[[noreturn]] void throw_nccl_error(ncclResult_t status, const char* expr, const char* file, int line);

// "unhandled system error (run with NCCL_DEBUG=INFO for details); last NCCL error: ...".
std::string nccl_error_message(ncclResult_t status);

}  // namespace dtr::mesh::nccl

#define DTR_NCCL_CHECK(expr)                                                                 \
  do {                                                                                       \
    ncclResult_t dtr_nccl_status_ = (expr);                                                  \
    if (dtr_nccl_status_ != ncclSuccess) [[unlikely]] {                                      \
      ::dtr::mesh::nccl::throw_nccl_error(dtr_nccl_status_, #expr, __FILE__, __LINE__);      \
    }                                                                                        \
  } while (0)
