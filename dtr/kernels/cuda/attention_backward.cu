// Backward of the fused CUDA attention (see attention.h): delta = rowsum(dout * out),
// then the dk/dv and dq CUDA-core kernels (or the tensor-core ones of attention_tc.cu).
#include "dtr/kernels/cuda/attention.h"

#include "dtr/kernels/cuda/attention_common.cuh"
#include "dtr/kernels/cuda/attention_tc.h"

#include <type_traits>

namespace dtr::kernels::cuda {

namespace {

using namespace attention_detail;

template <class T>
struct BackwardParams {
  const T* q;
  const T* k;
  const T* v;
  const T* out;
  const acc_t<T>* lse;
  const T* dout;
  const acc_t<T>* delta;
  T* dq;
  T* dk;
  T* dv;
  Shape s;
  AttentionBackwardStrides st;
  acc_t<T> scale;
};

constexpr int kDeltaThreads = 256;

// delta[row] = sum_d dout[row, d] * out[row, d] in A, row = (b * Hq + h) * T + t: one
// warp per row, each lane summing a fixed stride of the row, then a fixed butterfly
// across the warp.
template <class T>
__global__ void __launch_bounds__(kDeltaThreads)
    attention_delta_kernel(const T* __restrict__ out, const T* __restrict__ dout, Shape s,
                           AttentionStrides out_strides, AttentionStrides dout_strides,
                           acc_t<T>* __restrict__ delta) {
  using A = acc_t<T>;
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int D = static_cast<int>(s.head_dim);
  const int64_t rows = s.batch * s.q_heads * s.q_len;
  const int64_t warps = int64_t{gridDim.x} * (kDeltaThreads / kWarpSize);
  for (int64_t row = blockIdx.x * int64_t{kDeltaThreads / kWarpSize} + threadIdx.x / kWarpSize; row < rows;
       row += warps) {
    const int64_t bh = row / s.q_len, t = row % s.q_len, b = bh / s.q_heads, h = bh % s.q_heads;
    const T* o = out + row_offset(out_strides, b, h, t);
    const T* g = dout + row_offset(dout_strides, b, h, t);
    A sum = A(0);
    for (int d = lane; d < D; d += kWarpSize) sum = fma(convert<A>(g[d]), convert<A>(o[d]), sum);
    sum = warp_allreduce(sum, [](A a, A b) { return a + b; });
    if (lane == 0) delta[row] = sum;
  }
}

// Scores and dO.V^T of a Br x Bc tile, and from them P and dS (both stored to shared
// memory as Ps[r][c], dSs[r][c]). Thread (ty, tx) owns rows ty + 16 i, keys tx + 16 j.
// `visible`, `row_lse`, `row_delta` are per owned row; s0 is the tile's first key.
template <class A, class Cfg>
__device__ inline void probabilities_and_ds(const A* Qs, const A* dOs, const A* Ks, const A* Vs, int dv_end,
                                            int64_t s0, const int64_t (&visible)[Cfg::kRows],
                                            const A (&row_lse)[Cfg::kRows], const A (&row_delta)[Cfg::kRows],
                                            A scale, A* Ps, A* dSs) {
  constexpr int RM = Cfg::kRows, CN = Cfg::kCols, V = Cfg::kV, Ld = Cfg::kLd, Pd = Cfg::kPd;
  const int tid = static_cast<int>(threadIdx.x), tx = tid % 16, ty = tid / 16;
  A score[RM][CN], dp[RM][CN];
#pragma unroll
  for (int i = 0; i < RM; ++i) {
#pragma unroll
    for (int j = 0; j < CN; ++j) score[i][j] = dp[i][j] = A(0);
  }
#pragma unroll 2
  for (int d = 0; d < dv_end; d += V) {
    SVec<A> qv[RM], gv[RM], kv[CN], vv[CN];
#pragma unroll
    for (int i = 0; i < RM; ++i) {
      qv[i] = lds(Qs + (ty + 16 * i) * Ld + d);
      gv[i] = lds(dOs + (ty + 16 * i) * Ld + d);
    }
#pragma unroll
    for (int j = 0; j < CN; ++j) {
      kv[j] = lds(Ks + (tx + 16 * j) * Ld + d);
      vv[j] = lds(Vs + (tx + 16 * j) * Ld + d);
    }
#pragma unroll
    for (int i = 0; i < RM; ++i) {
#pragma unroll
      for (int j = 0; j < CN; ++j) {
#pragma unroll
        for (int e = 0; e < V; ++e) {
          score[i][j] = fma(qv[i].v[e], kv[j].v[e], score[i][j]);
          dp[i][j] = fma(gv[i].v[e], vv[j].v[e], dp[i][j]);
        }
      }
    }
  }
#pragma unroll
  for (int i = 0; i < RM; ++i) {
#pragma unroll
    for (int j = 0; j < CN; ++j) {
      const int64_t key = s0 + tx + 16 * j;
      const A prob = key < visible[i] ? exp_acc(scale * score[i][j] - row_lse[i]) : A(0);
      Ps[(ty + 16 * i) * Pd + tx + 16 * j] = prob;
      dSs[(ty + 16 * i) * Pd + tx + 16 * j] = prob * (dp[i][j] - row_delta[i]);
    }
  }
}

// Loads the per-row values of the query tile starting at t0 for the rows this thread
// owns (ty + 16 i): visible keys (0 past the end), lse and delta (0 past the end).
template <class A, int RM>
__device__ inline void row_values(const Shape& s, int64_t bh, int64_t t0, const A* lse, const A* delta,
                                  int64_t (&visible)[RM], A (&row_lse)[RM], A (&row_delta)[RM]) {
  const int ty = static_cast<int>(threadIdx.x) / 16;
#pragma unroll
  for (int i = 0; i < RM; ++i) {
    const int64_t t = t0 + ty + 16 * i;
    const bool in = t < s.q_len;
    visible[i] = in ? visible_keys(s, t) : 0;
    row_lse[i] = in ? lse[bh * s.q_len + t] : A(0);
    row_delta[i] = in ? delta[bh * s.q_len + t] : A(0);
  }
}

// dk and dv: one block per (batch, kv head, block of Bc keys), looping over the query
// heads of the group and their query blocks that see any of its keys. Shared memory:
// K, V [Bc][kLd] (kept), Q, dO [Br][kLd], P, dS [Br][kPd].
template <class T, class Cfg>
__global__ void __launch_bounds__(256) attention_dkdv_simt(const BackwardParams<T> p) {
  using A = acc_t<T>;
  constexpr int RM = Cfg::kRows, CN = Cfg::kCols, DT = Cfg::kDims, V = Cfg::kV, DV = Cfg::kDV;
  constexpr int Br = Cfg::kBr, Bc = Cfg::kBc, Ld = Cfg::kLd, Pd = Cfg::kPd, Dp = Cfg::kDp;
  extern __shared__ uint4 smem_raw[];
  A* const Ks = reinterpret_cast<A*>(smem_raw);
  A* const Vs = Ks + Bc * Ld;
  A* const Qs = Vs + Bc * Ld;
  A* const dOs = Qs + Br * Ld;
  A* const Ps = dOs + Br * Ld;
  A* const dSs = Ps + Br * Pd;

  const Shape& s = p.s;
  const int D = static_cast<int>(s.head_dim);
  const int tid = static_cast<int>(threadIdx.x), tx = tid % 16, ty = tid / 16;
  const int64_t k_blocks = ceil_div(s.kv_len, Bc);
  const int64_t kv_index = blockIdx.x / k_blocks;  // b * Hkv + kv head
  const int64_t s0 = (blockIdx.x % k_blocks) * Bc;
  const int64_t b = kv_index / s.kv_heads, kvh = kv_index % s.kv_heads;
  const int64_t valid_keys = min(int64_t{Bc}, s.kv_len - s0);
  load_tile<T, Bc, Dp, Ld, 256>(Ks, p.k + row_offset(p.st.k, b, kvh, s0), p.st.k.row, valid_keys, D);
  load_tile<T, Bc, Dp, Ld, 256>(Vs, p.v + row_offset(p.st.v, b, kvh, s0), p.st.v.row, valid_keys, D);
  const int dv_end = (D + V - 1) / V * V;

  // dk, dv of keys s0 + ty + 16 i (i < CN), head-dim columns tx * V + 16 V m + e.
  A dk[CN][DT], dv[CN][DT];
#pragma unroll
  for (int i = 0; i < CN; ++i) {
#pragma unroll
    for (int c = 0; c < DT; ++c) dk[i][c] = dv[i][c] = A(0);
  }

  const int64_t first_block = first_row_seeing(s, s0) / Br;  // earlier query blocks see none of these keys
  const int64_t q_blocks = ceil_div(s.q_len, Br);
  for (int64_t h = kvh * s.group; h < (kvh + 1) * s.group; ++h) {
    const int64_t bh = b * s.q_heads + h;
    for (int64_t qb = first_block; qb < q_blocks; ++qb) {
      const int64_t t0 = qb * Br;
      __syncthreads();  // the previous tile's readers of Q, dO, P and dS are done
      const int64_t valid_rows = min(int64_t{Br}, s.q_len - t0);
      load_tile<T, Br, Dp, Ld, 256>(Qs, p.q + row_offset(p.st.q, b, h, t0), p.st.q.row, valid_rows, D);
      load_tile<T, Br, Dp, Ld, 256>(dOs, p.dout + row_offset(p.st.dout, b, h, t0), p.st.dout.row, valid_rows, D);
      int64_t visible[RM];
      A row_lse[RM], row_delta[RM];
      row_values<A, RM>(s, bh, t0, p.lse, p.delta, visible, row_lse, row_delta);
      __syncthreads();
      probabilities_and_ds<A, Cfg>(Qs, dOs, Ks, Vs, dv_end, s0, visible, row_lse, row_delta, p.scale, Ps, dSs);
      __syncthreads();
      // dv += P^T dO, dk += dS^T Q over the tile's rows (rows past the end have P = dS = 0).
#pragma unroll 2
      for (int r = 0; r < Br; ++r) {
        A pr[CN], ds[CN];
#pragma unroll
        for (int i = 0; i < CN; ++i) {
          pr[i] = Ps[r * Pd + ty + 16 * i];
          ds[i] = dSs[r * Pd + ty + 16 * i];
        }
#pragma unroll
        for (int m = 0; m < DV; ++m) {
          const SVec<A> gv = lds(dOs + r * Ld + tx * V + 16 * V * m);
          const SVec<A> qv = lds(Qs + r * Ld + tx * V + 16 * V * m);
#pragma unroll
          for (int i = 0; i < CN; ++i) {
#pragma unroll
            for (int e = 0; e < V; ++e) {
              dv[i][m * V + e] = fma(pr[i], gv.v[e], dv[i][m * V + e]);
              dk[i][m * V + e] = fma(ds[i], qv.v[e], dk[i][m * V + e]);
            }
          }
        }
      }
    }
  }

#pragma unroll
  for (int i = 0; i < CN; ++i) {
    const int64_t key = s0 + ty + 16 * i;
    if (key >= s.kv_len) continue;
    const int64_t dk_offset = row_offset(p.st.dk, b, kvh, key), dv_offset = row_offset(p.st.dv, b, kvh, key);
#pragma unroll
    for (int m = 0; m < DV; ++m) {
#pragma unroll
      for (int e = 0; e < V; ++e) {
        const int d = tx * V + 16 * V * m + e;
        if (d >= D) continue;
        if (p.dk) p.dk[dk_offset + d] = convert<T>(p.scale * dk[i][m * V + e]);
        if (p.dv) p.dv[dv_offset + d] = convert<T>(dv[i][m * V + e]);
      }
    }
  }
}

// dq: one block per (batch, query head, block of Br query rows), looping over the key
// blocks its rows see. Shared memory: Q, dO [Br][kLd] (kept), K, V [Bc][kLd],
// P (unused but computed alongside), dS [Br][kPd].
template <class T, class Cfg>
__global__ void __launch_bounds__(256) attention_dq_simt(const BackwardParams<T> p) {
  using A = acc_t<T>;
  constexpr int RM = Cfg::kRows, DT = Cfg::kDims, V = Cfg::kV, DV = Cfg::kDV;
  constexpr int Br = Cfg::kBr, Bc = Cfg::kBc, Ld = Cfg::kLd, Pd = Cfg::kPd, Dp = Cfg::kDp;
  extern __shared__ uint4 smem_raw[];
  A* const Ks = reinterpret_cast<A*>(smem_raw);
  A* const Vs = Ks + Bc * Ld;
  A* const Qs = Vs + Bc * Ld;
  A* const dOs = Qs + Br * Ld;
  A* const Ps = dOs + Br * Ld;
  A* const dSs = Ps + Br * Pd;

  const Shape& s = p.s;
  const int D = static_cast<int>(s.head_dim);
  const int tid = static_cast<int>(threadIdx.x), tx = tid % 16, ty = tid / 16;
  const int64_t q_blocks = ceil_div(s.q_len, Br);
  const int64_t bh = blockIdx.x / q_blocks;
  const int64_t t0 = (blockIdx.x % q_blocks) * Br;
  const int64_t b = bh / s.q_heads, h = bh % s.q_heads, kvh = h / s.group;
  const T* const kh = p.k + row_offset(p.st.k, b, kvh, 0);
  const T* const vh = p.v + row_offset(p.st.v, b, kvh, 0);
  const int64_t valid_rows = min(int64_t{Br}, s.q_len - t0);
  load_tile<T, Br, Dp, Ld, 256>(Qs, p.q + row_offset(p.st.q, b, h, t0), p.st.q.row, valid_rows, D);
  load_tile<T, Br, Dp, Ld, 256>(dOs, p.dout + row_offset(p.st.dout, b, h, t0), p.st.dout.row, valid_rows, D);
  int64_t visible[RM];
  A row_lse[RM], row_delta[RM];
  row_values<A, RM>(s, bh, t0, p.lse, p.delta, visible, row_lse, row_delta);
  const int64_t keys = visible_keys(s, t0 + valid_rows - 1);
  const int dv_end = (D + V - 1) / V * V;

  A dq[RM][DT];
#pragma unroll
  for (int i = 0; i < RM; ++i) {
#pragma unroll
    for (int c = 0; c < DT; ++c) dq[i][c] = A(0);
  }

  for (int64_t s0 = 0; s0 < keys; s0 += Bc) {
    __syncthreads();  // the previous tile's readers of K, V and dS are done
    const int64_t valid_keys = min(int64_t{Bc}, s.kv_len - s0);
    load_tile<T, Bc, Dp, Ld, 256>(Ks, kh + s0 * p.st.k.row, p.st.k.row, valid_keys, D);
    load_tile<T, Bc, Dp, Ld, 256>(Vs, vh + s0 * p.st.v.row, p.st.v.row, valid_keys, D);
    __syncthreads();
    probabilities_and_ds<A, Cfg>(Qs, dOs, Ks, Vs, dv_end, s0, visible, row_lse, row_delta, p.scale, Ps, dSs);
    __syncthreads();
    // dq += dS K over the tile's keys (keys past the end have dS = 0 and K = 0).
#pragma unroll 2
    for (int c = 0; c < Bc; ++c) {
      A ds[RM];
#pragma unroll
      for (int i = 0; i < RM; ++i) ds[i] = dSs[(ty + 16 * i) * Pd + c];
#pragma unroll
      for (int m = 0; m < DV; ++m) {
        const SVec<A> kv = lds(Ks + c * Ld + tx * V + 16 * V * m);
#pragma unroll
        for (int i = 0; i < RM; ++i) {
#pragma unroll
          for (int e = 0; e < V; ++e) dq[i][m * V + e] = fma(ds[i], kv.v[e], dq[i][m * V + e]);
        }
      }
    }
  }

#pragma unroll
  for (int i = 0; i < RM; ++i) {
    const int64_t t = t0 + ty + 16 * i;
    if (t >= s.q_len) continue;
    T* const o = p.dq + row_offset(p.st.dq, b, h, t);
#pragma unroll
    for (int m = 0; m < DV; ++m) {
#pragma unroll
      for (int e = 0; e < V; ++e) {
        const int d = tx * V + 16 * V * m + e;
        if (d < D) o[d] = convert<T>(p.scale * dq[i][m * V + e]);
      }
    }
  }
}

template <class T, class Cfg>
size_t backward_smem() {
  return sizeof(acc_t<T>) * (size_t{2 * Cfg::kBc + 2 * Cfg::kBr} * Cfg::kLd + size_t{2 * Cfg::kBr} * Cfg::kPd);
}

template <class T, class Cfg>
void launch_backward_simt(const BackwardParams<T>& p, cudaStream_t stream) {
  const size_t smem = backward_smem<T, Cfg>();
  const Shape& s = p.s;
  if (p.dk || p.dv) {
    const auto kernel = attention_dkdv_simt<T, Cfg>;
    allow_smem(kernel, smem, "backward (dk, dv)");
    const int64_t blocks = ceil_div(s.kv_len, Cfg::kBc) * s.batch * s.kv_heads;
    if (blocks > 0) {
      kernel<<<grid_size(blocks, "dk and dv"), Cfg::kThreads, smem, stream>>>(p);
      DTR_CUDA_CHECK_LAUNCH();
    }
  }
  if (p.dq) {
    const auto kernel = attention_dq_simt<T, Cfg>;
    allow_smem(kernel, smem, "backward (dq)");
    const int64_t blocks = ceil_div(s.q_len, Cfg::kBr) * s.batch * s.q_heads;
    if (blocks > 0) {
      kernel<<<grid_size(blocks, "dq"), Cfg::kThreads, smem, stream>>>(p);
      DTR_CUDA_CHECK_LAUNCH();
    }
  }
}

// Tile shapes: 32 x 32 (float accumulation), 16 x 16 (double).
template <class T, int kDT>
using BackwardConfig = std::conditional_t<std::is_same_v<acc_t<T>, double>, SimtConfig<double, 1, 1, kDT>,
                                          SimtConfig<float, 2, 2, kDT>>;

}  // namespace

template <class T>
void attention_backward(const T* q, const T* k, const T* v, const T* out, const acc_t<T>* lse,
                        const T* dout, const AttentionDims& dims, const AttentionBackwardStrides& strides,
                        T* dq, T* dk, T* dv, acc_t<T>* delta, cudaStream_t stream) {
  set_last_path(AttentionPath::none);
  check_dims(dims, "backward");
  const Shape s = shape_of(dims);
  if (s.batch == 0 || (dq == nullptr && dk == nullptr && dv == nullptr)) return;
  if (s.q_len > 0 && s.q_heads > 0) {
    const int64_t rows = s.batch * s.q_heads * s.q_len;
    const int64_t blocks = std::min<int64_t>(ceil_div(rows, kDeltaThreads / kWarpSize), int64_t{1} << 20);
    attention_delta_kernel<T><<<static_cast<unsigned>(blocks), kDeltaThreads, 0, stream>>>(
        out, dout, s, strides.out, strides.dout, delta);
    DTR_CUDA_CHECK_LAUNCH();
  }
  if constexpr (is_half_v<T>) {
    if (tensor_cores_enabled() && tc_supported(s.head_dim) &&
        tc_layout_ok({{q, strides.q}, {k, strides.k}, {v, strides.v}, {dout, strides.dout}, {dq, strides.dq},
                      {dk, strides.dk}, {dv, strides.dv}})) {
      tc_backward<T>(q, k, v, lse, dout, delta, dims, strides, dq, dk, dv, stream);
      set_last_path(AttentionPath::tensor_core);
      return;
    }
  }
  const BackwardParams<T> p{q, k, v, out, lse, dout, delta, dq, dk, dv, s, strides,
                            static_cast<acc_t<T>>(dims.scale)};
  switch (simt_dims_bucket(s.head_dim)) {
    case 4: launch_backward_simt<T, BackwardConfig<T, 4>>(p, stream); break;
    case 8: launch_backward_simt<T, BackwardConfig<T, 8>>(p, stream); break;
    default: launch_backward_simt<T, BackwardConfig<T, 16>>(p, stream); break;
  }
  set_last_path(AttentionPath::simt);
}

#define DTR_INSTANTIATE_CUDA_ATTENTION_BACKWARD(T)                                                      \
  template void attention_backward<T>(const T*, const T*, const T*, const T*, const acc_t<T>*, const T*, \
                                      const AttentionDims&, const AttentionBackwardStrides&, T*, T*, T*, \
                                      acc_t<T>*, cudaStream_t);
DTR_FOR_EACH_FLOATING(DTR_INSTANTIATE_CUDA_ATTENTION_BACKWARD)

}  // namespace dtr::kernels::cuda
