// Building blocks shared by the CUDA row kernels (reduce, softmax, norms, cross-entropy):
// 16-byte vectors of row elements, and warp / block all-reductions whose
// combination order is fixed (so results are bitwise reproducible).
//
// Vectors: a row is read as vectors of kVec<T> = 16 / sizeof(T) elements, vector
// i holding elements [i * kVec, (i + 1) * kVec). Thread t of a group of n takes
// vectors t, t + n, t + 2n, ... in that order. Where the row start is 16-byte
// aligned a vector is one 16-byte load. Otherwise load_vec_checked reads kVec
// element loads, and load_vec_spanning (for kernels whose rows mostly start
// unaligned, like cross-entropy over a 50257-word vocabulary) the two aligned
// 16-byte chunks that hold the vector, shifted into place (dtr/kernels/byte_window.h),
// but for the row's last one or two vectors; elements past the row's end read as a
// fill value.
// Either way a thread sees the same elements in the same order, so results do not
// depend on alignment.
#pragma once

#include "dtr/kernels/byte_window.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

namespace dtr::kernels::cuda {

inline constexpr unsigned kFullWarpMask = 0xffffffffu;
inline constexpr int kWarpSize = 32;

template <class T>
inline constexpr int kVec = 16 / static_cast<int>(sizeof(T));

template <class To, class From>
__device__ inline To bits_as(From from) {
  static_assert(sizeof(To) == sizeof(From), "bits_as keeps the size");
  To to;
  memcpy(&to, &from, sizeof(To));
  return to;
}

// kVec<T> elements as four raw 32-bit words, so that 1- and 2-byte elements
// stay packed in registers. get(k) / set(k) take compile-time k (unrolled loops).
template <class T>
struct alignas(16) Vec {
  uint32_t w[4];

  __device__ T get(int k) const {
    if constexpr (sizeof(T) == 8) {
      return bits_as<T>(uint64_t{w[2 * k]} | (uint64_t{w[2 * k + 1]} << 32));
    } else if constexpr (sizeof(T) == 4) {
      return bits_as<T>(w[k]);
    } else if constexpr (sizeof(T) == 2) {
      return bits_as<T>(static_cast<uint16_t>(w[k / 2] >> (16 * (k % 2))));
    } else {
      return bits_as<T>(static_cast<uint8_t>(w[k / 4] >> (8 * (k % 4))));
    }
  }

  __device__ void set(int k, T value) {
    if constexpr (sizeof(T) == 8) {
      const auto b = bits_as<uint64_t>(value);
      w[2 * k] = static_cast<uint32_t>(b);
      w[2 * k + 1] = static_cast<uint32_t>(b >> 32);
    } else if constexpr (sizeof(T) == 4) {
      w[k] = bits_as<uint32_t>(value);
    } else if constexpr (sizeof(T) == 2) {
      const int shift = 16 * (k % 2);
      w[k / 2] = (w[k / 2] & ~(0xffffu << shift)) | (uint32_t{bits_as<uint16_t>(value)} << shift);
    } else {
      const int shift = 8 * (k % 4);
      w[k / 4] = (w[k / 4] & ~(0xffu << shift)) | (uint32_t{bits_as<uint8_t>(value)} << shift);
    }
  }
};

__host__ __device__ inline bool is_aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}

// One full vector from a 16-byte aligned address, read through the read-only cache.
template <class T>
__device__ inline Vec<T> load_vec(const T* p) {
  const uint4 raw = __ldg(reinterpret_cast<const uint4*>(p));
  return Vec<T>{{raw.x, raw.y, raw.z, raw.w}};
}

// The vector starting at element e of a row of `cols` elements; elements past
// the end read as `fill`. `aligned` says whether the row start is 16-byte aligned.
template <class T>
__device__ inline Vec<T> load_vec_checked(const T* row, int64_t cols, int64_t e, bool aligned,
                                          T fill) {
  if (aligned && e + kVec<T> <= cols) return load_vec(row + e);
  Vec<T> v{};
#pragma unroll
  for (int k = 0; k < kVec<T>; ++k) v.set(k, e + k < cols ? row[e + k] : fill);
  return v;
}

// load_vec_checked's result, where the row is unaligned, from the two 16-byte aligned
// chunks that hold the vector (two loads instead of kVec), cut with byte_window16.
// Only while both chunks end inside the row: its last one or two vectors take element
// loads, so no byte past the row is read (memcheck checks exact allocation sizes under
// DTR_CUDA_NO_CACHING). The first chunk of a row starts before it, in the row before
// or, for the first row, in the same allocation (allocations start 16-byte aligned).
// It takes more registers than load_vec_checked (the norm kernels that cache rows in
// registers spilled with it), so it is for the kernels whose rows are mostly unaligned.
// 8-byte elements keep the element loads: two of them, as many as the chunks.
template <class T>
__device__ inline Vec<T> load_vec_spanning(const T* row, int64_t cols, int64_t e, bool aligned, T fill) {
  if (sizeof(T) < 8 && !aligned) {
    const auto addr = reinterpret_cast<uintptr_t>(row + e);
    const uintptr_t chunk = addr & ~uintptr_t{15};
    if (chunk + 32 <= reinterpret_cast<uintptr_t>(row + cols)) {
      const uint4 a = __ldg(reinterpret_cast<const uint4*>(chunk));
      const uint4 b = __ldg(reinterpret_cast<const uint4*>(chunk) + 1);
      const uint32_t lo[4] = {a.x, a.y, a.z, a.w}, hi[4] = {b.x, b.y, b.z, b.w};
      Vec<T> v;
      kernels::byte_window16(lo, hi, static_cast<unsigned>(addr - chunk), v.w);
      return v;
    }
  }
  return load_vec_checked(row, cols, e, aligned, fill);
}

// Stores the vector at element e of a row, dropping elements past the end.
template <class T>
__device__ inline void store_vec_checked(T* row, int64_t cols, int64_t e, bool aligned,
                                         const Vec<T>& v) {
  if (aligned && e + kVec<T> <= cols) {
    *reinterpret_cast<uint4*>(row + e) = make_uint4(v.w[0], v.w[1], v.w[2], v.w[3]);
    return;
  }
#pragma unroll
  for (int k = 0; k < kVec<T>; ++k) {
    if (e + k < cols) row[e + k] = v.get(k);
  }
}

// __shfl_xor_sync for any trivially copyable value whose size is a multiple of 4 bytes.
template <class A>
__device__ inline A shfl_xor(const A& value, int lane_mask) {
  static_assert(sizeof(A) % 4 == 0, "shuffled values are made of 32-bit words");
  constexpr int kWords = sizeof(A) / 4;
  unsigned words[kWords];
  memcpy(words, &value, sizeof(A));
#pragma unroll
  for (int w = 0; w < kWords; ++w) words[w] = __shfl_xor_sync(kFullWarpMask, words[w], lane_mask);
  A out;
  memcpy(&out, words, sizeof(A));
  return out;
}

// Butterfly all-reduction within each aligned group of kLanes lanes of a warp (kLanes
// a power of two up to 32): every lane gets combine() of its group's values. All 32
// lanes must call it. For a commutative combine (a + b, NaN-propagating max) all lanes
// of a group hold the same bits.
template <int kLanes, class A, class Combine>
__device__ inline A lanes_allreduce(A value, const Combine& combine) {
  static_assert(kLanes > 0 && kLanes <= kWarpSize && (kLanes & (kLanes - 1)) == 0, "lanes: 1, 2, 4, ... 32");
#pragma unroll
  for (int mask = kLanes / 2; mask > 0; mask /= 2) value = combine(value, shfl_xor(value, mask));
  return value;
}

// The all-reduction over a full warp.
template <class A, class Combine>
__device__ inline A warp_allreduce(A value, const Combine& combine) {
  return lanes_allreduce<kWarpSize>(value, combine);
}

// All-reduction over a block whose size is a multiple of 32: each warp reduces,
// then every thread folds the per-warp results in warp order. Safe to call
// repeatedly (it synchronizes before reusing its shared memory).
template <class A, class Combine>
__device__ inline A block_allreduce(A value, const Combine& combine) {
  __shared__ A per_warp[kWarpSize];
  value = warp_allreduce(value, combine);
  const int warp = static_cast<int>(threadIdx.x) / kWarpSize;
  const int warps = static_cast<int>(blockDim.x) / kWarpSize;
  __syncthreads();  // an earlier call's readers are done with per_warp
  if (threadIdx.x % kWarpSize == 0) per_warp[warp] = value;
  __syncthreads();
  A total = per_warp[0];
  for (int w = 1; w < warps; ++w) total = combine(total, per_warp[w]);
  return total;
}

// All-reduction over a group of threads working on one row: a warp or the whole block.
template <bool kWarpGroup, class A, class Combine>
__device__ inline A group_allreduce(A value, const Combine& combine) {
  if constexpr (kWarpGroup) {
    return warp_allreduce(value, combine);
  } else {
    return block_allreduce(value, combine);
  }
}

}  // namespace dtr::kernels::cuda
