// NCCL datatypes and reduction ops for dtr's dtypes and ReduceOps.
//
// Every dtr dtype has a native NCCL type (bf16 and f16 included, reduced by NCCL
// itself). sum, max and min map to NCCL's ops; avg maps to ncclAvg, which NCCL
// defines for floating types only, so avg on an integer dtype is an error on this
// backend (the MPI backend truncates instead); premul_sum becomes an op made by
// ncclRedOpCreatePreMulSum with the factor as a host-immediate scalar of the
// tensor's dtype, which the caller destroys once the collective is enqueued.
// Internal to the NCCL backend.
#pragma once

#include "dtr/mesh/reduce_op.h"
#include "dtr/tensor/dtype.h"

#include <nccl.h>

#include <string_view>

namespace dtr::mesh::nccl {

ncclDataType_t nccl_datatype(DType dtype);

struct NcclReduction {
  ncclRedOp_t op = ncclSum;
  bool created = false;  // made by ncclRedOpCreate*: ncclRedOpDestroy it after use
};

// `what` names the collective in errors ("all_reduce #3 avg i64 [4] on 'world' ...").
NcclReduction make_nccl_reduction(ReduceOp op, DType dtype, ncclComm_t comm, std::string_view what);

}  // namespace dtr::mesh::nccl
