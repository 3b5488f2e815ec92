// Row reductions on a CUDA device: sum, mean, max, min and argmax of each row
// of a contiguous [rows, cols] device buffer, one result per row (the CUDA twins
// of dtr/kernels/cpu/reduce.h, with the same result types, NaN and empty-row rules).
//
// Strategy, chosen from rows and cols only:
//   - short rows (cols <= kWarpRowCols): one warp per row, several rows per block;
//   - otherwise one block per row;
//   - few long rows (cols > kSplitChunk and rows < kSplitRowsBelow, e.g. a
//     whole-tensor sum): two passes. Pass 1 cuts each row into pieces of
//     kSplitChunk elements, one block per piece, each writing a partial result
//     into `workspace`; pass 2 folds each row's partials with one block.
// Each thread accumulates its elements (16-byte loads where the row is aligned)
// in acc_t<T>, then warp shuffles and one shared-memory step combine the
// threads. The reduction tree depends only on (rows, cols), never on timing or
// the GPU model, and floats are never combined with atomics: the same input
// gives bitwise the same output on every run. Sums are not in the CPU's
// pairwise order, so float sums match the CPU within rounding, not bitwise.
// max/min/argmax match the CPU bitwise (argmax is the first index of the
// maximum, or of the first NaN), except that max/min may pick +0 where the CPU
// picks -0 (or the reverse) when both are present.
//
// `workspace` must hold reduce_workspace_bytes(rows, cols) bytes of device
// memory (it may be null when that is 0). Every launcher enqueues on `stream`
// and returns without synchronizing.
//
// Column reductions (sum_cols ... argmax_cols): the same five reductions over
// the leading extent of a contiguous [outer, inner] device buffer, one result
// per column: out[c] = op over r of in[r * inner + c] (a bias gradient: grad
// [B * T, C] summed over B * T, without transposing it first). argmax gives the
// row r; an empty column (outer == 0) gives 0 / NaN / -1 like an empty row.
// Strategy, chosen from outer and inner only:
//   - a block of kColThreadsX x kColSlices threads covers a tile of columns.
//     Consecutive threads own consecutive columns, so a warp reads a contiguous
//     span of each row: 1 column per thread, or 4 / sizeof(T) adjacent columns
//     (one 4-byte load) for 1- and 2-byte types when the buffer is 4-byte
//     aligned and inner is a multiple of that (a warp then reads 128 bytes).
//     Row slice y (threadIdx.y) folds rows y, y + kColSlices, ... of the
//     block's rows in order; the slices are folded in order in shared memory.
//   - few column tiles (fewer than kColTargetBlocks 32-column tiles, and at
//     least 2 * kColMinPieceRows rows): two passes. Pass 1 cuts outer into
//     pieces of chunk rows (a multiple of kColSlices, at least
//     kColMinPieceRows), blockIdx.y = piece, so that about kColTargetBlocks
//     (32-column tile, piece) pairs exist, and writes each piece's partial
//     result per column into `workspace`; pass 2 folds each column's
//     partials in piece order, one thread per column. E.g. [8192, 768] bf16:
//     43 pieces of 192 rows x 12 tiles of 64 columns = 516 blocks;
//     [8192, 3072] bf16: 11 pieces x 48 tiles = 528 blocks.
// Whether columns are paired changes only which thread owns a column, never
// the order in which a column's elements are combined, so the column rules are
// those of the rows: bitwise reproducible, no atomics, float sums within
// rounding of the CPU, max/min/argmax bitwise (up to the sign of a zero).
// `workspace` must hold reduce_cols_workspace_bytes(outer, inner) bytes.
#pragma once

#include "dtr/kernels/cpu/reduce.h"  // sum_out_t (fmt-free)
#include "dtr/kernels/scalar_types.h"

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace dtr::kernels::cuda {

using cpu::sum_out_t;

// Rows up to this many columns are reduced by one warp each.
inline constexpr int64_t kWarpRowCols = 1024;
// Elements per piece of a long row in the two-pass reduction.
inline constexpr int64_t kSplitChunk = 65536;
// Long rows are split only when there are fewer rows than this (else one block per row fills the GPU).
inline constexpr int64_t kSplitRowsBelow = 1024;

// Device scratch bytes the launchers need for a [rows, cols] input (0 when one pass suffices).
size_t reduce_workspace_bytes(int64_t rows, int64_t cols);

template <class T>
void sum_rows(const T* in, int64_t rows, int64_t cols, sum_out_t<T>* out, void* workspace,
              cudaStream_t stream);

// Floating T only.
template <class T>
void mean_rows(const T* in, int64_t rows, int64_t cols, T* out, void* workspace,
               cudaStream_t stream);

template <class T>
void max_rows(const T* in, int64_t rows, int64_t cols, T* out, void* workspace,
              cudaStream_t stream);

template <class T>
void min_rows(const T* in, int64_t rows, int64_t cols, T* out, void* workspace,
              cudaStream_t stream);

// out[r] is the index within row r (-1 for an empty row).
template <class T>
void argmax_rows(const T* in, int64_t rows, int64_t cols, int64_t* out, void* workspace,
                 cudaStream_t stream);

// Column reductions: block shape, and when outer is split (see the header comment).
inline constexpr int kColThreadsX = 32;
inline constexpr int kColSlices = 16;
// (32-column tile, piece) pairs the split aims at: 2-4 blocks per SM of a 132-SM H100 for
// 2-byte types (64-column tiles), twice that for wider ones.
inline constexpr int64_t kColTargetBlocks = 1024;
// A piece has at least this many rows (kColMinPieceRows / kColSlices per thread).
inline constexpr int64_t kColMinPieceRows = 128;

// Device scratch bytes the column launchers need for an [outer, inner] input (0 when one
// pass suffices).
size_t reduce_cols_workspace_bytes(int64_t outer, int64_t inner);

template <class T>
void sum_cols(const T* in, int64_t outer, int64_t inner, sum_out_t<T>* out, void* workspace,
              cudaStream_t stream);

// Floating T only.
template <class T>
void mean_cols(const T* in, int64_t outer, int64_t inner, T* out, void* workspace,
               cudaStream_t stream);

template <class T>
void max_cols(const T* in, int64_t outer, int64_t inner, T* out, void* workspace,
              cudaStream_t stream);

template <class T>
void min_cols(const T* in, int64_t outer, int64_t inner, T* out, void* workspace,
              cudaStream_t stream);

// out[c] is the row r of column c's maximum (-1 when outer == 0).
template <class T>
void argmax_cols(const T* in, int64_t outer, int64_t inner, int64_t* out, void* workspace,
                 cudaStream_t stream);

}  // namespace dtr::kernels::cuda
