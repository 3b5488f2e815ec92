// The float GEMM on CUDA cores: 128x128x8 tiles in double-buffered shared memory,
// 8x8 outputs per thread, f32 FMAs (no TF32: results match an f32 reference).
#include "dtr/kernels/cuda/gemm_common.cuh"

namespace dtr::kernels::cuda::gemm_detail {

namespace {

constexpr int kSimtBM = 128, kSimtBN = 128, kSimtBK = 8, kSimtThreads = 256, kSimtPad = 4;

template <Transpose TA, Transpose TB>
__global__ void __launch_bounds__(kSimtThreads) simt_gemm_kernel(const GemmParams<float> p) {
  __shared__ __align__(16) float sa[2][kSimtBK][kSimtBM + kSimtPad];
  __shared__ __align__(16) float sb[2][kSimtBK][kSimtBN + kSimtPad];
  constexpr int kLoads = kSimtBM * kSimtBK / kSimtThreads;  // per thread, per operand
  const int tid = static_cast<int>(threadIdx.x);
  const int tx = tid % 16;  // columns tx*4 + {0..3} and 64 + tx*4 + {0..3}
  const int ty = tid / 16;  // rows likewise
  int tm, tn;
  tile_coords(ceil_div(p.m, kSimtBM), ceil_div(p.n, kSimtBN), tm, tn);
  const int m0 = tm * kSimtBM;
  const int n0 = tn * kSimtBN;
  const int ktiles = ceil_div(p.k, kSimtBK);

  // Element j of this thread's share of a tile: (outer index, k index), read along
  // whichever of the two is unit-stride in global memory.
  auto a_idx = [&](int j, int& i, int& kk) {
    const int e = tid + j * kSimtThreads;
    if constexpr (TA == Transpose::no) { i = e / kSimtBK; kk = e % kSimtBK; }
    else { i = e % kSimtBM; kk = e / kSimtBM; }
  };
  auto b_idx = [&](int j, int& i, int& kk) {
    const int e = tid + j * kSimtThreads;
    if constexpr (TB == Transpose::yes) { i = e / kSimtBK; kk = e % kSimtBK; }
    else { i = e % kSimtBN; kk = e / kSimtBN; }
  };

  for (int64_t bz = blockIdx.y; bz < p.batch; bz += gridDim.y) {
    const float* ga = p.a + bz * p.stride_a;
    const float* gb = p.b + bz * p.stride_b;
    float ra[kLoads], rb[kLoads];
    auto load_regs = [&](int kt) {
#pragma unroll
      for (int j = 0; j < kLoads; ++j) {
        int i, kk;
        a_idx(j, i, kk);
        const int gm = m0 + i, gk = kt * kSimtBK + kk;
        const int64_t off = TA == Transpose::no ? int64_t{gm} * p.lda + gk : int64_t{gk} * p.lda + gm;
        ra[j] = (gm < p.m && gk < p.k) ? ga[off] : 0.f;
        b_idx(j, i, kk);
        const int gn = n0 + i, gkb = kt * kSimtBK + kk;
        const int64_t boff = TB == Transpose::yes ? int64_t{gn} * p.ldb + gkb : int64_t{gkb} * p.ldb + gn;
        rb[j] = (gn < p.n && gkb < p.k) ? gb[boff] : 0.f;
      }
    };
    auto store_smem = [&](int buf) {
#pragma unroll
      for (int j = 0; j < kLoads; ++j) {
        int i, kk;
        a_idx(j, i, kk);
        sa[buf][kk][i] = ra[j];
        b_idx(j, i, kk);
        sb[buf][kk][i] = rb[j];
      }
    };

    float acc[8][8] = {};
    if (ktiles > 0) {
      load_regs(0);
      store_smem(0);
    }
    __syncthreads();
    for (int kt = 0; kt < ktiles; ++kt) {
      const int cur = kt & 1;
      if (kt + 1 < ktiles) load_regs(kt + 1);
#pragma unroll
      for (int kk = 0; kk < kSimtBK; ++kk) {
        float av[8], bv[8];
        *reinterpret_cast<float4*>(av) = *reinterpret_cast<const float4*>(&sa[cur][kk][ty * 4]);
        *reinterpret_cast<float4*>(av + 4) = *reinterpret_cast<const float4*>(&sa[cur][kk][64 + ty * 4]);
        *reinterpret_cast<float4*>(bv) = *reinterpret_cast<const float4*>(&sb[cur][kk][tx * 4]);
        *reinterpret_cast<float4*>(bv + 4) = *reinterpret_cast<const float4*>(&sb[cur][kk][64 + tx * 4]);
#pragma unroll
        for (int i = 0; i < 8; ++i)
#pragma unroll
          for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
      }
      if (kt + 1 < ktiles) store_smem(cur ^ 1);
      __syncthreads();
    }

    float* gc = p.c + bz * p.stride_c;
    float* gpre = p.pre != nullptr ? p.pre + bz * p.stride_c : nullptr;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const int row = m0 + (i < 4 ? ty * 4 + i : 64 + ty * 4 + i - 4);
      if (row >= p.m) continue;
      float* crow = gc + int64_t{row} * p.ldc;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int col = n0 + (j < 4 ? tx * 4 + j : 64 + tx * 4 + j - 4);
        if (col >= p.n) continue;
        float v = p.alpha * acc[i][j];
        if (p.beta != 0.f) v += p.beta * crow[col];
        if (p.bias != nullptr) v += p.bias[col];  // the epilogue (dtr/kernels/gemm_epilogue.h)
        if (gpre != nullptr) gpre[int64_t{row} * p.ldc + col] = v;
        crow[col] = apply_gemm_activation(p.act, v);
      }
    }
  }
}

template <Transpose TA, Transpose TB>
void launch_simt_typed(const GemmParams<float>& p, cudaStream_t stream) {
  simt_gemm_kernel<TA, TB><<<gemm_grid(p.m, p.n, kSimtBM, kSimtBN, p.batch), kSimtThreads, 0, stream>>>(p);
  DTR_CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_simt(Transpose ta, Transpose tb, const GemmParams<float>& p, cudaStream_t stream) {
  using enum Transpose;
  if (ta == no && tb == no) launch_simt_typed<no, no>(p, stream);
  if (ta == no && tb == yes) launch_simt_typed<no, yes>(p, stream);
  if (ta == yes && tb == no) launch_simt_typed<yes, no>(p, stream);
  if (ta == yes && tb == yes) launch_simt_typed<yes, yes>(p, stream);
}

}  // namespace dtr::kernels::cuda::gemm_detail
