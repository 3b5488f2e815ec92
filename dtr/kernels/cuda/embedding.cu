#include "dtr/kernels/cuda/embedding.h"

#include "dtr/kernels/cuda/block_reduce.cuh"
#include "dtr/kernels/cuda/cuda_check.h"
#include "dtr/kernels/scalar_types.h"

#include <algorithm>
#include <bit>
#include <string>

namespace dtr::kernels::cuda {

namespace {

constexpr int kGatherThreads = 256;
constexpr int kDigitBits = 8;  // radix sort: bits per pass
constexpr int kDigits = 1 << kDigitBits;
constexpr int kSortWarps = 4;  // chunks (one per warp) per block of the sort kernels
constexpr int kScanThreads = 1024;
constexpr int kSumThreads = 256;
constexpr int64_t kMaxGrid = int64_t{1} << 30;
constexpr size_t kAlign = 256;  // workspace regions start at this alignment

unsigned grid_of(int64_t blocks) {
  return static_cast<unsigned>(std::clamp<int64_t>(blocks, 1, kMaxGrid));
}

size_t align_up(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

// ---- forward ---------------------------------------------------------------

// out row t = table row indices[t], both `units` units of U long. threadIdx.y
// picks the token, threadIdx.x walks the row's units.
template <class U>
__global__ void __launch_bounds__(kGatherThreads)
    gather_rows_kernel(const U* __restrict__ table, int64_t units, const int64_t* __restrict__ indices,
                       int64_t tokens, U* __restrict__ out) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.y;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y; t < tokens; t += stride) {
    const U* src = table + indices[t] * units;
    U* dst = out + t * units;
    for (int64_t c = threadIdx.x; c < units; c += blockDim.x) dst[c] = src[c];
  }
}

template <class U>
void launch_gather(const void* table, int64_t row_bytes, const int64_t* indices, int64_t tokens,
                   void* out, cudaStream_t stream) {
  const int64_t units = row_bytes / static_cast<int64_t>(sizeof(U));
  int x = 1;  // threads along a row: the power of two >= units, at most the whole block
  while (x < kGatherThreads && x < units) x *= 2;
  const dim3 block(static_cast<unsigned>(x), static_cast<unsigned>(kGatherThreads / x));
  const int64_t blocks = (tokens + block.y - 1) / block.y;
  gather_rows_kernel<U><<<grid_of(blocks), block, 0, stream>>>(
      static_cast<const U*>(table), units, indices, tokens, static_cast<U*>(out));
  DTR_CUDA_CHECK_LAUNCH();
}

// ---- backward: stable radix sort of token positions by index ---------------

__device__ inline int digit_of(int64_t key, int shift) {
  return static_cast<int>((static_cast<uint64_t>(key) >> shift) & (kDigits - 1));
}

// The unsorted start: vals[k] = k, keys[k] = indices[k].
__global__ void iota_kernel(const int64_t* __restrict__ indices, int64_t tokens, int64_t* __restrict__ keys,
                            int64_t* __restrict__ vals) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < tokens; k += stride) {
    keys[k] = indices[k];
    vals[k] = k;
  }
}

// counts[d * chunks + c] = how many keys of chunk c have digit d. One warp per chunk.
__global__ void __launch_bounds__(kSortWarps * kWarpSize)
    digit_count_kernel(const int64_t* __restrict__ keys, int64_t tokens, int64_t chunks, int shift,
                       int64_t* __restrict__ counts) {
  __shared__ int hist[kSortWarps][kDigits];
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int64_t chunk = static_cast<int64_t>(blockIdx.x) * kSortWarps + warp;
  if (chunk >= chunks) return;  // the whole warp: no block-wide barriers below
  for (int d = lane; d < kDigits; d += kWarpSize) hist[warp][d] = 0;
  __syncwarp();
  const int64_t begin = chunk * kSortChunk;
  const int64_t end = min(begin + kSortChunk, tokens);
  for (int64_t k = begin + lane; k < end; k += kWarpSize) atomicAdd(&hist[warp][digit_of(keys[k], shift)], 1);
  __syncwarp();
  for (int d = lane; d < kDigits; d += kWarpSize) counts[d * chunks + chunk] = hist[warp][d];
}

// In-place exclusive prefix sum of n int64 values, by one block: each thread
// folds a contiguous segment, the block scans the segment totals, each thread
// rewrites its segment. (Integer sums: exact in any order.)
__global__ void __launch_bounds__(kScanThreads) exclusive_scan_kernel(int64_t* data, int64_t n) {
  __shared__ int64_t warp_total[kScanThreads / kWarpSize];
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int64_t per = (n + kScanThreads - 1) / kScanThreads;
  const int64_t begin = min(static_cast<int64_t>(threadIdx.x) * per, n);
  const int64_t end = min(begin + per, n);
  int64_t local = 0;
  for (int64_t k = begin; k < end; ++k) local += data[k];
  int64_t inclusive = local;  // over the warp's lanes up to this one
  for (int offset = 1; offset < kWarpSize; offset *= 2) {
    const int64_t other = __shfl_up_sync(kFullWarpMask, inclusive, offset);
    if (lane >= offset) inclusive += other;
  }
  if (lane == kWarpSize - 1) warp_total[warp] = inclusive;
  __syncthreads();
  if (warp == 0) {  // kScanThreads / kWarpSize == kWarpSize warps: one per lane
    int64_t total = warp_total[lane];
    for (int offset = 1; offset < kWarpSize; offset *= 2) {
      const int64_t other = __shfl_up_sync(kFullWarpMask, total, offset);
      if (lane >= offset) total += other;
    }
    warp_total[lane] = total;  // inclusive over warps 0..lane
  }
  __syncthreads();
  int64_t prefix = (inclusive - local) + (warp > 0 ? warp_total[warp - 1] : 0);
  for (int64_t k = begin; k < end; ++k) {
    const int64_t v = data[k];
    data[k] = prefix;
    prefix += v;
  }
}

// Places chunk c's (key, val) pairs at offsets[d * chunks + c] onwards for digit
// d, in chunk order: 32 at a time, equal digits ranked by lane. One warp per chunk.
__global__ void __launch_bounds__(kSortWarps * kWarpSize)
    digit_place_kernel(const int64_t* __restrict__ keys_in, const int64_t* __restrict__ vals_in,
                       int64_t tokens, int64_t chunks, int shift, const int64_t* __restrict__ offsets,
                       int64_t* __restrict__ keys_out, int64_t* __restrict__ vals_out) {
  __shared__ int64_t next[kSortWarps][kDigits];
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int64_t chunk = static_cast<int64_t>(blockIdx.x) * kSortWarps + warp;
  if (chunk >= chunks) return;
  for (int d = lane; d < kDigits; d += kWarpSize) next[warp][d] = offsets[d * chunks + chunk];
  __syncwarp();
  const int64_t begin = chunk * kSortChunk;
  const int64_t end = min(begin + kSortChunk, tokens);
  const unsigned lanes_below = (1u << lane) - 1u;
  for (int64_t base = begin; base < end; base += kWarpSize) {  // the same trip count on every lane
    const int64_t k = base + lane;
    const bool valid = k < end;
    const int64_t key = valid ? keys_in[k] : 0;
    const int digit = valid ? digit_of(key, shift) : -1;
    const unsigned peers = __match_any_sync(kFullWarpMask, digit);
    const unsigned earlier = peers & lanes_below;
    if (valid) {
      const int64_t pos = next[warp][digit] + __popc(earlier);
      keys_out[pos] = key;
      vals_out[pos] = vals_in[k];
    }
    __syncwarp();  // every lane has read next[] before the first of each digit moves it on
    if (valid && earlier == 0) next[warp][digit] += __popc(peers);
    __syncwarp();
  }
}

// ---- backward: per-row sums in token order ---------------------------------

// The first position in keys[0, n) (sorted ascending) whose key is >= value.
__device__ inline int64_t lower_bound(const int64_t* keys, int64_t n, int64_t value) {
  int64_t lo = 0, hi = n;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (keys[mid] < value) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// One warp per (table row r, chunk of 32 * kVec<T> columns): lane l sums columns
// [chunk * 32 * V + l * V, + V) of grad_out over the row's tokens order[begin, end)
// in that order, and stores them rounded once.
template <class T>
__global__ void __launch_bounds__(kSumThreads)
    row_sum_kernel(const T* __restrict__ grad_out, const int64_t* __restrict__ order,
                   const int64_t* __restrict__ keys, int64_t tokens, int64_t rows, int64_t cols,
                   int64_t col_chunks, T* __restrict__ grad_table) {
  using A = acc_t<T>;
  constexpr int V = kVec<T>;
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int64_t warps_per_block = blockDim.x / kWarpSize;
  const int64_t total = rows * col_chunks;
  const bool aligned_rows = (cols * static_cast<int64_t>(sizeof(T))) % 16 == 0;
  const bool in_aligned = aligned_rows && is_aligned16(grad_out);
  const bool out_aligned = aligned_rows && is_aligned16(grad_table);
  for (int64_t w = static_cast<int64_t>(blockIdx.x) * warps_per_block + threadIdx.x / kWarpSize; w < total;
       w += static_cast<int64_t>(gridDim.x) * warps_per_block) {  // warp-uniform
    const int64_t r = w / col_chunks;
    const int64_t e = (w - r * col_chunks) * (kWarpSize * V) + lane * V;  // the lane's first column
    int64_t bound = 0;
    if (lane < 2) bound = lower_bound(keys, tokens, r + lane);
    const int64_t begin = __shfl_sync(kFullWarpMask, bound, 0);
    const int64_t end = __shfl_sync(kFullWarpMask, bound, 1);
    A acc[V];
#pragma unroll
    for (int k = 0; k < V; ++k) acc[k] = A(0);
    if (e < cols) {
#pragma unroll 4
      for (int64_t i = begin; i < end; ++i) {
        const Vec<T> v = load_vec_checked(grad_out + order[i] * cols, cols, e, in_aligned, convert<T>(A(0)));
#pragma unroll
        for (int k = 0; k < V; ++k) acc[k] += convert<A>(v.get(k));
      }
      Vec<T> o{};
#pragma unroll
      for (int k = 0; k < V; ++k) o.set(k, convert<T>(acc[k]));
      store_vec_checked(grad_table + r * cols, cols, e, out_aligned, o);
    }
  }
}

// Workspace regions: keys and vals twice (ping-pong), then the digit counts.
struct SortBuffers {
  int64_t* keys[2];
  int64_t* vals[2];
  int64_t* counts;
};

int64_t chunks_of(int64_t tokens) { return (tokens + kSortChunk - 1) / kSortChunk; }

SortBuffers carve(void* workspace, int64_t tokens) {
  auto* p = static_cast<char*>(workspace);
  const size_t column = align_up(static_cast<size_t>(tokens) * sizeof(int64_t));
  SortBuffers b{};
  for (int i = 0; i < 2; ++i) {
    b.keys[i] = reinterpret_cast<int64_t*>(p + (2 * i) * column);
    b.vals[i] = reinterpret_cast<int64_t*>(p + (2 * i + 1) * column);
  }
  b.counts = reinterpret_cast<int64_t*>(p + 4 * column);
  return b;
}

}  // namespace

template <class T>
void embedding_forward(const T* table, int64_t cols, const int64_t* indices, int64_t tokens,
                       T* out, cudaStream_t stream) {
  DTR_CUDA_KERNEL_CHECK(cols >= 0 && tokens >= 0,
                        "CUDA embedding_forward: expected cols, tokens >= 0, got cols " +
                            std::to_string(cols) + ", tokens " + std::to_string(tokens));
  if (cols == 0 || tokens == 0) return;
  const int64_t row_bytes = cols * static_cast<int64_t>(sizeof(T));
  const uintptr_t alignment = reinterpret_cast<uintptr_t>(table) | reinterpret_cast<uintptr_t>(out) |
                              static_cast<uintptr_t>(row_bytes);
  if (alignment % 16 == 0) {
    launch_gather<uint4>(table, row_bytes, indices, tokens, out, stream);
  } else if (alignment % 8 == 0) {
    launch_gather<uint2>(table, row_bytes, indices, tokens, out, stream);
  } else if (alignment % 4 == 0) {
    launch_gather<uint32_t>(table, row_bytes, indices, tokens, out, stream);
  } else if (alignment % 2 == 0) {
    launch_gather<uint16_t>(table, row_bytes, indices, tokens, out, stream);
  } else {
    launch_gather<uint8_t>(table, row_bytes, indices, tokens, out, stream);
  }
}

size_t embedding_backward_workspace_bytes(int64_t tokens) {
  if (tokens <= 0) return 0;
  const size_t column = align_up(static_cast<size_t>(tokens) * sizeof(int64_t));
  return 4 * column + align_up(static_cast<size_t>(kDigits * chunks_of(tokens)) * sizeof(int64_t));
}

template <class T>
void embedding_backward(const T* grad_out, const int64_t* indices, int64_t tokens, int64_t rows,
                        int64_t cols, T* grad_table, void* workspace, cudaStream_t stream) {
  DTR_CUDA_KERNEL_CHECK(tokens >= 0 && rows >= 0 && cols >= 0,
                        "CUDA embedding_backward: expected tokens, rows, cols >= 0, got tokens " +
                            std::to_string(tokens) + ", rows " + std::to_string(rows) + ", cols " +
                            std::to_string(cols));
  if (rows == 0 || cols == 0) return;
  DTR_CUDA_KERNEL_CHECK(tokens == 0 || workspace != nullptr,
                        "CUDA embedding_backward: a workspace is needed for " + std::to_string(tokens) +
                            " tokens");
  const int64_t* order = nullptr;
  const int64_t* keys = nullptr;
  if (tokens > 0) {
    const SortBuffers b = carve(workspace, tokens);
    const int64_t chunks = chunks_of(tokens);
    iota_kernel<<<grid_of(std::min<int64_t>((tokens + 255) / 256, 4096)), 256, 0, stream>>>(
        indices, tokens, b.keys[0], b.vals[0]);
    DTR_CUDA_CHECK_LAUNCH();
    // Indices are in [0, rows): only the bits of rows - 1 need sorting.
    const int bits = static_cast<int>(std::bit_width(static_cast<uint64_t>(rows - 1)));
    const unsigned sort_grid = grid_of((chunks + kSortWarps - 1) / kSortWarps);
    int cur = 0;
    for (int shift = 0; shift < bits; shift += kDigitBits) {
      digit_count_kernel<<<sort_grid, kSortWarps * kWarpSize, 0, stream>>>(b.keys[cur], tokens, chunks,
                                                                           shift, b.counts);
      DTR_CUDA_CHECK_LAUNCH();
      exclusive_scan_kernel<<<1, kScanThreads, 0, stream>>>(b.counts, kDigits * chunks);
      DTR_CUDA_CHECK_LAUNCH();
      digit_place_kernel<<<sort_grid, kSortWarps * kWarpSize, 0, stream>>>(
          b.keys[cur], b.vals[cur], tokens, chunks, shift, b.counts, b.keys[1 - cur], b.vals[1 - cur]);
      DTR_CUDA_CHECK_LAUNCH();
      cur = 1 - cur;
    }
    keys = b.keys[cur];
    order = b.vals[cur];
  }
  const int64_t col_chunks = (cols + kWarpSize * kVec<T> - 1) / (kWarpSize * kVec<T>);
  const int64_t warps_per_block = kSumThreads / kWarpSize;
  const int64_t blocks = (rows * col_chunks + warps_per_block - 1) / warps_per_block;
  row_sum_kernel<T><<<grid_of(blocks), kSumThreads, 0, stream>>>(grad_out, order, keys, tokens, rows, cols,
                                                                 col_chunks, grad_table);
  DTR_CUDA_CHECK_LAUNCH();
}

#define DTR_INSTANTIATE_CUDA_EMBEDDING_FORWARD(T) \
  template void embedding_forward<T>(const T*, int64_t, const int64_t*, int64_t, T*, cudaStream_t);
DTR_FOR_EACH_SCALAR(DTR_INSTANTIATE_CUDA_EMBEDDING_FORWARD)

#define DTR_INSTANTIATE_CUDA_EMBEDDING_BACKWARD(T)                                                  \
  template void embedding_backward<T>(const T*, const int64_t*, int64_t, int64_t, int64_t, T*, void*, \
                                      cudaStream_t);
DTR_FOR_EACH_FLOATING(DTR_INSTANTIATE_CUDA_EMBEDDING_BACKWARD)

}  // namespace dtr::kernels::cuda
