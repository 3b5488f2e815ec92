// Internal to the CUDA attention kernels (attention.h): the parameter block, the
// strided row addressing, the causal visibility rule, and the CUDA-core (SIMT) tile configuration and
// shared-memory tile loader that attention_forward.cu and attention_backward.cu share.
#pragma once

#include "dtr/kernels/cuda/attention.h"
#include "dtr/kernels/cuda/acc_math.cuh"
#include "dtr/kernels/cuda/block_reduce.cuh"
#include "dtr/kernels/cuda/cuda_check.h"
#include "dtr/kernels/scalar_types.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>

namespace dtr::kernels::cuda::attention_detail {

// Sizes as the kernels see them (int64 for every index product).
struct Shape {
  int64_t batch, q_heads, kv_heads, q_len, kv_len, head_dim, group;
  bool causal;
};

inline Shape shape_of(const AttentionDims& d) {
  return {d.batch, d.q_heads, d.kv_heads, d.q_len, d.kv_len, d.head_dim,
          d.kv_heads > 0 ? d.q_heads / d.kv_heads : 0, d.causal};
}

// Element offset of row `row` of head `head` of batch `batch` of an operand laid out
// by `st` (int64 throughout: strides of views into large buffers).
__host__ __device__ inline int64_t row_offset(const AttentionStrides& st, int64_t batch, int64_t head,
                                              int64_t row) {
  return batch * st.batch + head * st.head + row * st.row;
}

// Keys query row t may see: s < visible_keys(t).
__host__ __device__ inline int64_t visible_keys(const Shape& s, int64_t t) {
  if (!s.causal) return s.kv_len;
  const int64_t n = t + (s.kv_len - s.q_len) + 1;
  return n < 0 ? 0 : (n > s.kv_len ? s.kv_len : n);
}

// The first query row that sees key `key` (q_len when none does).
__host__ __device__ inline int64_t first_row_seeing(const Shape& s, int64_t key) {
  if (!s.causal) return 0;
  const int64_t t = key - (s.kv_len - s.q_len);
  return t < 0 ? 0 : (t > s.q_len ? s.q_len : t);
}

// ---------------------------------------------------------------------------------
// CUDA-core tiles. A block is 256 threads seen as 16 x 16: ty = tid / 16, tx = tid % 16
// (the 16 threads of one ty are one half-warp). Tiles of Q, K, V, dO sit in shared
// memory in acc type A, row-major [rows][kLd] with the head dim zero-padded to kDp.
//  - score tiles (Br x Bc): thread (ty, tx) owns rows ty + 16 i (i < RM) and columns
//    tx + 16 j (j < CN); its dot products read 16-byte vectors along the head dim
//    (kLd / kV is odd, so the 8 lanes of one 16-byte access phase hit distinct banks).
//  - head-dim tiles (rows x kDp): thread (ty, tx) owns rows ty + 16 i and head-dim
//    columns tx * kV + 16 kV m + e (m < kDT / kV, e < kV): one 16-byte vector per m.
template <class A, int kRM, int kCN, int kDT>
struct SimtConfig {
  static constexpr int kThreads = 256;
  static constexpr int kRows = kRM, kCols = kCN, kDims = kDT;
  static constexpr int kBr = 16 * kRM;          // query rows per tile
  static constexpr int kBc = 16 * kCN;          // keys per tile
  static constexpr int kV = 16 / sizeof(A);     // A elements per 16-byte vector
  static constexpr int kDp = 16 * kDT;          // padded head dim
  static constexpr int kLd = kDp + kV;          // row stride of Q/K/V/dO tiles
  static constexpr int kPd = kBc + 16;          // row stride of P/dS tiles
  static constexpr int kDV = kDT / kV;          // head-dim vectors per thread
  static_assert(kDT % kV == 0, "a thread's head-dim columns are whole vectors");
  static_assert((kLd / kV) % 2 == 1, "odd row stride in vectors: conflict-free vector reads");
};

// A 16-byte vector of A values in shared memory.
template <class A>
struct alignas(16) SVec {
  A v[16 / sizeof(A)];
};

template <class A>
__device__ inline SVec<A> lds(const A* p) {
  return *reinterpret_cast<const SVec<A>*>(p);
}

// Fills tile[r][d] (r < kRows, d < kDp, row stride kLd) with rows of D elements
// starting at `src`, `ld` elements apart: rows r < valid_rows and d < D get
// src[r * ld + d] converted to A, everything else 0. 16-byte vector loads when every
// row starts 16-byte aligned, element loads otherwise. All threads of the block take
// part; the caller synchronizes.
template <class T, int kRows, int kDp, int kLd, int kThreads>
__device__ inline void load_tile(acc_t<T>* tile, const T* src, int64_t ld, int64_t valid_rows, int D) {
  using A = acc_t<T>;
  constexpr int V = kVec<T>;  // T elements per 16-byte global load
  const int tid = static_cast<int>(threadIdx.x);
  if (D % V == 0 && ld % V == 0 && is_aligned16(src)) {
    constexpr int kSlots = kDp / V;  // vectors per tile row
    static_assert(kDp % V == 0, "whole vectors per padded row");
    for (int i = tid; i < kRows * kSlots; i += kThreads) {
      const int r = i / kSlots, d0 = (i % kSlots) * V;
      A* dst = tile + r * kLd + d0;
      if (r < valid_rows && d0 < D) {
        const Vec<T> x = load_vec(src + r * ld + d0);
#pragma unroll
        for (int e = 0; e < V; ++e) dst[e] = convert<A>(x.get(e));
      } else {
#pragma unroll
        for (int e = 0; e < V; ++e) dst[e] = A(0);
      }
    }
  } else {
    for (int i = tid; i < kRows * kDp; i += kThreads) {
      const int r = i / kDp, d = i % kDp;
      tile[r * kLd + d] = (r < valid_rows && d < D) ? convert<A>(src[r * ld + d]) : A(0);
    }
  }
}

// Reduction over the 16 threads of a half-warp (the tx of one ty), fixed order.
template <class A, class Combine>
__device__ inline A half_warp_allreduce(A value, const Combine& combine) {
#pragma unroll
  for (int mask = 8; mask > 0; mask /= 2) value = combine(value, shfl_xor(value, mask));
  return value;
}

// The most dynamic shared memory one block of the current device may use.
inline int max_dynamic_smem() {
  int device = 0, bytes = 0;
  DTR_CUDA_CHECK(cudaGetDevice(&device));
  DTR_CUDA_CHECK(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  return bytes;
}

// Lets `kernel` use `bytes` of dynamic shared memory, or throws when the device has less.
template <class Kernel>
void allow_smem(Kernel kernel, size_t bytes, const char* what) {
  const int available = max_dynamic_smem();
  DTR_CUDA_KERNEL_CHECK(bytes <= static_cast<size_t>(available),
                        std::string("CUDA attention: ") + what + " needs " + std::to_string(bytes) +
                            " bytes of shared memory per block, the device allows " +
                            std::to_string(available));
  if (bytes > 48 * 1024) {
    DTR_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  }
}

inline unsigned grid_size(int64_t blocks, const char* what) {
  DTR_CUDA_KERNEL_CHECK(blocks <= std::numeric_limits<int32_t>::max(),
                        std::string("CUDA attention: too many blocks for ") + what + ": " +
                            std::to_string(blocks));
  return static_cast<unsigned>(blocks);
}

__host__ __device__ inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Checks dims the way the op layer does (it reports these first, with shapes).
inline void check_dims(const AttentionDims& d, const char* what) {
  DTR_CUDA_KERNEL_CHECK(d.batch >= 0 && d.q_heads >= 0 && d.kv_heads > 0 && d.q_len >= 0 &&
                            d.kv_len >= 0 && d.head_dim >= 0,
                        std::string("CUDA attention ") + what + ": expected sizes >= 0 and kv_heads > 0");
  DTR_CUDA_KERNEL_CHECK(d.q_heads % d.kv_heads == 0,
                        std::string("CUDA attention ") + what + ": q_heads " + std::to_string(d.q_heads) +
                            " is not a multiple of kv_heads " + std::to_string(d.kv_heads));
  DTR_CUDA_KERNEL_CHECK(d.head_dim <= kAttentionMaxHeadDim,
                        std::string("CUDA attention ") + what + ": head_dim " +
                            std::to_string(d.head_dim) + " is over the supported " +
                            std::to_string(kAttentionMaxHeadDim));
}

// Which SIMT head-dim bucket D falls in: kDT = 4, 8 or 16 (D <= 64, 128, 256).
inline int simt_dims_bucket(int64_t D) { return D <= 64 ? 4 : D <= 128 ? 8 : 16; }

// Set by the launchers (attention_forward.cu owns the storage).
void set_last_path(AttentionPath path);
bool tensor_cores_enabled();

}  // namespace dtr::kernels::cuda::attention_detail
