#include "dtr/mesh/nccl/nccl_types.h"

#include "dtr/base/error.h"
#include "dtr/mesh/nccl/nccl_check.h"

#include <cstdint>

namespace dtr::mesh::nccl {

ncclDataType_t nccl_datatype(DType dtype) {
  switch (dtype) {
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
    case DType::bf16: return ncclBfloat16;
    case DType::f16: return ncclFloat16;
    case DType::i32: return ncclInt32;
    case DType::i64: return ncclInt64;
    case DType::u8: return ncclUint8;
  }
  DTR_INTERNAL_ASSERT(false, "no NCCL datatype for dtype {}", static_cast<int>(dtype));
  return ncclFloat32;
}

NcclReduction make_nccl_reduction(ReduceOp op, DType dtype, ncclComm_t comm, std::string_view what) {
  switch (op.kind) {
    case ReduceOp::Kind::sum: return {ncclSum, false};
    case ReduceOp::Kind::max: return {ncclMax, false};
    case ReduceOp::Kind::min: return {ncclMin, false};
    case ReduceOp::Kind::avg:
      DTR_CHECK(is_floating(dtype),
                "{}: avg on {} is not supported by the NCCL backend (ncclAvg is defined for floating dtypes "
                "only); reduce with sum and divide, or use a floating dtype",
                what, dtype);
      return {ncclAvg, false};
    case ReduceOp::Kind::premul_sum: {
      DTR_CHECK(is_floating(dtype), "{}: premul_sum needs a floating dtype, got {}", what, dtype);
      // The scalar has the tensor's own type; NCCL reads it before returning.
      NcclReduction reduction{ncclSum, true};
      const ncclDataType_t type = nccl_datatype(dtype);
      auto create = [&](auto scalar) {
        DTR_NCCL_CHECK(ncclRedOpCreatePreMulSum(&reduction.op, &scalar, type, ncclScalarHostImmediate, comm));
      };
      switch (dtype) {
        case DType::f32: create(static_cast<float>(op.factor)); break;
        case DType::f64: create(op.factor); break;
        case DType::bf16: create(bf16(double_to_float_round_odd(op.factor))); break;
        case DType::f16: create(f16(double_to_float_round_odd(op.factor))); break;
        default: DTR_INTERNAL_ASSERT(false, "premul_sum on {} passed the floating check", dtype);
      }
      return reduction;
    }
  }
  DTR_INTERNAL_ASSERT(false, "unknown ReduceOp kind {}", static_cast<int>(op.kind));
  return {};
}

}  // namespace dtr::mesh::nccl
