#include "dtr/kernels/cuda/reduce.h"

#include "dtr/kernels/cuda/block_reduce.cuh"
#include "dtr/kernels/cuda/cuda_check.h"

#include <algorithm>
#include <limits>
#include <type_traits>

namespace dtr::kernels::cuda {

namespace {

constexpr int kBlockThreads = 512;  // threads of a block that reduces one row or one piece
constexpr int kWarpBlockThreads = 256;  // a block of the warp-per-row kernel: 8 rows
constexpr int kUnroll = 4;              // vectors each thread loads before folding them
constexpr int64_t kMaxGrid = int64_t{1} << 30;  // grid-stride loops cover any more rows
// The partial result of any reduction fits in this many bytes (argmax: value and index).
constexpr size_t kPartialBytes = 16;

template <class A>
__device__ bool is_nan(A v) {
  if constexpr (std::is_floating_point_v<A>) {
    return v != v;
  } else {
    return false;
  }
}

// A reduction is an Op: identity(), load(element, index within the row) -> Acc,
// operator()(Acc earlier, Acc later) -> Acc (associative), finish(Acc, cols) -> Out.

template <class T>
struct SumOp {
  using Acc = acc_t<T>;
  using Out = sum_out_t<T>;
  bool mean;
  __device__ Acc identity() const { return Acc(0); }
  __device__ Acc load(T v, int64_t) const { return convert<Acc>(v); }
  __device__ Acc operator()(Acc a, Acc b) const { return a + b; }
  __device__ Out finish(Acc total, int64_t cols) const {
    if constexpr (std::is_floating_point_v<Acc>) {
      if (mean) total /= static_cast<Acc>(cols);  // 0 / 0 = NaN for an empty row
    }
    return convert<Out>(total);
  }
};

// max (kMax) or min, NaN-propagating; an empty row gives -inf / +inf (lowest / highest).
template <class T, bool kMax>
struct ExtremeOp {
  using Acc = acc_t<T>;
  using Out = T;
  __device__ Acc identity() const {
    using L = std::numeric_limits<Acc>;
    if constexpr (L::has_infinity) {
      return kMax ? -L::infinity() : L::infinity();
    } else {
      return kMax ? L::lowest() : L::max();
    }
  }
  __device__ Acc load(T v, int64_t) const { return convert<Acc>(v); }
  __device__ Acc operator()(Acc a, Acc b) const {
    if (is_nan(a)) return a;
    if (is_nan(b)) return b;
    return (kMax ? b > a : b < a) ? b : a;
  }
  __device__ Out finish(Acc best, int64_t) const { return convert<Out>(best); }
};

template <class V>
struct ValueIndex {
  V value;
  int64_t index;  // kNoIndex for the identity
};

// The first index of the maximum, or of the first NaN. The combine is a total
// order on (is NaN, value, -index), so the result does not depend on the tree.
template <class T>
struct ArgmaxOp {
  using V = acc_t<T>;
  using Acc = ValueIndex<V>;
  using Out = int64_t;
  static constexpr int64_t kNoIndex = std::numeric_limits<int64_t>::max();
  __device__ Acc identity() const {
    using L = std::numeric_limits<V>;
    return {L::has_infinity ? -L::infinity() : L::lowest(), kNoIndex};
  }
  __device__ Acc load(T v, int64_t index) const { return {convert<V>(v), index}; }
  __device__ Acc operator()(const Acc& a, const Acc& b) const {
    const bool a_nan = is_nan(a.value), b_nan = is_nan(b.value);
    if (a_nan || b_nan) {
      if (a_nan && b_nan) return a.index < b.index ? a : b;
      return a_nan ? a : b;
    }
    if (b.value > a.value) return b;
    if (a.value > b.value) return a;
    return a.index < b.index ? a : b;
  }
  __device__ Out finish(const Acc& best, int64_t) const {
    return best.index == kNoIndex ? int64_t{-1} : best.index;
  }
};

// Thread t of a group of n folds its vectors (t, t + n, ...) of elements
// [begin, end) of `row` (begin a multiple of kVec<T>), in order.
template <class T, class Op>
__device__ typename Op::Acc thread_fold(const T* row, int64_t begin, int64_t end, int t, int n,
                                        const Op& op) {
  using Acc = typename Op::Acc;
  constexpr int V = kVec<T>;
  const T* p = row + begin;
  const int64_t count = end - begin;
  const int64_t full = count / V;  // whole vectors
  Acc acc = op.identity();
  auto fold_vec = [&](const Vec<T>& v, int64_t i) {
#pragma unroll
    for (int k = 0; k < V; ++k) acc = op(acc, op.load(v.get(k), begin + i * V + k));
  };
  int64_t i = t;
  if (is_aligned16(p)) {
    for (; i + (kUnroll - 1) * int64_t{n} < full; i += kUnroll * int64_t{n}) {
      Vec<T> v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) v[u] = load_vec(p + (i + u * int64_t{n}) * V);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) fold_vec(v[u], i + u * int64_t{n});
    }
    for (; i < full; i += n) fold_vec(load_vec(p + i * V), i);
  } else {
    for (; i < full; i += n) fold_vec(load_vec_checked(p, count, i * V, false, T{}), i);
  }
  // The partial last vector belongs to the thread whose sequence it continues.
  if (i == full) {
    for (int64_t e = full * V; e < count; ++e) acc = op(acc, op.load(p[e], begin + e));
  }
  return acc;
}

// One warp per row, kWarpBlockThreads / 32 rows per block.
template <class T, class Op>
__global__ void __launch_bounds__(kWarpBlockThreads)
    reduce_rows_warp_kernel(const T* __restrict__ in, int64_t rows, int64_t cols,
                            typename Op::Out* __restrict__ out, Op op) {
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int64_t warps = blockDim.x / kWarpSize;
  for (int64_t r = blockIdx.x * warps + threadIdx.x / kWarpSize; r < rows; r += gridDim.x * warps) {
    auto acc = thread_fold(in + r * cols, 0, cols, lane, kWarpSize, op);
    acc = warp_allreduce(acc, op);
    if (lane == 0) out[r] = op.finish(acc, cols);
  }
}

// One block per row.
template <class T, class Op>
__global__ void __launch_bounds__(kBlockThreads)
    reduce_rows_block_kernel(const T* __restrict__ in, int64_t rows, int64_t cols,
                             typename Op::Out* __restrict__ out, Op op) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    auto acc = thread_fold(in + r * cols, 0, cols, static_cast<int>(threadIdx.x),
                           static_cast<int>(blockDim.x), op);
    acc = block_allreduce(acc, op);
    if (threadIdx.x == 0) out[r] = op.finish(acc, cols);
  }
}

// Pass 1 of a split row: block (piece p, row r) reduces elements
// [p * kSplitChunk, (p + 1) * kSplitChunk) of row r into partials[r * pieces + p].
template <class T, class Op>
__global__ void __launch_bounds__(kBlockThreads)
    reduce_pieces_kernel(const T* __restrict__ in, int64_t rows, int64_t cols, int64_t pieces,
                         typename Op::Acc* __restrict__ partials, Op op) {
  const int64_t p = blockIdx.x;
  const int64_t begin = p * kSplitChunk;
  const int64_t end = std::min(cols, begin + kSplitChunk);
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    auto acc = thread_fold(in + r * cols, begin, end, static_cast<int>(threadIdx.x),
                           static_cast<int>(blockDim.x), op);
    acc = block_allreduce(acc, op);
    if (threadIdx.x == 0) partials[r * pieces + p] = acc;
  }
}

// Pass 2 of a split row: one block folds a row's partials, in piece order per thread.
template <class Op>
__global__ void __launch_bounds__(kBlockThreads)
    reduce_partials_kernel(const typename Op::Acc* __restrict__ partials, int64_t rows,
                           int64_t pieces, int64_t cols, typename Op::Out* __restrict__ out,
                           Op op) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    auto acc = op.identity();
    for (int64_t p = threadIdx.x; p < pieces; p += blockDim.x) acc = op(acc, partials[r * pieces + p]);
    acc = block_allreduce(acc, op);
    if (threadIdx.x == 0) out[r] = op.finish(acc, cols);
  }
}

// Pieces per row when [rows, cols] takes the two-pass path, else 1.
int64_t split_pieces(int64_t rows, int64_t cols) {
  if (cols <= kSplitChunk || rows >= kSplitRowsBelow) return 1;
  return (cols + kSplitChunk - 1) / kSplitChunk;
}

unsigned grid_of(int64_t blocks) {
  return static_cast<unsigned>(std::clamp<int64_t>(blocks, 1, kMaxGrid));
}

template <class T, class Op>
void launch_reduce(const T* in, int64_t rows, int64_t cols, typename Op::Out* out, void* workspace,
                   cudaStream_t stream, Op op) {
  using Acc = typename Op::Acc;
  static_assert(sizeof(Acc) <= kPartialBytes, "a partial result must fit kPartialBytes");
  DTR_CUDA_KERNEL_CHECK(rows >= 0 && cols >= 0,
                        "CUDA reduction: expected rows, cols >= 0, got rows " +
                            std::to_string(rows) + ", cols " + std::to_string(cols));
  if (rows == 0) return;
  const int64_t pieces = split_pieces(rows, cols);
  if (pieces > 1) {
    DTR_CUDA_KERNEL_CHECK(workspace != nullptr,
                          "CUDA reduction: a [" + std::to_string(rows) + ", " +
                              std::to_string(cols) + "] input needs " +
                              std::to_string(reduce_workspace_bytes(rows, cols)) +
                              " bytes of workspace, got none");
    DTR_CUDA_KERNEL_CHECK(pieces <= std::numeric_limits<int>::max(),
                          "CUDA reduction: row of " + std::to_string(cols) + " elements is too long");
    auto* partials = static_cast<Acc*>(workspace);
    const dim3 grid(static_cast<unsigned>(pieces), static_cast<unsigned>(std::min<int64_t>(rows, 65535)));
    reduce_pieces_kernel<T, Op><<<grid, kBlockThreads, 0, stream>>>(in, rows, cols, pieces, partials, op);
    DTR_CUDA_CHECK_LAUNCH();
    reduce_partials_kernel<Op><<<grid_of(rows), kBlockThreads, 0, stream>>>(partials, rows, pieces,
                                                                             cols, out, op);
  } else if (cols <= kWarpRowCols) {
    const int64_t rows_per_block = kWarpBlockThreads / kWarpSize;
    reduce_rows_warp_kernel<T, Op><<<grid_of((rows + rows_per_block - 1) / rows_per_block),
                                     kWarpBlockThreads, 0, stream>>>(in, rows, cols, out, op);
  } else {
    reduce_rows_block_kernel<T, Op><<<grid_of(rows), kBlockThreads, 0, stream>>>(in, rows, cols, out, op);
  }
  DTR_CUDA_CHECK_LAUNCH();
}

// ---------------------------------------------------------------------------
// Column reductions of a contiguous [outer, inner] buffer over outer.

constexpr int kColThreads = kColThreadsX * kColSlices;
constexpr int kColFoldThreads = 256;  // threads of a block of the partials fold, one per column
constexpr int kColFoldBatch = 8;      // partials a fold thread loads before combining them

// How outer is cut: `pieces` pieces of `chunk` rows (the last may be shorter).
struct ColSplit {
  int64_t pieces;
  int64_t chunk;
};

ColSplit col_split(int64_t outer, int64_t inner) {
  const int64_t tiles = (inner + kColThreadsX - 1) / kColThreadsX;  // nominal 32-column tiles
  const int64_t wanted = (kColTargetBlocks + tiles - 1) / std::max<int64_t>(tiles, 1);
  const int64_t pieces = std::min(wanted, outer / kColMinPieceRows);
  if (pieces <= 1) return {1, outer};
  const int64_t rows = (outer + pieces - 1) / pieces;
  const int64_t chunk = (rows + kColSlices - 1) / kColSlices * kColSlices;
  return {(outer + chunk - 1) / chunk, chunk};
}

template <int kBytes>
struct UintOf;
template <>
struct UintOf<1> {
  using type = unsigned char;
};
template <>
struct UintOf<2> {
  using type = unsigned short;
};
template <>
struct UintOf<4> {
  using type = unsigned int;
};
template <>
struct UintOf<8> {
  using type = unsigned long long;
};

// C adjacent elements of a row read as one word (C * sizeof(T) <= 8 bytes).
template <class T, int C>
struct Pack {
  using Word = typename UintOf<static_cast<int>(sizeof(T)) * C>::type;
  using Elem = typename UintOf<static_cast<int>(sizeof(T))>::type;
  Word w;
  __device__ T get(int k) const {
    return bits_as<T>(static_cast<Elem>(w >> (8 * static_cast<int>(sizeof(T)) * k)));
  }
};

// p must be aligned to C * sizeof(T) bytes.
template <class T, int C>
__device__ inline Pack<T, C> load_pack(const T* p) {
  return {__ldg(reinterpret_cast<const typename Pack<T, C>::Word*>(p))};
}

// Block (column tile, piece blockIdx.y): thread (x, y) owns columns
// [tile * 32C + xC, + C) and folds rows begin + y, begin + y + kColSlices, ...
// of the piece in order; then the kColSlices slices are folded in slice order.
// One piece: the block writes out[c]; several: partials[piece * inner + c].
// C > 1 requires inner % C == 0 and `in` aligned to C * sizeof(T) bytes.
template <class T, int C, class Op>
__global__ void __launch_bounds__(kColThreads)
    reduce_cols_kernel(const T* __restrict__ in, int64_t outer, int64_t inner, int64_t chunk,
                       int64_t tiles, typename Op::Acc* __restrict__ partials,
                       typename Op::Out* __restrict__ out, Op op) {
  using Acc = typename Op::Acc;
  constexpr int kTileCols = kColThreadsX * C;
  __shared__ Acc slice_acc[kColSlices][kTileCols];
  const int x = static_cast<int>(threadIdx.x), y = static_cast<int>(threadIdx.y);
  const int tid = y * kColThreadsX + x;
  const int64_t piece = blockIdx.y;
  const int64_t begin = piece * chunk;
  const int64_t end = std::min(outer, begin + chunk);
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int64_t c0 = tile * kTileCols + int64_t{x} * C;  // this thread's first column
    Acc acc[C];
#pragma unroll
    for (int k = 0; k < C; ++k) acc[k] = op.identity();
    if (c0 < inner) {  // then all C columns are (inner % C == 0)
      const T* col = in + c0;
      auto fold = [&](const Pack<T, C>& v, int64_t r) {
#pragma unroll
        for (int k = 0; k < C; ++k) acc[k] = op(acc[k], op.load(v.get(k), r));
      };
      int64_t r = begin + y;
      for (; r + (kUnroll - 1) * kColSlices < end; r += kUnroll * kColSlices) {
        Pack<T, C> v[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          v[u] = load_pack<T, C>(col + (r + u * kColSlices) * inner);
        }
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) fold(v[u], r + u * kColSlices);
      }
      for (; r < end; r += kColSlices) fold(load_pack<T, C>(col + r * inner), r);
    }
    __syncthreads();  // the previous tile's slice fold is done with slice_acc
#pragma unroll
    for (int k = 0; k < C; ++k) slice_acc[y][x * C + k] = acc[k];
    __syncthreads();
    if (tid < kTileCols) {
      const int64_t c = tile * kTileCols + tid;
      if (c < inner) {
        Acc total = slice_acc[0][tid];
        for (int s = 1; s < kColSlices; ++s) total = op(total, slice_acc[s][tid]);
        if (partials != nullptr) {
          partials[piece * inner + c] = total;
        } else {
          out[c] = op.finish(total, outer);
        }
      }
    }
  }
}

// Pass 2 of a split column reduction: thread c folds column c's partials in piece order.
template <class Op>
__global__ void __launch_bounds__(kColFoldThreads)
    reduce_col_partials_kernel(const typename Op::Acc* __restrict__ partials, int64_t pieces,
                               int64_t inner, int64_t outer, typename Op::Out* __restrict__ out,
                               Op op) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t c = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; c < inner; c += stride) {
    auto total = partials[c];
    int64_t p = 1;
    for (; p + (kColFoldBatch - 1) < pieces; p += kColFoldBatch) {  // loads in flight together
      typename Op::Acc batch[kColFoldBatch];
#pragma unroll
      for (int u = 0; u < kColFoldBatch; ++u) batch[u] = partials[(p + u) * inner + c];
#pragma unroll
      for (int u = 0; u < kColFoldBatch; ++u) total = op(total, batch[u]);
    }
    for (; p < pieces; ++p) total = op(total, partials[p * inner + c]);
    out[c] = op.finish(total, outer);
  }
}

template <class T, int C, class Op>
void launch_cols_pass(const T* in, int64_t outer, int64_t inner, ColSplit split,
                      typename Op::Acc* partials, typename Op::Out* out, cudaStream_t stream,
                      Op op) {
  constexpr int64_t kTileCols = int64_t{kColThreadsX} * C;
  const int64_t tiles = (inner + kTileCols - 1) / kTileCols;
  const dim3 grid(grid_of(tiles), static_cast<unsigned>(split.pieces));
  const dim3 block(kColThreadsX, kColSlices);
  reduce_cols_kernel<T, C, Op><<<grid, block, 0, stream>>>(in, outer, inner, split.chunk, tiles,
                                                           partials, out, op);
}

template <class T, class Op>
void launch_reduce_cols(const T* in, int64_t outer, int64_t inner, typename Op::Out* out,
                        void* workspace, cudaStream_t stream, Op op) {
  using Acc = typename Op::Acc;
  static_assert(sizeof(Acc) <= kPartialBytes, "a partial result must fit kPartialBytes");
  DTR_CUDA_KERNEL_CHECK(outer >= 0 && inner >= 0,
                        "CUDA column reduction: expected outer, inner >= 0, got outer " +
                            std::to_string(outer) + ", inner " + std::to_string(inner));
  if (inner == 0) return;
  const ColSplit split = col_split(outer, inner);
  Acc* partials = nullptr;
  if (split.pieces > 1) {
    DTR_CUDA_KERNEL_CHECK(workspace != nullptr,
                          "CUDA column reduction: an [" + std::to_string(outer) + ", " +
                              std::to_string(inner) + "] input needs " +
                              std::to_string(reduce_cols_workspace_bytes(outer, inner)) +
                              " bytes of workspace, got none");
    partials = static_cast<Acc*>(workspace);
  }
  // 1- and 2-byte elements: 4 / sizeof(T) adjacent columns per thread where aligned.
  constexpr int kPair = sizeof(T) < 4 ? 4 / static_cast<int>(sizeof(T)) : 1;
  if (kPair > 1 && inner % kPair == 0 && reinterpret_cast<uintptr_t>(in) % 4 == 0) {
    launch_cols_pass<T, kPair, Op>(in, outer, inner, split, partials, out, stream, op);
  } else {
    launch_cols_pass<T, 1, Op>(in, outer, inner, split, partials, out, stream, op);
  }
  DTR_CUDA_CHECK_LAUNCH();
  if (split.pieces > 1) {
    const int64_t blocks = (inner + kColFoldThreads - 1) / kColFoldThreads;
    reduce_col_partials_kernel<Op><<<grid_of(blocks), kColFoldThreads, 0, stream>>>(
        partials, split.pieces, inner, outer, out, op);
    DTR_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace

size_t reduce_workspace_bytes(int64_t rows, int64_t cols) {
  const int64_t pieces = split_pieces(rows, cols);
  return pieces > 1 ? static_cast<size_t>(rows * pieces) * kPartialBytes : 0;
}

template <class T>
void sum_rows(const T* in, int64_t rows, int64_t cols, sum_out_t<T>* out, void* workspace,
              cudaStream_t stream) {
  launch_reduce(in, rows, cols, out, workspace, stream, SumOp<T>{.mean = false});
}

template <class T>
void mean_rows(const T* in, int64_t rows, int64_t cols, T* out, void* workspace,
               cudaStream_t stream) {
  static_assert(is_floating_v<T>, "mean_rows is defined for floating types only");
  launch_reduce(in, rows, cols, out, workspace, stream, SumOp<T>{.mean = true});
}

template <class T>
void max_rows(const T* in, int64_t rows, int64_t cols, T* out, void* workspace,
              cudaStream_t stream) {
  launch_reduce(in, rows, cols, out, workspace, stream, ExtremeOp<T, true>{});
}

template <class T>
void min_rows(const T* in, int64_t rows, int64_t cols, T* out, void* workspace,
              cudaStream_t stream) {
  launch_reduce(in, rows, cols, out, workspace, stream, ExtremeOp<T, false>{});
}

template <class T>
void argmax_rows(const T* in, int64_t rows, int64_t cols, int64_t* out, void* workspace,
                 cudaStream_t stream) {
  launch_reduce(in, rows, cols, out, workspace, stream, ArgmaxOp<T>{});
}

size_t reduce_cols_workspace_bytes(int64_t outer, int64_t inner) {
  const ColSplit split = col_split(outer, inner);
  return split.pieces > 1 ? static_cast<size_t>(split.pieces * inner) * kPartialBytes : 0;
}

template <class T>
void sum_cols(const T* in, int64_t outer, int64_t inner, sum_out_t<T>* out, void* workspace,
              cudaStream_t stream) {
  launch_reduce_cols(in, outer, inner, out, workspace, stream, SumOp<T>{.mean = false});
}

template <class T>
void mean_cols(const T* in, int64_t outer, int64_t inner, T* out, void* workspace,
               cudaStream_t stream) {
  static_assert(is_floating_v<T>, "mean_cols is defined for floating types only");
  launch_reduce_cols(in, outer, inner, out, workspace, stream, SumOp<T>{.mean = true});
}

template <class T>
void max_cols(const T* in, int64_t outer, int64_t inner, T* out, void* workspace,
              cudaStream_t stream) {
  launch_reduce_cols(in, outer, inner, out, workspace, stream, ExtremeOp<T, true>{});
}

template <class T>
void min_cols(const T* in, int64_t outer, int64_t inner, T* out, void* workspace,
              cudaStream_t stream) {
  launch_reduce_cols(in, outer, inner, out, workspace, stream, ExtremeOp<T, false>{});
}

template <class T>
void argmax_cols(const T* in, int64_t outer, int64_t inner, int64_t* out, void* workspace,
                 cudaStream_t stream) {
  launch_reduce_cols(in, outer, inner, out, workspace, stream, ArgmaxOp<T>{});
}

#define DTR_INSTANTIATE_CUDA_REDUCE(T)                                                          \
  template void sum_rows<T>(const T*, int64_t, int64_t, sum_out_t<T>*, void*, cudaStream_t);    \
  template void max_rows<T>(const T*, int64_t, int64_t, T*, void*, cudaStream_t);               \
  template void min_rows<T>(const T*, int64_t, int64_t, T*, void*, cudaStream_t);               \
  template void argmax_rows<T>(const T*, int64_t, int64_t, int64_t*, void*, cudaStream_t);      \
  template void sum_cols<T>(const T*, int64_t, int64_t, sum_out_t<T>*, void*, cudaStream_t);    \
  template void max_cols<T>(const T*, int64_t, int64_t, T*, void*, cudaStream_t);               \
  template void min_cols<T>(const T*, int64_t, int64_t, T*, void*, cudaStream_t);               \
  template void argmax_cols<T>(const T*, int64_t, int64_t, int64_t*, void*, cudaStream_t);
DTR_FOR_EACH_SCALAR(DTR_INSTANTIATE_CUDA_REDUCE)

#define DTR_INSTANTIATE_CUDA_MEAN(T)                                               \
  template void mean_rows<T>(const T*, int64_t, int64_t, T*, void*, cudaStream_t); \
  template void mean_cols<T>(const T*, int64_t, int64_t, T*, void*, cudaStream_t);
DTR_FOR_EACH_FLOATING(DTR_INSTANTIATE_CUDA_MEAN)

}  // namespace dtr::kernels::cuda
