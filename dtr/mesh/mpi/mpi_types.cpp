#include "dtr/mesh/mpi/mpi_types.h"

#include "dtr/base/error.h"
#include "dtr/mesh/mpi/host_staging.h"

#include <algorithm>

namespace dtr::mesh::mpi {

namespace {

MPI_Datatype g_bf16 = MPI_DATATYPE_NULL;
MPI_Datatype g_f16 = MPI_DATATYPE_NULL;
MPI_Op g_half_sum = MPI_OP_NULL;
MPI_Op g_half_max = MPI_OP_NULL;
MPI_Op g_half_min = MPI_OP_NULL;

DType half_dtype(const MPI_Datatype* type) { return *type == g_bf16 ? DType::bf16 : DType::f16; }

// The user-defined ops for bf16 and f16: the backend's host combine
// (dtr/mesh/mpi/host_staging.h), which works in f32 and rounds once.
void half_sum(void* in, void* inout, int* len, MPI_Datatype* type) {
  combine_in_place(inout, in, *len, half_dtype(type), ReduceOp::Kind::sum);
}
void half_max(void* in, void* inout, int* len, MPI_Datatype* type) {
  combine_in_place(inout, in, *len, half_dtype(type), ReduceOp::Kind::max);
}
void half_min(void* in, void* inout, int* len, MPI_Datatype* type) {
  combine_in_place(inout, in, *len, half_dtype(type), ReduceOp::Kind::min);
}

}  // namespace

void check_mpi(int code, const char* call) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  DTR_FAIL("MPI call failed: {}: {}", call, std::string(text, length));
}

void create_mpi_types() {
  if (g_bf16 != MPI_DATATYPE_NULL) return;
  DTR_MPI_CHECK(MPI_Type_contiguous(2, MPI_BYTE, &g_bf16));
  DTR_MPI_CHECK(MPI_Type_commit(&g_bf16));
  DTR_MPI_CHECK(MPI_Type_contiguous(2, MPI_BYTE, &g_f16));
  DTR_MPI_CHECK(MPI_Type_commit(&g_f16));
  DTR_MPI_CHECK(MPI_Op_create(&half_sum, /*commute=*/1, &g_half_sum));
  DTR_MPI_CHECK(MPI_Op_create(&half_max, 1, &g_half_max));
  DTR_MPI_CHECK(MPI_Op_create(&half_min, 1, &g_half_min));
}

void free_mpi_types() {
  if (g_bf16 == MPI_DATATYPE_NULL) return;
  MPI_Type_free(&g_bf16);
  MPI_Type_free(&g_f16);
  MPI_Op_free(&g_half_sum);
  MPI_Op_free(&g_half_max);
  MPI_Op_free(&g_half_min);
}

MPI_Datatype mpi_datatype(DType dtype) {
  switch (dtype) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::i32: return MPI_INT32_T;
    case DType::i64: return MPI_INT64_T;
    case DType::u8: return MPI_UINT8_T;
    case DType::bf16:
      DTR_INTERNAL_ASSERT(g_bf16 != MPI_DATATYPE_NULL, "MPI half types used before distributed::init()");
      return g_bf16;
    case DType::f16:
      DTR_INTERNAL_ASSERT(g_f16 != MPI_DATATYPE_NULL, "MPI half types used before distributed::init()");
      return g_f16;
  }
  DTR_INTERNAL_ASSERT(false, "no MPI datatype for dtype {}", static_cast<int>(dtype));
}

MPI_Op mpi_op(ReduceOp op, DType dtype) {
  const bool half = is_half(dtype);
  switch (op.kind) {
    case ReduceOp::Kind::sum:
    case ReduceOp::Kind::avg:
    case ReduceOp::Kind::premul_sum: return half ? g_half_sum : MPI_SUM;
    case ReduceOp::Kind::max: return half ? g_half_max : MPI_MAX;
    case ReduceOp::Kind::min: return half ? g_half_min : MPI_MIN;
  }
  DTR_INTERNAL_ASSERT(false, "unknown reduce op {}", static_cast<int>(op.kind));
}

}  // namespace dtr::mesh::mpi
