// MPI datatypes and reduction ops for dtr's dtypes. MPI has no 16-bit floating
// types, so bf16 and f16 get committed 2-byte datatypes of their own and
// user-defined sum/max/min ops that convert each pair to f32, combine, and round
// once (never accumulating in 16-bit arithmetic). avg and premul_sum are built by
// the backend from sum (a division after, a scaling before).
#pragma once

#include "dtr/mesh/reduce_op.h"
#include "dtr/tensor/dtype.h"

#include <mpi.h>

#include <string>

namespace dtr::mesh::mpi {

// Creates the custom datatypes and ops (after MPI_Init; idempotent).
void create_mpi_types();
// Frees them (before MPI_Finalize; idempotent).
void free_mpi_types();

MPI_Datatype mpi_datatype(DType dtype);
// The MPI op that implements `op` for `dtype` (sum for avg and premul_sum).
MPI_Op mpi_op(ReduceOp op, DType dtype);

// Throws dtr::Error with MPI's error string when `code` is not MPI_SUCCESS.
void check_mpi(int code, const char* call);

}  // namespace dtr::mesh::mpi

#define DTR_MPI_CHECK(expr) ::dtr::mesh::mpi::check_mpi((expr), #expr)
