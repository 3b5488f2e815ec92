#include "dtr/mesh/nccl/nccl_check.h"

#include "dtr/base/error.h"

namespace dtr::mesh::nccl {

std::string nccl_error_message(ncclResult_t status) {
  std::string message = ncclGetErrorString(status);
  const char* last = ncclGetLastError(nullptr);
  if (last != nullptr && last[0] != '\0') message += fmt::format("; last NCCL error: {}", last);
  return message;
}

void throw_nccl_error(ncclResult_t status, const char* expr, const char* file, int line) {
  dtr::detail::throw_error(file, line, fmt::format("NCCL call {} failed: {}", expr, nccl_error_message(status)));
}

}  // namespace dtr::mesh::nccl
