// Row reductions on a CUDA device: sum, mean, max, min and argmax of each row
// of a contiguous [rows, cols] device buffer, one result per row (the CUDA twins
// of kernels/cpu/reduce.h, with the same result types, NaN and empty-row rules).
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
#pragma once

#include "kernels/cpu/reduce.h"  // sum_out_t (fmt-free)
#include "kernels/scalar_types.h"

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

}  // namespace dtr::kernels::cuda
