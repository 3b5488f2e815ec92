// Forward of the fused CUDA attention (see attention.h): the CUDA-core kernel for
// every dtype and head_dim, the dispatch to the tensor-core kernels
// (attention_tc.cu), and the path bookkeeping.
#include "dtr/kernels/cuda/attention.h"

#include "dtr/kernels/cuda/attention_common.cuh"
#include "dtr/kernels/cuda/attention_tc.h"

#include <atomic>
#include <type_traits>

namespace dtr::kernels::cuda {

namespace attention_detail {

namespace {
thread_local AttentionPath t_last_path = AttentionPath::none;
std::atomic<bool> g_tensor_cores{true};
}  // namespace

void set_last_path(AttentionPath path) { t_last_path = path; }
bool tensor_cores_enabled() { return g_tensor_cores.load(std::memory_order_relaxed); }

}  // namespace attention_detail

AttentionPath attention_last_path() { return attention_detail::t_last_path; }
void attention_enable_tensor_cores(bool enable) {
  attention_detail::g_tensor_cores.store(enable, std::memory_order_relaxed);
}

namespace {

using namespace attention_detail;

template <class T>
struct ForwardParams {
  const T* q;
  const T* k;
  const T* v;
  T* out;
  acc_t<T>* lse;
  Shape s;
  AttentionForwardStrides st;
  acc_t<T> scale;
};

// One block per (batch, query head, block of Br query rows). Shared memory:
// Q [Br][kLd], K [Bc][kLd], V [Bc][kLd], P [Br][kPd], all in A.
template <class T, class Cfg>
__global__ void __launch_bounds__(256) attention_forward_simt(const ForwardParams<T> p) {
  using A = acc_t<T>;
  constexpr int RM = Cfg::kRows, CN = Cfg::kCols, DT = Cfg::kDims, V = Cfg::kV, DV = Cfg::kDV;
  constexpr int Br = Cfg::kBr, Bc = Cfg::kBc, Ld = Cfg::kLd, Pd = Cfg::kPd, Dp = Cfg::kDp;
  extern __shared__ uint4 smem_raw[];
  A* const Qs = reinterpret_cast<A*>(smem_raw);
  A* const Ks = Qs + Br * Ld;
  A* const Vs = Ks + Bc * Ld;
  A* const Ps = Vs + Bc * Ld;

  const Shape& s = p.s;
  const int D = static_cast<int>(s.head_dim);
  const int tid = static_cast<int>(threadIdx.x), tx = tid % 16, ty = tid / 16;
  const int64_t q_blocks = ceil_div(s.q_len, Br);
  const int64_t bh = blockIdx.x / q_blocks;  // b * Hq + h
  const int64_t t0 = (blockIdx.x % q_blocks) * Br;
  const int64_t b = bh / s.q_heads, h = bh % s.q_heads, kvh = h / s.group;
  const T* const kh = p.k + row_offset(p.st.k, b, kvh, 0);
  const T* const vh = p.v + row_offset(p.st.v, b, kvh, 0);

  load_tile<T, Br, Dp, Ld, 256>(Qs, p.q + row_offset(p.st.q, b, h, t0), p.st.q.row,
                                min(int64_t{Br}, s.q_len - t0), D);

  int64_t visible[RM];  // keys each of my rows sees (0 for rows past the end)
#pragma unroll
  for (int i = 0; i < RM; ++i) {
    const int64_t t = t0 + ty + 16 * i;
    visible[i] = t < s.q_len ? visible_keys(s, t) : 0;
  }
  // visible_keys is nondecreasing in t: the block's last row sees the most keys.
  const int64_t keys = visible_keys(s, min(t0 + Br, s.q_len) - 1);
  const int dv_end = (D + V - 1) / V * V;  // head-dim columns worth reading (rest are 0)

  A row_max[RM], row_sum[RM], acc[RM][DT];
#pragma unroll
  for (int i = 0; i < RM; ++i) {
    row_max[i] = neg_inf<A>();
    row_sum[i] = A(0);
#pragma unroll
    for (int c = 0; c < DT; ++c) acc[i][c] = A(0);
  }

  for (int64_t s0 = 0; s0 < keys; s0 += Bc) {
    __syncthreads();  // the previous tile's readers of K, V and P are done
    const int64_t valid = min(int64_t{Bc}, s.kv_len - s0);
    load_tile<T, Bc, Dp, Ld, 256>(Ks, kh + s0 * p.st.k.row, p.st.k.row, valid, D);
    load_tile<T, Bc, Dp, Ld, 256>(Vs, vh + s0 * p.st.v.row, p.st.v.row, valid, D);
    __syncthreads();

    A score[RM][CN];
#pragma unroll
    for (int i = 0; i < RM; ++i) {
#pragma unroll
      for (int j = 0; j < CN; ++j) score[i][j] = A(0);
    }
#pragma unroll 2
    for (int d = 0; d < dv_end; d += V) {
      SVec<A> qv[RM], kv[CN];
#pragma unroll
      for (int i = 0; i < RM; ++i) qv[i] = lds(Qs + (ty + 16 * i) * Ld + d);
#pragma unroll
      for (int j = 0; j < CN; ++j) kv[j] = lds(Ks + (tx + 16 * j) * Ld + d);
#pragma unroll
      for (int i = 0; i < RM; ++i) {
#pragma unroll
        for (int j = 0; j < CN; ++j) {
#pragma unroll
          for (int e = 0; e < V; ++e) score[i][j] = fma(qv[i].v[e], kv[j].v[e], score[i][j]);
        }
      }
    }

    // Online softmax: new running max, rescale, probabilities of this tile.
#pragma unroll
    for (int i = 0; i < RM; ++i) {
      A tile_max = neg_inf<A>();
#pragma unroll
      for (int j = 0; j < CN; ++j) {
        const int64_t key = s0 + tx + 16 * j;
        score[i][j] = key < visible[i] ? p.scale * score[i][j] : neg_inf<A>();
        tile_max = max(tile_max, score[i][j]);
      }
      tile_max = half_warp_allreduce(tile_max, [](A a, A b2) { return max(a, b2); });
      const A new_max = max(row_max[i], tile_max);
      // A row that has seen no key yet keeps max -inf; subtract 0 then (all terms are 0).
      const A base = new_max == neg_inf<A>() ? A(0) : new_max;
      const A alpha = exp_acc(row_max[i] - base);
      A tile_sum = A(0);
#pragma unroll
      for (int j = 0; j < CN; ++j) {
        const A prob = exp_acc(score[i][j] - base);
        tile_sum += prob;
        Ps[(ty + 16 * i) * Pd + tx + 16 * j] = prob;
      }
      tile_sum = half_warp_allreduce(tile_sum, [](A a, A b2) { return a + b2; });
      row_sum[i] = row_sum[i] * alpha + tile_sum;
      row_max[i] = new_max;
#pragma unroll
      for (int c = 0; c < DT; ++c) acc[i][c] *= alpha;
    }
    __syncthreads();  // P complete

    // acc += P V over this tile's keys (keys past the end have P = 0 and V = 0).
#pragma unroll 2
    for (int c = 0; c < Bc; ++c) {
      A pr[RM];
#pragma unroll
      for (int i = 0; i < RM; ++i) pr[i] = Ps[(ty + 16 * i) * Pd + c];
#pragma unroll
      for (int m = 0; m < DV; ++m) {
        const SVec<A> vv = lds(Vs + c * Ld + tx * V + 16 * V * m);
#pragma unroll
        for (int i = 0; i < RM; ++i) {
#pragma unroll
          for (int e = 0; e < V; ++e) acc[i][m * V + e] = fma(pr[i], vv.v[e], acc[i][m * V + e]);
        }
      }
    }
  }

#pragma unroll
  for (int i = 0; i < RM; ++i) {
    const int64_t t = t0 + ty + 16 * i;
    if (t >= s.q_len) continue;
    const A l = row_sum[i];
    const A inv = l > A(0) ? A(1) / l : A(0);  // a row with no visible key gives 0
    T* const o = p.out + row_offset(p.st.out, b, h, t);
#pragma unroll
    for (int m = 0; m < DV; ++m) {
#pragma unroll
      for (int e = 0; e < V; ++e) {
        const int d = tx * V + 16 * V * m + e;
        if (d < D) o[d] = convert<T>(acc[i][m * V + e] * inv);
      }
    }
    if (tx == 0) p.lse[bh * s.q_len + t] = l > A(0) ? row_max[i] + log_acc(l) : neg_inf<A>();
  }
}

template <class T, class Cfg>
void launch_forward_simt(const ForwardParams<T>& p, cudaStream_t stream) {
  using A = acc_t<T>;
  const size_t smem = sizeof(A) * (size_t{Cfg::kBr + 2 * Cfg::kBc} * Cfg::kLd + size_t{Cfg::kBr} * Cfg::kPd);
  const auto kernel = attention_forward_simt<T, Cfg>;
  allow_smem(kernel, smem, "forward");
  const int64_t blocks = ceil_div(p.s.q_len, Cfg::kBr) * p.s.batch * p.s.q_heads;
  kernel<<<grid_size(blocks, "the forward"), Cfg::kThreads, smem, stream>>>(p);
  DTR_CUDA_CHECK_LAUNCH();
}

// Tile shapes: 64 x 32 (float accumulation), 32 x 16 (double).
template <class T, int kDT>
using ForwardConfig = std::conditional_t<std::is_same_v<acc_t<T>, double>, SimtConfig<double, 2, 1, kDT>,
                                         SimtConfig<float, 4, 2, kDT>>;

}  // namespace

template <class T>
void attention_forward(const T* q, const T* k, const T* v, const AttentionDims& dims,
                       const AttentionForwardStrides& strides, T* out, acc_t<T>* lse, cudaStream_t stream) {
  set_last_path(AttentionPath::none);
  check_dims(dims, "forward");
  const Shape s = shape_of(dims);
  if (s.batch == 0 || s.q_heads == 0 || s.q_len == 0) return;
  if constexpr (is_half_v<T>) {
    if (tensor_cores_enabled() && tc_supported(s.head_dim) &&
        tc_layout_ok({{q, strides.q}, {k, strides.k}, {v, strides.v}, {out, strides.out}})) {
      tc_forward<T>(q, k, v, dims, strides, out, lse, stream);
      set_last_path(AttentionPath::tensor_core);
      return;
    }
  }
  const ForwardParams<T> p{q, k, v, out, lse, s, strides, static_cast<acc_t<T>>(dims.scale)};
  switch (simt_dims_bucket(s.head_dim)) {
    case 4: launch_forward_simt<T, ForwardConfig<T, 4>>(p, stream); break;
    case 8: launch_forward_simt<T, ForwardConfig<T, 8>>(p, stream); break;
    default: launch_forward_simt<T, ForwardConfig<T, 16>>(p, stream); break;
  }
  set_last_path(AttentionPath::simt);
}

#define DTR_INSTANTIATE_CUDA_ATTENTION_FORWARD(T)                                                      \
  template void attention_forward<T>(const T*, const T*, const T*, const AttentionDims&,                \
                                     const AttentionForwardStrides&, T*, acc_t<T>*, cudaStream_t);
DTR_FOR_EACH_FLOATING(DTR_INSTANTIATE_CUDA_ATTENTION_FORWARD)

}  // namespace dtr::kernels::cuda
