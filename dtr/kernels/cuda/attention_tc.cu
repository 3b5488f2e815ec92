// Tensor-core attention kernels (see attention_tc.h): FlashAttention-2 on
// mma.sync.m16n8k16 with f32 accumulators, for bf16/f16 and head_dim 64 or 128.
//
// Common scheme. Blocks of 4 warps (128 threads). Tiles of Q, K, V, dO live in shared
// memory as stored (rows of D 16-bit elements, padded to D + 8 so that the 8 rows an
// ldmatrix reads fall in 8 different 16-byte bank groups), filled by 16-byte cp.async
// copies (rows past the end are zero-filled), double-buffered along the loop. With
// g = lane / 4 and c = lane % 4, an mma's f32 accumulator holds (row g, cols 2c, 2c+1)
// and (row g + 8, cols 2c, 2c+1); two adjacent n8 accumulators, rounded to T and
// packed in pairs, are the A operand of the next product over those 16 columns (no
// trip through shared memory). B operands come from ldmatrix: non-transposed when the
// tile's rows are the product's n index (K for Q.K^T), transposed when they are its k
// index (V for P.V).
//  - forward: one block per (batch, head, 64 query rows), 16 rows per warp, Q fragments
//    in registers; loop over key tiles of 64: S = Q.K^T, masked, online softmax in the
//    exp2 domain (per-row max shared across the 4 lanes of a row, partial sums kept
//    per lane and added at the end), O += P.V.
//  - dk, dv: one block per (batch, kv head, 64 keys), 16 keys per warp; loop over the
//    query tiles of 32 rows of every head in the group that see any of the keys:
//    S^T = K.Q^T and dP^T = V.dO^T, P^T = exp2(S^T scale log2e - lse log2e) (masked),
//    dS^T = P^T (dP^T - delta), dv += P^T.dO, dk += dS^T.Q.
//  - dq: one block per (batch, head, 64 query rows), Q and dO fragments in registers;
//    loop over key tiles of 32: S, dP, P, dS as above, dq += dS.K.
// Query blocks that see more keys (the later ones, when causal) are launched first.
#include "dtr/kernels/cuda/attention_tc.h"

#include "dtr/kernels/cuda/attention_common.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace dtr::kernels::cuda::attention_detail {

namespace {

constexpr int kTcThreads = 128;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

template <class T>
struct TcOps;
template <>
struct TcOps<bf16> {
  __device__ static uint32_t pack(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return bits_as<uint32_t>(v);
  }
  __device__ static void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};
template <>
struct TcOps<f16> {
  __device__ static uint32_t pack(float lo, float hi) {
    const __half2 v = __floats2half2_rn(lo, hi);
    return bits_as<uint32_t>(v);
  }
  __device__ static void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

__device__ inline uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte global -> shared copy; valid == false writes 16 zero bytes (reads nothing).
__device__ inline void cp_async16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
               "r"(valid ? 16 : 0)
               : "memory");
}
__device__ inline void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ inline void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ inline void ldmatrix_x4(uint32_t (&r)[4], const uint16_t* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p))
               : "memory");
}
__device__ inline void ldmatrix_x4_trans(uint32_t (&r)[4], const uint16_t* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p))
               : "memory");
}

// Lane offsets (row, column) of the ldmatrix.x4 reads; `p` is the tile's element (0, 0)
// of the 16 x 16 block read, rows `ld` elements apart.
// A operand (rows = m, columns = k): registers a0..a3 in mma order.
__device__ inline const uint16_t* a_addr(const uint16_t* p, int ld, int lane) {
  return p + (lane % 16) * ld + (lane / 16) * 8;
}
// B operand from a tile whose rows are n (16 of them: two n8 tiles) and columns k:
// registers {0, 1} are (b0, b1) of the first n8 tile, {2, 3} of the second.
__device__ inline const uint16_t* b_addr(const uint16_t* p, int ld, int lane) {
  return p + ((lane / 16) * 8 + lane % 8) * ld + ((lane / 8) % 2) * 8;
}
// B operand (transposed load) from a tile whose rows are k (16) and columns n (16: two
// n8 tiles): registers {0, 1} are (b0, b1) of the first n8 tile, {2, 3} of the second.
__device__ inline const uint16_t* bt_addr(const uint16_t* p, int ld, int lane) {
  return p + (lane % 8 + ((lane / 8) % 2) * 8) * ld + (lane / 16) * 8;
}

// Copies rows [0, kRows) x [0, kD) of a matrix at `src` with rows `ld` elements apart
// (16-byte aligned, as tc_layout_ok checks) into a tile with row stride kLd; rows >=
// valid become zeros. All threads take part; the caller commits and waits.
template <int kRows, int kD, int kLd>
__device__ inline void tile_async(uint16_t* tile, const uint16_t* src, int64_t ld, int64_t valid) {
  constexpr int kChunks = kD / 8;  // 16-byte chunks per row
  for (int i = static_cast<int>(threadIdx.x); i < kRows * kChunks; i += kTcThreads) {
    const int r = i / kChunks, ch = i % kChunks;
    const bool ok = r < valid;
    cp_async16(tile + r * kLd + ch * 8, ok ? src + r * ld + ch * 8 : src, ok);
  }
}

// Reduction across the 4 lanes (c = 0..3) that share a row of an accumulator.
__device__ inline float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(kFullWarpMask, x, 1));
  return fmaxf(x, __shfl_xor_sync(kFullWarpMask, x, 2));
}
__device__ inline float quad_sum(float x) {
  x += __shfl_xor_sync(kFullWarpMask, x, 1);
  return x + __shfl_xor_sync(kFullWarpMask, x, 2);
}

struct TcForwardParams {
  const uint16_t* q;
  const uint16_t* k;
  const uint16_t* v;
  uint16_t* out;
  float* lse;
  Shape s;
  AttentionForwardStrides st;
  float scale_log2;  // scale * log2(e)
};

struct TcBackwardParams {
  const uint16_t* q;
  const uint16_t* k;
  const uint16_t* v;
  const float* lse;
  const uint16_t* dout;
  const float* delta;
  uint16_t* dq;
  uint16_t* dk;
  uint16_t* dv;
  Shape s;
  AttentionBackwardStrides st;
  float scale;
  float scale_log2;
};

// Stores a 16 x D accumulator tile (rows row0, row0 + 8 of the lane, `ld` elements
// apart; n8 tiles of D) times `mul` (per row) as T pairs; rows >= limit are skipped.
template <class T, int kND>
__device__ inline void store_rows(uint16_t* base, int64_t row0, int64_t limit, int64_t ld,
                                  const float (&acc)[kND][4], float mul0, float mul1, int c) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int64_t row = row0 + 8 * half;
    if (row >= limit) continue;
    const float mul = half == 0 ? mul0 : mul1;
    uint16_t* dst = base + row * ld + 2 * c;
#pragma unroll
    for (int nd = 0; nd < kND; ++nd) {
      *reinterpret_cast<uint32_t*>(dst + nd * 8) =
          TcOps<T>::pack(acc[nd][2 * half] * mul, acc[nd][2 * half + 1] * mul);
    }
  }
}

// ---------------------------------------------------------------------------------
// Forward

template <class T, int kD>
__global__ void __launch_bounds__(kTcThreads) attention_forward_tc(const TcForwardParams p) {
  constexpr int Br = 64, Bc = 64, Ld = kD + 8;
  constexpr int KD = kD / 16;  // k16 steps over the head dim
  constexpr int NT = Bc / 8;   // n8 tiles of a score tile
  constexpr int ND = kD / 8;   // n8 tiles of the output
  extern __shared__ uint4 smem_raw[];
  uint16_t* const Qs = reinterpret_cast<uint16_t*>(smem_raw);  // [Br][Ld]
  uint16_t* const Ks = Qs + Br * Ld;                           // [2][Bc][Ld]
  uint16_t* const Vs = Ks + 2 * Bc * Ld;                       // [2][Bc][Ld]

  const Shape& s = p.s;
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32, g = lane / 4, c = lane % 4;
  // Blocks with the most keys to see (the last query blocks, when causal) go first.
  const int64_t heads = s.batch * s.q_heads;
  const int64_t bh = blockIdx.x % heads;
  const int64_t qb = ceil_div(s.q_len, Br) - 1 - static_cast<int64_t>(blockIdx.x / heads);
  const int64_t t0 = qb * Br;
  const int64_t b = bh / s.q_heads, h = bh % s.q_heads, kvh = h / s.group;
  const uint16_t* const kg = p.k + row_offset(p.st.k, b, kvh, 0);
  const uint16_t* const vg = p.v + row_offset(p.st.v, b, kvh, 0);
  const int64_t keys = visible_keys(s, min(t0 + Br, s.q_len) - 1);
  const int64_t tiles = ceil_div(keys, Bc);

  const int64_t row0 = t0 + warp * 16 + g, row1 = row0 + 8;
  const int64_t vis0 = row0 < s.q_len ? visible_keys(s, row0) : 0;
  const int64_t vis1 = row1 < s.q_len ? visible_keys(s, row1) : 0;
  const int64_t vis_first = visible_keys(s, t0);

  float m0 = neg_inf<float>(), m1 = neg_inf<float>(), l0 = 0.f, l1 = 0.f;  // per row, exp2 domain
  float o[ND][4];
#pragma unroll
  for (int nd = 0; nd < ND; ++nd) o[nd][0] = o[nd][1] = o[nd][2] = o[nd][3] = 0.f;
  uint32_t qf[KD][4];

  if (tiles > 0) {
    tile_async<Br, kD, Ld>(Qs, p.q + row_offset(p.st.q, b, h, t0), p.st.q.row, s.q_len - t0);
    tile_async<Bc, kD, Ld>(Ks, kg, p.st.k.row, s.kv_len);
    tile_async<Bc, kD, Ld>(Vs, vg, p.st.v.row, s.kv_len);
    cp_async_commit();
  }
  for (int64_t j = 0; j < tiles; ++j) {
    if (j + 1 < tiles) {
      const int64_t next = (j + 1) * Bc;
      const int buf = static_cast<int>((j + 1) & 1);
      tile_async<Bc, kD, Ld>(Ks + buf * Bc * Ld, kg + next * p.st.k.row, p.st.k.row, s.kv_len - next);
      tile_async<Bc, kD, Ld>(Vs + buf * Bc * Ld, vg + next * p.st.v.row, p.st.v.row, s.kv_len - next);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();  // tile j (and Q) landed for every thread
    if (j == 0) {
#pragma unroll
      for (int kk = 0; kk < KD; ++kk) ldmatrix_x4(qf[kk], a_addr(Qs + warp * 16 * Ld + kk * 16, Ld, lane));
    }
    const uint16_t* const Kb = Ks + static_cast<int>(j & 1) * Bc * Ld;
    const uint16_t* const Vb = Vs + static_cast<int>(j & 1) * Bc * Ld;

    float sc[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) sc[nt][0] = sc[nt][1] = sc[nt][2] = sc[nt][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < KD; ++kk) {
#pragma unroll
      for (int np = 0; np < NT / 2; ++np) {
        uint32_t bk[4];
        ldmatrix_x4(bk, b_addr(Kb + np * 16 * Ld + kk * 16, Ld, lane));
        TcOps<T>::mma(sc[2 * np], qf[kk], bk[0], bk[1]);
        TcOps<T>::mma(sc[2 * np + 1], qf[kk], bk[2], bk[3]);
      }
    }

    // Mask, scale to the exp2 domain, new row maxima. A tile whose keys the block's
    // first row sees entirely is seen entirely by every later row: no mask needed (rows
    // past the end then get finite garbage that is never stored).
    const int64_t s0 = j * Bc;
    if (s0 + Bc <= vis_first) {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) sc[nt][e] *= p.scale_log2;
      }
    } else {
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int64_t key = s0 + nt * 8 + 2 * c + (e & 1);
          const bool ok = key < (e < 2 ? vis0 : vis1);
          sc[nt][e] = ok ? sc[nt][e] * p.scale_log2 : neg_inf<float>();
        }
      }
    }
    float mx0 = neg_inf<float>(), mx1 = neg_inf<float>();
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      mx0 = fmaxf(mx0, fmaxf(sc[nt][0], sc[nt][1]));
      mx1 = fmaxf(mx1, fmaxf(sc[nt][2], sc[nt][3]));
    }
    const float new0 = fmaxf(m0, quad_max(mx0)), new1 = fmaxf(m1, quad_max(mx1));
    // A row that has seen no key yet keeps max -inf: subtract 0 then (all its terms are 0).
    const float base0 = new0 == neg_inf<float>() ? 0.f : new0, base1 = new1 == neg_inf<float>() ? 0.f : new1;
    const float alpha0 = exp2f(m0 - base0), alpha1 = exp2f(m1 - base1);
    m0 = new0;
    m1 = new1;
    l0 *= alpha0;
    l1 *= alpha1;
#pragma unroll
    for (int nd = 0; nd < ND; ++nd) {
      o[nd][0] *= alpha0;
      o[nd][1] *= alpha0;
      o[nd][2] *= alpha1;
      o[nd][3] *= alpha1;
    }
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      sc[nt][0] = exp2f(sc[nt][0] - base0);
      sc[nt][1] = exp2f(sc[nt][1] - base0);
      sc[nt][2] = exp2f(sc[nt][2] - base1);
      sc[nt][3] = exp2f(sc[nt][3] - base1);
      l0 += sc[nt][0] + sc[nt][1];
      l1 += sc[nt][2] + sc[nt][3];
    }

    // O += P V, P rounded to T as the A operand.
#pragma unroll
    for (int kk = 0; kk < Bc / 16; ++kk) {
      const uint32_t a[4] = {TcOps<T>::pack(sc[2 * kk][0], sc[2 * kk][1]), TcOps<T>::pack(sc[2 * kk][2], sc[2 * kk][3]),
                             TcOps<T>::pack(sc[2 * kk + 1][0], sc[2 * kk + 1][1]),
                             TcOps<T>::pack(sc[2 * kk + 1][2], sc[2 * kk + 1][3])};
#pragma unroll
      for (int dp = 0; dp < ND / 2; ++dp) {
        uint32_t bv[4];
        ldmatrix_x4_trans(bv, bt_addr(Vb + kk * 16 * Ld + dp * 16, Ld, lane));
        TcOps<T>::mma(o[2 * dp], a, bv[0], bv[1]);
        TcOps<T>::mma(o[2 * dp + 1], a, bv[2], bv[3]);
      }
    }
    __syncthreads();  // every warp is done with buffer j & 1 before it is refilled
  }

  l0 = quad_sum(l0);
  l1 = quad_sum(l1);
  const float inv0 = l0 > 0.f ? 1.f / l0 : 0.f, inv1 = l1 > 0.f ? 1.f / l1 : 0.f;  // no key: 0
  store_rows<T, ND>(p.out + row_offset(p.st.out, b, h, 0), row0, s.q_len, p.st.out.row, o, inv0, inv1, c);
  if (c == 0) {
    if (row0 < s.q_len) p.lse[bh * s.q_len + row0] = l0 > 0.f ? (m0 + log2f(l0)) * kLn2 : neg_inf<float>();
    if (row1 < s.q_len) p.lse[bh * s.q_len + row1] = l1 > 0.f ? (m1 + log2f(l1)) * kLn2 : neg_inf<float>();
  }
}

// ---------------------------------------------------------------------------------
// Backward: dk and dv

// For head_dim 64, three blocks per SM: at <= 168 registers their 12 warps fit one
// register file (ptxas otherwise takes 171 on sm_90 for the strided addressing, which
// leaves room for two).
template <class T, int kD>
__global__ void __launch_bounds__(kTcThreads, kD == 64 ? 3 : 1) attention_dkdv_tc(const TcBackwardParams p) {
  constexpr int Bc = 64, Br = 32, Ld = kD + 8;
  constexpr int KD = kD / 16;
  constexpr int NT = Br / 8;  // n8 tiles (queries) of an S^T tile
  constexpr int ND = kD / 8;
  extern __shared__ uint4 smem_raw[];
  uint16_t* const Ks = reinterpret_cast<uint16_t*>(smem_raw);  // [Bc][Ld]
  uint16_t* const Vs = Ks + Bc * Ld;                           // [Bc][Ld]
  uint16_t* const Qs = Vs + Bc * Ld;                           // [2][Br][Ld]
  uint16_t* const dOs = Qs + 2 * Br * Ld;                      // [2][Br][Ld]
  float* const lse_s = reinterpret_cast<float*>(dOs + 2 * Br * Ld);  // [2][Br], exp2 domain
  float* const delta_s = lse_s + 2 * Br;                             // [2][Br]

  const Shape& s = p.s;
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32, g = lane / 4, c = lane % 4;
  const int64_t k_blocks = ceil_div(s.kv_len, Bc);
  const int64_t kv_index = blockIdx.x / k_blocks;
  const int64_t s0 = static_cast<int64_t>(blockIdx.x % k_blocks) * Bc;
  const int64_t b = kv_index / s.kv_heads, kvh = kv_index % s.kv_heads;
  const int64_t first_block = first_row_seeing(s, s0) / Br;
  const int64_t q_blocks = ceil_div(s.q_len, Br);
  const int64_t per_head = q_blocks > first_block ? q_blocks - first_block : 0;
  const int64_t tiles = per_head * s.group;

  // The query tile i: head kvh * group + i / per_head, rows from (first_block + i % per_head) * Br.
  auto issue = [&](int64_t i) {
    const int64_t h = kvh * s.group + i / per_head, bh = b * s.q_heads + h;
    const int64_t t0 = (first_block + i % per_head) * Br;
    const int buf = static_cast<int>(i & 1);
    tile_async<Br, kD, Ld>(Qs + buf * Br * Ld, p.q + row_offset(p.st.q, b, h, t0), p.st.q.row, s.q_len - t0);
    tile_async<Br, kD, Ld>(dOs + buf * Br * Ld, p.dout + row_offset(p.st.dout, b, h, t0), p.st.dout.row,
                           s.q_len - t0);
    if (tid < Br) {
      const int64_t t = t0 + tid;
      lse_s[buf * Br + tid] = t < s.q_len ? p.lse[bh * s.q_len + t] * kLog2e : 0.f;
      delta_s[buf * Br + tid] = t < s.q_len ? p.delta[bh * s.q_len + t] : 0.f;
    }
  };

  float dk[ND][4], dv[ND][4];
#pragma unroll
  for (int nd = 0; nd < ND; ++nd) {
#pragma unroll
    for (int e = 0; e < 4; ++e) dk[nd][e] = dv[nd][e] = 0.f;
  }
  const int64_t key0 = s0 + warp * 16 + g, key1 = key0 + 8;  // this lane's accumulator rows

  if (tiles > 0) {
    tile_async<Bc, kD, Ld>(Ks, p.k + row_offset(p.st.k, b, kvh, s0), p.st.k.row, s.kv_len - s0);
    tile_async<Bc, kD, Ld>(Vs, p.v + row_offset(p.st.v, b, kvh, s0), p.st.v.row, s.kv_len - s0);
    issue(0);
    cp_async_commit();
  }
  for (int64_t i = 0; i < tiles; ++i) {
    if (i + 1 < tiles) {
      issue(i + 1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();  // tile i (and K, V) landed, lse / delta of tile i written
    const int buf = static_cast<int>(i & 1);
    const uint16_t* const Qb = Qs + buf * Br * Ld;
    const uint16_t* const dOb = dOs + buf * Br * Ld;
    const float* const lse_b = lse_s + buf * Br;
    const float* const delta_b = delta_s + buf * Br;
    const int64_t t0 = (first_block + i % per_head) * Br;

    // S^T = K Q^T and dP^T = V dO^T for this warp's 16 keys x Br queries.
    float st[NT][4], dpt[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) st[nt][e] = dpt[nt][e] = 0.f;
    }
#pragma unroll
    for (int kk = 0; kk < KD; ++kk) {
      uint32_t ka[4], va[4];
      ldmatrix_x4(ka, a_addr(Ks + warp * 16 * Ld + kk * 16, Ld, lane));
      ldmatrix_x4(va, a_addr(Vs + warp * 16 * Ld + kk * 16, Ld, lane));
#pragma unroll
      for (int np = 0; np < NT / 2; ++np) {
        uint32_t bq[4], bd[4];
        ldmatrix_x4(bq, b_addr(Qb + np * 16 * Ld + kk * 16, Ld, lane));
        ldmatrix_x4(bd, b_addr(dOb + np * 16 * Ld + kk * 16, Ld, lane));
        TcOps<T>::mma(st[2 * np], ka, bq[0], bq[1]);
        TcOps<T>::mma(st[2 * np + 1], ka, bq[2], bq[3]);
        TcOps<T>::mma(dpt[2 * np], va, bd[0], bd[1]);
        TcOps<T>::mma(dpt[2 * np + 1], va, bd[2], bd[3]);
      }
    }
    // P^T (into st) and dS^T (into dpt): element (key0 or key1, query t0 + nt * 8 + 2c + (e & 1)).
    // When every query of the tile exists and its first one sees all the block's keys,
    // nothing is masked.
    const bool full = t0 + Br <= s.q_len && s0 + Bc <= visible_keys(s, t0);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = nt * 8 + 2 * c + (e & 1);
        const int64_t t = t0 + col;
        const int64_t key = e < 2 ? key0 : key1;
        const bool ok = full || (t < s.q_len && key < visible_keys(s, t));
        const float prob = ok ? exp2f(st[nt][e] * p.scale_log2 - lse_b[col]) : 0.f;
        st[nt][e] = prob;
        dpt[nt][e] = prob * (dpt[nt][e] - delta_b[col]);
      }
    }
    // dv += P^T dO, dk += dS^T Q over the tile's queries (k16 steps of two n8 tiles).
#pragma unroll
    for (int kk = 0; kk < Br / 16; ++kk) {
      const uint32_t ap[4] = {TcOps<T>::pack(st[2 * kk][0], st[2 * kk][1]), TcOps<T>::pack(st[2 * kk][2], st[2 * kk][3]),
                              TcOps<T>::pack(st[2 * kk + 1][0], st[2 * kk + 1][1]),
                              TcOps<T>::pack(st[2 * kk + 1][2], st[2 * kk + 1][3])};
      const uint32_t as[4] = {TcOps<T>::pack(dpt[2 * kk][0], dpt[2 * kk][1]),
                              TcOps<T>::pack(dpt[2 * kk][2], dpt[2 * kk][3]),
                              TcOps<T>::pack(dpt[2 * kk + 1][0], dpt[2 * kk + 1][1]),
                              TcOps<T>::pack(dpt[2 * kk + 1][2], dpt[2 * kk + 1][3])};
#pragma unroll
      for (int dp = 0; dp < ND / 2; ++dp) {
        uint32_t bd[4], bq[4];
        ldmatrix_x4_trans(bd, bt_addr(dOb + kk * 16 * Ld + dp * 16, Ld, lane));
        ldmatrix_x4_trans(bq, bt_addr(Qb + kk * 16 * Ld + dp * 16, Ld, lane));
        TcOps<T>::mma(dv[2 * dp], ap, bd[0], bd[1]);
        TcOps<T>::mma(dv[2 * dp + 1], ap, bd[2], bd[3]);
        TcOps<T>::mma(dk[2 * dp], as, bq[0], bq[1]);
        TcOps<T>::mma(dk[2 * dp + 1], as, bq[2], bq[3]);
      }
    }
    __syncthreads();  // every warp is done with buffer i & 1 before it is refilled
  }

  uint16_t* const dk_base = p.dk ? p.dk + row_offset(p.st.dk, b, kvh, 0) : nullptr;
  uint16_t* const dv_base = p.dv ? p.dv + row_offset(p.st.dv, b, kvh, 0) : nullptr;
  if (dk_base) store_rows<T, ND>(dk_base, key0, s.kv_len, p.st.dk.row, dk, p.scale, p.scale, c);
  if (dv_base) store_rows<T, ND>(dv_base, key0, s.kv_len, p.st.dv.row, dv, 1.f, 1.f, c);
}

// ---------------------------------------------------------------------------------
// Backward: dq

template <class T, int kD>
__global__ void __launch_bounds__(kTcThreads) attention_dq_tc(const TcBackwardParams p) {
  constexpr int Br = 64, Bc = 32, Ld = kD + 8;
  constexpr int KD = kD / 16;
  constexpr int NT = Bc / 8;
  constexpr int ND = kD / 8;
  extern __shared__ uint4 smem_raw[];
  uint16_t* const Qs = reinterpret_cast<uint16_t*>(smem_raw);  // [Br][Ld]
  uint16_t* const dOs = Qs + Br * Ld;                          // [Br][Ld]
  uint16_t* const Ks = dOs + Br * Ld;                          // [2][Bc][Ld]
  uint16_t* const Vs = Ks + 2 * Bc * Ld;                       // [2][Bc][Ld]

  const Shape& s = p.s;
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32, g = lane / 4, c = lane % 4;
  // Blocks with the most keys to see (the last query blocks, when causal) go first.
  const int64_t heads = s.batch * s.q_heads;
  const int64_t bh = blockIdx.x % heads;
  const int64_t qb = ceil_div(s.q_len, Br) - 1 - static_cast<int64_t>(blockIdx.x / heads);
  const int64_t t0 = qb * Br;
  const int64_t b = bh / s.q_heads, h = bh % s.q_heads, kvh = h / s.group;
  const uint16_t* const kg = p.k + row_offset(p.st.k, b, kvh, 0);
  const uint16_t* const vg = p.v + row_offset(p.st.v, b, kvh, 0);
  const int64_t keys = visible_keys(s, min(t0 + Br, s.q_len) - 1);
  const int64_t tiles = ceil_div(keys, Bc);

  const int64_t row0 = t0 + warp * 16 + g, row1 = row0 + 8;
  const bool in0 = row0 < s.q_len, in1 = row1 < s.q_len;
  const int64_t vis0 = in0 ? visible_keys(s, row0) : 0, vis1 = in1 ? visible_keys(s, row1) : 0;
  const int64_t vis_first = visible_keys(s, t0);
  const float lse0 = in0 ? p.lse[bh * s.q_len + row0] * kLog2e : 0.f;
  const float lse1 = in1 ? p.lse[bh * s.q_len + row1] * kLog2e : 0.f;
  const float del0 = in0 ? p.delta[bh * s.q_len + row0] : 0.f;
  const float del1 = in1 ? p.delta[bh * s.q_len + row1] : 0.f;

  float dq[ND][4];
#pragma unroll
  for (int nd = 0; nd < ND; ++nd) dq[nd][0] = dq[nd][1] = dq[nd][2] = dq[nd][3] = 0.f;
  uint32_t qf[KD][4], df[KD][4];

  if (tiles > 0) {
    tile_async<Br, kD, Ld>(Qs, p.q + row_offset(p.st.q, b, h, t0), p.st.q.row, s.q_len - t0);
    tile_async<Br, kD, Ld>(dOs, p.dout + row_offset(p.st.dout, b, h, t0), p.st.dout.row, s.q_len - t0);
    tile_async<Bc, kD, Ld>(Ks, kg, p.st.k.row, s.kv_len);
    tile_async<Bc, kD, Ld>(Vs, vg, p.st.v.row, s.kv_len);
    cp_async_commit();
  }
  for (int64_t j = 0; j < tiles; ++j) {
    if (j + 1 < tiles) {
      const int64_t next = (j + 1) * Bc;
      const int buf = static_cast<int>((j + 1) & 1);
      tile_async<Bc, kD, Ld>(Ks + buf * Bc * Ld, kg + next * p.st.k.row, p.st.k.row, s.kv_len - next);
      tile_async<Bc, kD, Ld>(Vs + buf * Bc * Ld, vg + next * p.st.v.row, p.st.v.row, s.kv_len - next);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    if (j == 0) {
#pragma unroll
      for (int kk = 0; kk < KD; ++kk) {
        ldmatrix_x4(qf[kk], a_addr(Qs + warp * 16 * Ld + kk * 16, Ld, lane));
        ldmatrix_x4(df[kk], a_addr(dOs + warp * 16 * Ld + kk * 16, Ld, lane));
      }
    }
    const uint16_t* const Kb = Ks + static_cast<int>(j & 1) * Bc * Ld;
    const uint16_t* const Vb = Vs + static_cast<int>(j & 1) * Bc * Ld;

    float sc[NT][4], dp[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) sc[nt][e] = dp[nt][e] = 0.f;
    }
#pragma unroll
    for (int kk = 0; kk < KD; ++kk) {
#pragma unroll
      for (int np = 0; np < NT / 2; ++np) {
        uint32_t bk[4], bv[4];
        ldmatrix_x4(bk, b_addr(Kb + np * 16 * Ld + kk * 16, Ld, lane));
        ldmatrix_x4(bv, b_addr(Vb + np * 16 * Ld + kk * 16, Ld, lane));
        TcOps<T>::mma(sc[2 * np], qf[kk], bk[0], bk[1]);
        TcOps<T>::mma(sc[2 * np + 1], qf[kk], bk[2], bk[3]);
        TcOps<T>::mma(dp[2 * np], df[kk], bv[0], bv[1]);
        TcOps<T>::mma(dp[2 * np + 1], df[kk], bv[2], bv[3]);
      }
    }
    const int64_t s0 = j * Bc;
    const bool full = s0 + Bc <= vis_first;  // as in the forward: no mask needed
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t key = s0 + nt * 8 + 2 * c + (e & 1);
        const bool ok = full || key < (e < 2 ? vis0 : vis1);
        const float prob = ok ? exp2f(sc[nt][e] * p.scale_log2 - (e < 2 ? lse0 : lse1)) : 0.f;
        dp[nt][e] = prob * (dp[nt][e] - (e < 2 ? del0 : del1));  // dS
      }
    }
    // dq += dS K over this tile's keys.
#pragma unroll
    for (int kk = 0; kk < Bc / 16; ++kk) {
      const uint32_t a[4] = {TcOps<T>::pack(dp[2 * kk][0], dp[2 * kk][1]), TcOps<T>::pack(dp[2 * kk][2], dp[2 * kk][3]),
                             TcOps<T>::pack(dp[2 * kk + 1][0], dp[2 * kk + 1][1]),
                             TcOps<T>::pack(dp[2 * kk + 1][2], dp[2 * kk + 1][3])};
#pragma unroll
      for (int dpi = 0; dpi < ND / 2; ++dpi) {
        uint32_t bk[4];
        ldmatrix_x4_trans(bk, bt_addr(Kb + kk * 16 * Ld + dpi * 16, Ld, lane));
        TcOps<T>::mma(dq[2 * dpi], a, bk[0], bk[1]);
        TcOps<T>::mma(dq[2 * dpi + 1], a, bk[2], bk[3]);
      }
    }
    __syncthreads();
  }

  store_rows<T, ND>(p.dq + row_offset(p.st.dq, b, h, 0), row0, s.q_len, p.st.dq.row, dq, p.scale, p.scale, c);
}

// ---------------------------------------------------------------------------------
// Launchers

constexpr size_t forward_smem(int D) { return size_t{2} * (64 + 4 * 64) * (D + 8); }
constexpr size_t dkdv_smem(int D) { return size_t{2} * (2 * 64 + 4 * 32) * (D + 8) + sizeof(float) * 4 * 32; }
constexpr size_t dq_smem(int D) { return size_t{2} * (2 * 64 + 4 * 32) * (D + 8); }

template <class T, int kD>
void launch_forward(const TcForwardParams& p, cudaStream_t stream) {
  const auto kernel = attention_forward_tc<T, kD>;
  const size_t smem = forward_smem(kD);
  allow_smem(kernel, smem, "forward (tensor cores)");
  const int64_t blocks = ceil_div(p.s.q_len, 64) * p.s.batch * p.s.q_heads;
  kernel<<<grid_size(blocks, "the forward"), kTcThreads, smem, stream>>>(p);
  DTR_CUDA_CHECK_LAUNCH();
}

template <class T, int kD>
void launch_backward(const TcBackwardParams& p, cudaStream_t stream) {
  const Shape& s = p.s;
  if (p.dk || p.dv) {
    const auto kernel = attention_dkdv_tc<T, kD>;
    const size_t smem = dkdv_smem(kD);
    allow_smem(kernel, smem, "backward dk, dv (tensor cores)");
    const int64_t blocks = ceil_div(s.kv_len, 64) * s.batch * s.kv_heads;
    if (blocks > 0) {
      kernel<<<grid_size(blocks, "dk and dv"), kTcThreads, smem, stream>>>(p);
      DTR_CUDA_CHECK_LAUNCH();
    }
  }
  if (p.dq) {
    const auto kernel = attention_dq_tc<T, kD>;
    const size_t smem = dq_smem(kD);
    allow_smem(kernel, smem, "backward dq (tensor cores)");
    const int64_t blocks = ceil_div(s.q_len, 64) * s.batch * s.q_heads;
    if (blocks > 0) {
      kernel<<<grid_size(blocks, "dq"), kTcThreads, smem, stream>>>(p);
      DTR_CUDA_CHECK_LAUNCH();
    }
  }
}

}  // namespace

bool tc_supported(int64_t head_dim) { return head_dim == 64 || head_dim == 128; }

bool tc_layout_ok(std::initializer_list<TcOperand> operands) {
  constexpr int64_t kChunk = 8;  // 16-bit elements per 16-byte copy
  for (const TcOperand& x : operands) {
    if (x.ptr == nullptr) continue;
    const AttentionStrides& st = x.strides;
    if (!is_aligned16(x.ptr) || st.batch % kChunk != 0 || st.head % kChunk != 0 || st.row % kChunk != 0) {
      return false;
    }
  }
  return true;
}

template <class T>
void tc_forward(const T* q, const T* k, const T* v, const AttentionDims& dims,
                const AttentionForwardStrides& strides, T* out, float* lse, cudaStream_t stream) {
  const TcForwardParams p{reinterpret_cast<const uint16_t*>(q),
                          reinterpret_cast<const uint16_t*>(k),
                          reinterpret_cast<const uint16_t*>(v),
                          reinterpret_cast<uint16_t*>(out),
                          lse,
                          shape_of(dims),
                          strides,
                          static_cast<float>(dims.scale * 1.4426950408889634)};
  if (dims.head_dim == 64) {
    launch_forward<T, 64>(p, stream);
  } else {
    launch_forward<T, 128>(p, stream);
  }
}

template <class T>
void tc_backward(const T* q, const T* k, const T* v, const float* lse, const T* dout, const float* delta,
                 const AttentionDims& dims, const AttentionBackwardStrides& strides, T* dq, T* dk, T* dv,
                 cudaStream_t stream) {
  const TcBackwardParams p{reinterpret_cast<const uint16_t*>(q),
                           reinterpret_cast<const uint16_t*>(k),
                           reinterpret_cast<const uint16_t*>(v),
                           lse,
                           reinterpret_cast<const uint16_t*>(dout),
                           delta,
                           reinterpret_cast<uint16_t*>(dq),
                           reinterpret_cast<uint16_t*>(dk),
                           reinterpret_cast<uint16_t*>(dv),
                           shape_of(dims),
                           strides,
                           static_cast<float>(dims.scale),
                           static_cast<float>(dims.scale * 1.4426950408889634)};
  if (dims.head_dim == 64) {
    launch_backward<T, 64>(p, stream);
  } else {
    launch_backward<T, 128>(p, stream);
  }
}

template void tc_forward<bf16>(const bf16*, const bf16*, const bf16*, const AttentionDims&,
                               const AttentionForwardStrides&, bf16*, float*, cudaStream_t);
template void tc_forward<f16>(const f16*, const f16*, const f16*, const AttentionDims&,
                              const AttentionForwardStrides&, f16*, float*, cudaStream_t);
template void tc_backward<bf16>(const bf16*, const bf16*, const bf16*, const float*, const bf16*, const float*,
                                const AttentionDims&, const AttentionBackwardStrides&, bf16*, bf16*, bf16*,
                                cudaStream_t);
template void tc_backward<f16>(const f16*, const f16*, const f16*, const float*, const f16*, const float*,
                               const AttentionDims&, const AttentionBackwardStrides&, f16*, f16*, f16*,
                               cudaStream_t);

}  // namespace dtr::kernels::cuda::attention_detail
