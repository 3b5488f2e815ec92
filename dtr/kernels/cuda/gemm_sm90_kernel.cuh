// Internal to the Hopper GEMM (gemm_sm90.h): its kernel template and host-side launcher,
// all that a translation unit needs to instantiate one kernel family
// (gemm_sm90_family.h). Included only by the units that kernels/CMakeLists.txt generates
// from gemm_sm90_instance.cu.in, one per family, each compiled for sm_90a with
// DTR_GEMM_SM90; the kernels keep internal linkage in the one unit that instantiates them.
//
// The kernels: bf16/f16 operands, f32 accumulators, C = alpha * op(A) . op(B) + beta * C
// with A stored [m, k] or [k, m] (transposed) and B stored [k, n] or [n, k] (transposed):
// all four layouts, through wgmma's K-major and MN-major operand modes.
//
// One persistent block per SM walks output tiles of 128 x BN (BN = 256 or 128); its 384
// threads are three warpgroups:
//  - warpgroup 0, the producer: one thread issues bulk tensor copies (TMA) of 128 x 64
//    (or 64 x 128) tiles of A and BN x 64 (or 64 x BN) tiles of B into a ring of
//    shared-memory stages (an MN-major tile as 64-wide boxes, one per 128-byte row),
//    128-byte swizzled, each stage guarded by a "full" and an "empty" mbarrier;
//  - warpgroups 1 and 2, the consumers: each multiplies its 64 rows of the tile with
//    wgmma.mma_async m64nBNk16 (operands straight from shared memory through matrix
//    descriptors), keeps one k-tile of wgmma in flight, releases the stage before it, and
//    at the end of the tile applies alpha and the bias and stores C: with beta == 0 and an
//    aligned C through a shared-memory staging buffer and bulk tensor stores that overlap
//    the next tile, otherwise (beta != 0, unaligned C) straight from its registers. An
//    activation runs only on the staged path, as a rolled loop over the staging buffer
//    after the pre-activation has gone out: inlined into the fully unrolled stores, its
//    code had made every GEMM up to 3x slower (bench/notes/gemm_hopper.md).
// Parts of tiles outside the matrices come in as zeros from the copy engine; the epilogue
// stores only inside C.
#pragma once

#include "dtr/kernels/cuda/cuda_check.h"
#include "dtr/kernels/cuda/gemm_epilogue.cuh"
#include "dtr/kernels/cuda/gemm_sm90_family.h"
#include "dtr/kernels/cuda/gemm_sm90_ptx.cuh"

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <type_traits>

namespace dtr::kernels::cuda::sm90 {

namespace {

using detail::Bf16;
using detail::F16;
using detail::kBK;
using detail::kBM;
using detail::KernelParams;
using detail::kThreads;

template <int BN>
struct Tiles {
  static constexpr int kStages = BN == 256 ? 4 : 6;
  static constexpr int kABytes = kBM * kBK * 2;
  static constexpr int kBBytes = BN * kBK * 2;
  static constexpr int kStageBytes = kABytes + kBBytes;
  // Per consumer warpgroup, a staging buffer for C: 64 rows x 128 columns (two 64 x 64
  // boxes, 128-byte swizzled) that a bulk tensor store writes out.
  static constexpr int kEpiBytes = 64 * 128 * 2;
  // Slack to align the stages to 1024 bytes (the swizzle atom), the stages, the staging
  // buffers, then the mbarriers: 225 KiB of the 227 KiB a block may have.
  static constexpr int kSmemBytes = 1024 + kStages * kStageBytes + 2 * kEpiBytes + 2 * kStages * 8;
};


// Device helpers exist only in the sm_90a pass: elsewhere the kernel is empty and nvcc
// would warn about functions it never references.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

constexpr int kSwizzleBlock = 64 * kBK * 2;  // one 64 x 64 TMA box, 8 KiB

template <class E>
struct Convert;
template <>
struct Convert<Bf16> {
  __device__ static float to_float(uint16_t x) { return __uint_as_float(uint32_t{x} << 16); }
  __device__ static uint16_t from_float(float x) { return __bfloat16_as_ushort(__float2bfloat16_rn(x)); }
};
template <>
struct Convert<F16> {
  __device__ static float to_float(uint16_t x) { return __half2float(__ushort_as_half(x)); }
  __device__ static uint16_t from_float(float x) { return __half_as_ushort(__float2half_rn(x)); }
};

// Output tile t of the persistent walk: batch entry, then groups of 8 tile rows walked
// column by column, so that blocks running together share A and B tiles in L2.
template <int BN>
__device__ inline void tile_of(const KernelParams& p, int t, int& m0, int& n0, int& bz) {
  constexpr int kGroup = 8;
  const int per_batch = p.tiles_m * p.tiles_n;
  bz = t / per_batch;
  const int r = t - bz * per_batch;
  const int per_group = kGroup * p.tiles_n;
  const int first_m = (r / per_group) * kGroup;
  const int group_m = min(p.tiles_m - first_m, kGroup);
  const int in_group = r % per_group;
  m0 = (first_m + in_group % group_m) * kBM;
  n0 = (in_group / group_m) * BN;
}

// The activation applied in place to a warpgroup's staged 64 x 128 tile (16 KiB of
// element pairs; elementwise, so the swizzle does not matter): a rolled loop, so its code
// is not repeated per accumulator.
template <class Cvt>
__device__ inline void activate_staged(uint32_t epi, GemmActivation act, int wg_thread) {
#pragma unroll 1
  for (uint32_t at = epi + 4u * static_cast<uint32_t>(wg_thread); at < epi + 64u * 128u * 2u; at += 4u * 128u) {
    const uint32_t pair = ld_shared_u32(at);
    const float lo = apply_gemm_activation(act, Cvt::to_float(static_cast<uint16_t>(pair & 0xffffu)));
    const float hi = apply_gemm_activation(act, Cvt::to_float(static_cast<uint16_t>(pair >> 16)));
    st_shared_u32(at, gemm_detail::pack_pair(Cvt::from_float(lo), Cvt::from_float(hi)));
  }
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

// In compilation passes other than sm_90a the kernel is empty and declares a block of 32
// threads at most: device_supported() reads that back and declines, should the runtime
// ever load such an image on a Hopper GPU.
#if defined(__CUDA_ARCH_FEAT_SM90_ALL) || !defined(__CUDA_ARCH__)
#define DTR_SM90_MAX_THREADS 384
#else
#define DTR_SM90_MAX_THREADS 32
#endif

// kAKMajor: A stored [m, k] (k unit-stride), else [k, m] (A transposed).
// kBKMajor: B stored [n, k] (k unit-stride, B transposed), else [k, n].
template <class E, int BN, bool kAKMajor, bool kBKMajor>
__global__ void __launch_bounds__(DTR_SM90_MAX_THREADS, 1)
    wgmma_gemm_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                      const __grid_constant__ CUtensorMap map_c, const __grid_constant__ CUtensorMap map_pre,
                      const KernelParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using gemm_detail::add_bias;
  using gemm_detail::pack_pair;
  using Cfg = Tiles<BN>;
  constexpr int kStages = Cfg::kStages;
  extern __shared__ __align__(1024) uint8_t smem[];
  const uint32_t base = (smem_u32(smem) + 1023u) & ~1023u;
  const uint32_t epi_base = base + kStages * Cfg::kStageBytes;
  const uint32_t bars = epi_base + 2 * Cfg::kEpiBytes;
  auto full_bar = [&](int s) { return bars + 8u * static_cast<uint32_t>(s); };
  auto empty_bar = [&](int s) { return bars + 8u * static_cast<uint32_t>(kStages + s); };

  const int warpgroup = static_cast<int>(threadIdx.x) / 128;
  const int wg_thread = static_cast<int>(threadIdx.x) % 128;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(full_bar(s), 1);   // the producer's arrive.expect_tx, then the copies' bytes
      mbar_init(empty_bar(s), 8);  // one arrival per consumer warp
    }
    mbar_init_fence();
  }
  __syncthreads();

  const int tiles = p.tiles_m * p.tiles_n * p.batch;
  const int ktiles = (p.k + kBK - 1) / kBK;

  if (warpgroup == 0) {
    // Producer: few registers; one thread drives the copy engine.
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
    if (wg_thread == 0) {
      tma_prefetch_map(&map_a);
      tma_prefetch_map(&map_b);
      int it = 0;  // k-tiles issued so far, over all tiles of this block
      for (int t = static_cast<int>(blockIdx.x); t < tiles; t += static_cast<int>(gridDim.x)) {
        int m0, n0, bz;
        tile_of<BN>(p, t, m0, n0, bz);
        const int za = p.a_batched ? bz : 0;
        const int zb = p.b_batched ? bz : 0;
        for (int kt = 0; kt < ktiles; ++kt, ++it) {
          const int s = it % kStages;
          if (it >= kStages) mbar_wait(empty_bar(s), static_cast<uint32_t>((it / kStages - 1) & 1));
          const uint32_t sa = base + static_cast<uint32_t>(s * Cfg::kStageBytes);
          const uint32_t sb = sa + Cfg::kABytes;
          mbar_arrive_expect_tx(full_bar(s), Cfg::kStageBytes);
          if constexpr (kAKMajor) {
            tma_load_3d(sa, &map_a, full_bar(s), kt * kBK, m0, za);
          } else {  // two 64 x 64 boxes (k rows of 64 m), one per consumer warpgroup
#pragma unroll
            for (int j = 0; j < kBM / 64; ++j) {
              tma_load_3d(sa + j * kSwizzleBlock, &map_a, full_bar(s), m0 + 64 * j, kt * kBK, za);
            }
          }
          if constexpr (kBKMajor) {
            tma_load_3d(sb, &map_b, full_bar(s), kt * kBK, n0, zb);
          } else {
#pragma unroll
            for (int j = 0; j < BN / 64; ++j) {
              tma_load_3d(sb + j * kSwizzleBlock, &map_b, full_bar(s), n0 + 64 * j, kt * kBK, zb);
            }
          }
        }
      }
    }
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
    const int consumer = warpgroup - 1;
    const int warp = wg_thread / 32;
    const int lane = wg_thread % 32;
    // This warpgroup's 64 rows of A: 64 x 64 elements, 8 KiB into the stage in either layout.
    const uint32_t a_rows = static_cast<uint32_t>(consumer * kSwizzleBlock);
    int it = 0;
    for (int t = static_cast<int>(blockIdx.x); t < tiles; t += static_cast<int>(gridDim.x)) {
      int m0, n0, bz;
      tile_of<BN>(p, t, m0, n0, bz);
      float acc[BN / 2];
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) acc[i] = 0.f;

      for (int kt = 0; kt < ktiles; ++kt, ++it) {
        const int s = it % kStages;
        mbar_wait(full_bar(s), static_cast<uint32_t>((it / kStages) & 1));
        const uint32_t sa = base + static_cast<uint32_t>(s * Cfg::kStageBytes) + a_rows;
        const uint32_t sb = base + static_cast<uint32_t>(s * Cfg::kStageBytes) + Cfg::kABytes;
        fence_regs(acc);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < kBK / 16; ++kk) {
          const uint64_t da = kAKMajor ? smem_desc(sa + kk * 32, 16, 1024)
                                       : smem_desc(sa + kk * 16 * 128, kSwizzleBlock, 1024);
          const uint64_t db = kBKMajor ? smem_desc(sb + kk * 32, 16, 1024)
                                       : smem_desc(sb + kk * 16 * 128, kSwizzleBlock, 1024);
          wgmma_m64k16<std::is_same_v<E, Bf16>, BN, kAKMajor ? 0 : 1, kBKMajor ? 0 : 1>(acc, da, db);
        }
        wgmma_commit();
        fence_regs(acc);
        // Keep this k-tile in flight; the previous one is complete, so its stage is free.
        wgmma_wait<1>();
        fence_regs(acc);
        if (kt > 0 && lane == 0) mbar_arrive(empty_bar((it - 1) % kStages));
      }
      wgmma_wait<0>();
      fence_regs(acc);
      if (lane == 0) mbar_arrive(empty_bar((it - 1) % kStages));

      // Epilogue: accumulator 4i + 2h + j of this thread is row 16 * warp + lane / 4 + 8h,
      // column 8i + 2 * (lane % 4) + j of the warpgroup's 64 x BN result.
      if (p.c_tma) {
        // Stage 64 x 128 columns at a time in shared memory (16-byte chunk c of row r at
        // chunk c ^ (r % 8): the 128-byte swizzle, free of bank conflicts here), then one
        // thread stores the two 64 x 64 boxes with the copy engine, which clips them to C.
        // The stores run on while the warpgroup starts its next tile; the buffer is
        // reused only after they have read it. With an activation the staged values are
        // the pre-activation: stored to pre when wanted, then activated in place.
        const uint32_t epi = epi_base + static_cast<uint32_t>(consumer * Cfg::kEpiBytes);
        const uint32_t lane_off = static_cast<uint32_t>((warp * 16 + lane / 4) * 128 + (lane % 4) * 4);
        const uint32_t swz = static_cast<uint32_t>(lane / 4);  // row % 8, the same for both h
        const uint32_t bar = 1 + static_cast<uint32_t>(consumer);
#pragma unroll
        for (int half = 0; half < BN / 128; ++half) {
          const int col0 = n0 + 128 * half, row0 = m0 + 64 * consumer;
          if (wg_thread == 0) bulk_wait_read();
          named_barrier(bar, 128);
#pragma unroll
          for (int ii = 0; ii < 16; ++ii) {
            const int i = 16 * half + ii;
            const int col = n0 + 8 * i + 2 * (lane % 4);
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const float v0 = add_bias<Convert<E>>(p, col, p.alpha * acc[4 * i + 2 * h]);
              const float v1 = add_bias<Convert<E>>(p, col + 1, p.alpha * acc[4 * i + 2 * h + 1]);
              st_shared_u32(epi + (ii / 8) * 8192 + lane_off + h * 8 * 128 + (((ii % 8) ^ swz) * 16),
                            pack_pair(Convert<E>::from_float(v0), Convert<E>::from_float(v1)));
            }
          }
          fence_proxy_async();
          named_barrier(bar, 128);
          if (p.act != GemmActivation::none) {
            if (p.pre != nullptr) {
              if (wg_thread == 0) {
                tma_store_3d(&map_pre, epi, col0, row0, bz);
                tma_store_3d(&map_pre, epi + 8192, col0 + 64, row0, bz);
                bulk_commit();
                bulk_wait_read();
              }
              named_barrier(bar, 128);
            }
            activate_staged<Convert<E>>(epi, p.act, wg_thread);
            fence_proxy_async();
            named_barrier(bar, 128);
          }
          if (wg_thread == 0) {
            tma_store_3d(&map_c, epi, col0, row0, bz);
            tma_store_3d(&map_c, epi + 8192, col0 + 64, row0, bz);
            bulk_commit();
          }
        }
      } else {
        uint16_t* gc = p.c + bz * p.stride_c;
        uint16_t* gpre = p.pre != nullptr ? p.pre + bz * p.stride_c : nullptr;
        const int row0 = m0 + consumer * 64 + warp * 16 + lane / 4;
        const int col0 = n0 + 2 * (lane % 4);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = row0 + 8 * h;
          if (row >= p.m) continue;
          uint16_t* crow = gc + int64_t{row} * p.ldc;
          uint16_t* prow = gpre != nullptr ? gpre + int64_t{row} * p.ldc : nullptr;
#pragma unroll
          for (int i = 0; i < BN / 8; ++i) {
            gemm_detail::store_pair<Convert<E>>(p, gemm_detail::NoActivation{}, crow, prow, col0 + 8 * i,
                                                acc[4 * i + 2 * h], acc[4 * i + 2 * h + 1]);
          }
        }
      }
    }
    if (p.c_tma && wg_thread == 0) bulk_wait();  // shared memory must outlive the stores
  }
#endif
}

#undef DTR_SM90_MAX_THREADS

// --- host side ----------------------------------------------------------------------

template <class Kernel>
void allow_smem(Kernel kernel, int bytes, std::atomic<uint64_t>& done, int device) {
  const uint64_t bit = uint64_t{1} << (device % 64);
  if ((done.load(std::memory_order_relaxed) & bit) != 0) return;
  DTR_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  done.fetch_or(bit, std::memory_order_relaxed);
}

template <class E, int BN, bool kAKMajor, bool kBKMajor>
void launch_kernel(const CUtensorMap& map_a, const CUtensorMap& map_b, const CUtensorMap& map_c,
                   const CUtensorMap& map_pre, const KernelParams& p, int tiles, int device, cudaStream_t stream) {
  const auto kernel = wgmma_gemm_kernel<E, BN, kAKMajor, kBKMajor>;
  static std::atomic<uint64_t> smem_raised{0};
  allow_smem(kernel, Tiles<BN>::kSmemBytes, smem_raised, device);
  int sms = 0;
  DTR_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const int grid = std::min(tiles, std::max(sms, 1));
  kernel<<<grid, kThreads, Tiles<BN>::kSmemBytes, stream>>>(map_a, map_b, map_c, map_pre, p);
  DTR_CUDA_CHECK_LAUNCH();
}

}  // namespace

template <class E, int BN>
void detail::KernelFamily<E, BN>::launch(bool a_k_major, bool b_k_major, const CUtensorMap& ma, const CUtensorMap& mb,
                                         const CUtensorMap& mc, const CUtensorMap& mp, const KernelParams& p,
                                         int tiles, int device, cudaStream_t stream) {
  if (a_k_major) {
    b_k_major ? launch_kernel<E, BN, true, true>(ma, mb, mc, mp, p, tiles, device, stream)
              : launch_kernel<E, BN, true, false>(ma, mb, mc, mp, p, tiles, device, stream);
  } else {
    b_k_major ? launch_kernel<E, BN, false, true>(ma, mb, mc, mp, p, tiles, device, stream)
              : launch_kernel<E, BN, false, false>(ma, mb, mc, mp, p, tiles, device, stream);
  }
}

template <class E, int BN>
cudaError_t detail::KernelFamily<E, BN>::attributes(cudaFuncAttributes* attr) {
  return cudaFuncGetAttributes(attr, wgmma_gemm_kernel<E, BN, true, true>);
}

}  // namespace dtr::kernels::cuda::sm90
