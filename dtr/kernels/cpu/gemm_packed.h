// Internal to the CPU GEMM (gemm.cpp): dtr's own f32 GEMM on the calling thread, in the
// BLIS scheme (bf16 / f16 operands are widened to f32 as they are packed). op(B) is packed a kc x nc block at a time into micro-panels of
// kTileCols columns, op(A) an mc x kc block at a time into micro-panels of kTileRows
// rows (both zero-padded at the edges), and the register tile
// (gemm_register_tile.h) multiplies one micro-panel of each. The blocks are sized
// for the caches: an A micro-panel stays in L1 while the B block streams from L2.
//
// k is blocked from k alone and edge tiles run the same micro-kernel through a
// scratch tile, so each element of C is summed in the same order whatever part of
// C a call computes: results do not depend on how gemm.cpp cuts C among threads.
#pragma once

#include "dtr/kernels/scalar_types.h"
#include "dtr/kernels/transpose.h"

#include <cstdint>

namespace dtr::kernels::cpu::DTR_CPU_LEVEL {

// op(A) packed whole, for threads that share it (each computing other columns of C)
// instead of each packing its own copy. pack_whole_a() packs micro-panels
// [panel_begin, panel_end) of op(A)'s rows (kTileRows each), for every block of k,
// into `dst` of packed_a_floats(m, k) floats, in the layout packed_gemm reads; so that
// several threads can fill one buffer, each its own panels.
int64_t packed_a_floats(int64_t m, int64_t k);
int64_t packed_a_panels(int64_t m);
void pack_whole_a(Transpose trans_a, const float* a, int64_t lda, int64_t m, int64_t k,
                  int64_t panel_begin, int64_t panel_end, float* dst);

// Whether packed_gemm over `n` columns of C packs op(A) once: C that spans several
// blocks of columns packs it again for each.
bool packs_a_once(int64_t n);

// C[m, n] = alpha * op(A)[m, k] . op(B)[k, n] + beta * C, row-major with the row
// strides of gemm.h; beta == 0 writes C without reading it. Needs k > 0.
// a_packed, when given, holds op(A) packed whole (above), and `a` is then not read.
// A and B are float, bf16 or f16 (S), widened to float as they are packed; C and the
// sums are float.
template <class S>
void packed_gemm(Transpose trans_a, Transpose trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                 const S* a, int64_t lda, const S* b, int64_t ldb, float beta, float* c, int64_t ldc,
                 const float* a_packed = nullptr);

// A buffer of `count` floats aligned to a cache line, owned by the calling thread
// and reused by its next call (for op(A) packed whole).
float* whole_pack_buffer(int64_t count);

}  // namespace dtr::kernels::cpu::DTR_CPU_LEVEL
