// Internal to the CPU GEMM (gemm.cpp): dtr's own f32 GEMM on the calling thread, in the
// BLIS scheme. op(B) is packed a kc x nc block at a time into micro-panels of
// kTileCols columns, op(A) an mc x kc block at a time into micro-panels of kTileRows
// rows (both zero-padded at the edges), and the register tile
// (gemm_register_tile.h) multiplies one micro-panel of each. The blocks are sized
// for the caches: an A micro-panel stays in L1 while the B block streams from L2.
//
// k is blocked from k alone and edge tiles run the same micro-kernel through a
// scratch tile, so each element of C is summed in the same order whatever part of
// C a call computes: results do not depend on how gemm.cpp cuts C among threads.
#pragma once

#include "dtr/kernels/transpose.h"

#include <cstdint>

namespace dtr::kernels::cpu::DTR_CPU_LEVEL {

// C[m, n] = alpha * op(A)[m, k] . op(B)[k, n] + beta * C, row-major with the row
// strides of gemm.h; beta == 0 writes C without reading it. Needs k > 0.
void packed_sgemm(Transpose trans_a, Transpose trans_b, int64_t m, int64_t n, int64_t k,
                  float alpha, const float* a, int64_t lda, const float* b, int64_t ldb,
                  float beta, float* c, int64_t ldc);

}  // namespace dtr::kernels::cpu::DTR_CPU_LEVEL
