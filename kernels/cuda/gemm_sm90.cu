// The Hopper GEMM (see gemm_sm90.h): bf16/f16 operands, f32 accumulators, C = alpha *
// op(A) . op(B) + beta * C with A stored [m, k] or [k, m] (transposed) and B stored
// [k, n] or [n, k] (transposed): all four layouts, through wgmma's K-major and
// MN-major operand modes.
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
// stores only inside C. Built for sm_90a only when DTR_GEMM_SM90 is defined (see
// kernels/CMakeLists.txt); otherwise this file provides stubs that decline every call.
#include "kernels/cuda/gemm_sm90.h"

#include "kernels/cuda/cuda_check.h"

#if defined(DTR_GEMM_SM90)
#include "kernels/cuda/gemm_epilogue.cuh"
#include "kernels/cuda/gemm_sm90_ptx.cuh"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <limits>
#include <type_traits>
#endif

namespace dtr::kernels::cuda::sm90 {

#if !defined(DTR_GEMM_SM90)

bool compiled() { return false; }
bool device_supported() { return false; }
bool gemm(const GemmArgs&, cudaStream_t) { return false; }
void set_tile_n(int) {}

#else

namespace {

// Element tags (the kernels' template arguments).
struct Bf16 {};
struct F16 {};

constexpr int kBM = 128;       // rows of a block tile: 64 per consumer warpgroup
constexpr int kBK = 64;        // k per stage: one 128-byte swizzle row of 16-bit elements
constexpr int kThreads = 384;  // producer warpgroup + two consumer warpgroups

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

struct KernelParams {
  uint16_t* c;
  int m, n, k;
  int64_t ldc, stride_c;
  int tiles_m, tiles_n, batch;
  float alpha, beta;
  bool a_batched, b_batched;  // false: one matrix serves every batch entry
  bool c_pairs;               // C (and pre) allow 4-byte stores of two elements
  bool c_tma;                 // beta == 0 and map_c (map_pre) describe C (pre): stage tiles, store them in bulk
  // The epilogue (kernels/gemm_epilogue.h).
  const uint16_t* bias;
  uint16_t* pre;
  GemmActivation act;
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

using EncodeTiled = PFN_cuTensorMapEncodeTiled_v12000;

// The driver's cuTensorMapEncodeTiled, found through the runtime (no -lcuda), or null.
EncodeTiled encode_tiled() {
  static const EncodeTiled fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      return EncodeTiled{nullptr};
    }
    return reinterpret_cast<EncodeTiled>(f);
  }();
  return fn;
}

// A 3-d tensor map (inner, outer, batch) of 16-bit elements, 128-byte swizzled boxes of
// box_inner x box_outer. count == 1 ignores the batch stride.
bool make_map(CUtensorMap* map, Elem elem, const uint16_t* ptr, int64_t inner, int64_t outer, int64_t ld,
              int64_t count, int64_t batch_stride, uint32_t box_inner, uint32_t box_outer) {
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(inner), static_cast<cuuint64_t>(outer),
                              static_cast<cuuint64_t>(count)};
  const int64_t stride2 = count > 1 ? batch_stride : outer * ld;
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(ld * 2), static_cast<cuuint64_t>(stride2 * 2)};
  const cuuint32_t box[3] = {box_inner, box_outer, 1};
  const cuuint32_t elem_strides[3] = {1, 1, 1};
  const CUresult r = encode_tiled()(map, elem == Elem::bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
                                    3, const_cast<uint16_t*>(ptr), dims, strides, box, elem_strides,
                                    CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                    CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS;
}

template <class Kernel>
void allow_smem(Kernel kernel, int bytes, std::atomic<uint64_t>& done, int device) {
  const uint64_t bit = uint64_t{1} << (device % 64);
  if ((done.load(std::memory_order_relaxed) & bit) != 0) return;
  DTR_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  done.fetch_or(bit, std::memory_order_relaxed);
}

template <class E, int BN, bool kAKMajor, bool kBKMajor>
void launch(const CUtensorMap& map_a, const CUtensorMap& map_b, const CUtensorMap& map_c,
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

template <class E, int BN>
void launch_layout(bool a_k_major, bool b_k_major, const CUtensorMap& ma, const CUtensorMap& mb,
                   const CUtensorMap& mc, const CUtensorMap& mp, const KernelParams& p, int tiles, int device,
                   cudaStream_t stream) {
  if (a_k_major) {
    b_k_major ? launch<E, BN, true, true>(ma, mb, mc, mp, p, tiles, device, stream)
              : launch<E, BN, true, false>(ma, mb, mc, mp, p, tiles, device, stream);
  } else {
    b_k_major ? launch<E, BN, false, true>(ma, mb, mc, mp, p, tiles, device, stream)
              : launch<E, BN, false, false>(ma, mb, mc, mp, p, tiles, device, stream);
  }
}

template <int BN>
void launch_bn(Elem elem, bool a_k_major, bool b_k_major, const CUtensorMap& ma, const CUtensorMap& mb,
               const CUtensorMap& mc, const CUtensorMap& mp, const KernelParams& p, int tiles, int device,
               cudaStream_t stream) {
  if (elem == Elem::bf16) {
    launch_layout<Bf16, BN>(a_k_major, b_k_major, ma, mb, mc, mp, p, tiles, device, stream);
  } else {
    launch_layout<F16, BN>(a_k_major, b_k_major, ma, mb, mc, mp, p, tiles, device, stream);
  }
}

// Fraction of the SMs' tile slots that the last wave of `tiles` leaves busy, over all waves.
double wave_efficiency(int64_t tiles, int sms) {
  const int64_t waves = (tiles + sms - 1) / sms;
  return static_cast<double>(tiles) / static_cast<double>(waves * sms);
}

std::atomic<int> g_tile_n{0};

bool aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

}  // namespace

bool compiled() { return true; }

bool device_supported() {
  // Per device: 0 unknown, 1 yes, 2 no.
  static std::atomic<int8_t> state[64] = {};
  int device = 0;
  DTR_CUDA_CHECK(cudaGetDevice(&device));
  std::atomic<int8_t>& known = state[device % 64];
  const int8_t s = known.load(std::memory_order_relaxed);
  if (s != 0) return s == 1;
  int major = 0, minor = 0;
  DTR_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  DTR_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  bool ok = major == 9 && minor == 0 && encode_tiled() != nullptr;
  if (ok) {
    cudaFuncAttributes attr{};
    ok = cudaFuncGetAttributes(&attr, wgmma_gemm_kernel<Bf16, 256, true, true>) == cudaSuccess &&
         attr.maxThreadsPerBlock >= kThreads;
    (void)cudaGetLastError();
  }
  known.store(ok ? 1 : 2, std::memory_order_relaxed);
  return ok;
}

void set_tile_n(int bn) { g_tile_n.store(bn == 128 || bn == 256 ? bn : 0, std::memory_order_relaxed); }

bool gemm(const GemmArgs& g, cudaStream_t stream) {
  constexpr int64_t kIntMax = std::numeric_limits<int>::max();
  if (g.k <= 0 || g.m <= 0 || g.n <= 0 || g.batch <= 0) return false;
  const bool a_batched = g.batch > 1 && g.stride_a != 0;
  const bool b_batched = g.batch > 1 && g.stride_b != 0;
  // The copy engine needs 16-byte aligned addresses and strides.
  if (!aligned16(g.a) || !aligned16(g.b) || g.lda % 8 != 0 || g.ldb % 8 != 0) return false;
  if ((a_batched && (g.stride_a < 0 || g.stride_a % 8 != 0)) || (b_batched && (g.stride_b < 0 || g.stride_b % 8 != 0)))
    return false;

  int device = 0;
  DTR_CUDA_CHECK(cudaGetDevice(&device));
  int sms = 0;
  DTR_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  sms = std::max(sms, 1);
  const int64_t tiles_m = (g.m + kBM - 1) / kBM;
  auto tiles_for = [&](int bn) { return tiles_m * ((g.n + bn - 1) / bn) * g.batch; };
  // 128 x 256 tiles do the most work per byte of shared memory read; 128 x 128 tiles when
  // they fill the last wave of SMs better by over 5% (or n is small). On an H100 this
  // picks the faster width on every shape of bench/cuda_gemm_bench.cu (notes in
  // bench/notes/gemm_hopper.md).
  int bn = g_tile_n.load(std::memory_order_relaxed);
  if (bn == 0) {
    bn = g.n <= 128 || wave_efficiency(tiles_for(128), sms) > wave_efficiency(tiles_for(256), sms) + 0.05 ? 128 : 256;
  }
  const int64_t tiles = tiles_for(bn);
  if (tiles > kIntMax) return false;

  const bool a_k_major = g.trans_a == Transpose::no;
  const bool b_k_major = g.trans_b == Transpose::yes;
  CUtensorMap map_a, map_b;
  const bool a_ok = a_k_major ? make_map(&map_a, g.elem, g.a, g.k, g.m, g.lda, a_batched ? g.batch : 1, g.stride_a,
                                         kBK, kBM)
                              : make_map(&map_a, g.elem, g.a, g.m, g.k, g.lda, a_batched ? g.batch : 1, g.stride_a,
                                         64, kBK);
  if (!a_ok) return false;
  const bool b_ok = b_k_major ? make_map(&map_b, g.elem, g.b, g.k, g.n, g.ldb, b_batched ? g.batch : 1, g.stride_b,
                                         kBK, static_cast<uint32_t>(bn))
                              : make_map(&map_b, g.elem, g.b, g.n, g.k, g.ldb, b_batched ? g.batch : 1, g.stride_b,
                                         64, kBK);
  if (!b_ok) return false;
  // C (and pre) through the copy engine when nothing of C needs reading and both are
  // 16-byte aligned. An activation runs only there: otherwise the mma.sync kernels take it.
  CUtensorMap map_c = map_a, map_pre = map_a;
  const bool has_pre = g.act != GemmActivation::none && g.pre != nullptr;
  const bool c_tma = g.beta == 0.f && aligned16(g.c) && g.ldc % 8 == 0 &&
                     (g.batch == 1 || (g.stride_c > 0 && g.stride_c % 8 == 0)) &&
                     make_map(&map_c, g.elem, g.c, g.n, g.m, g.ldc, g.batch, g.stride_c, 64, 64) &&
                     (!has_pre || (aligned16(g.pre) &&
                                   make_map(&map_pre, g.elem, g.pre, g.n, g.m, g.ldc, g.batch, g.stride_c, 64, 64)));
  if (g.act != GemmActivation::none && !c_tma) return false;

  const KernelParams p{g.c,
                       static_cast<int>(g.m),
                       static_cast<int>(g.n),
                       static_cast<int>(g.k),
                       g.ldc,
                       g.stride_c,
                       static_cast<int>(tiles_m),
                       static_cast<int>((g.n + bn - 1) / bn),
                       static_cast<int>(g.batch),
                       g.alpha,
                       g.beta,
                       a_batched,
                       b_batched,
                       reinterpret_cast<uintptr_t>(g.c) % 4 == 0 && reinterpret_cast<uintptr_t>(g.pre) % 4 == 0 &&
                           g.ldc % 2 == 0 && (g.batch == 1 || g.stride_c % 2 == 0),
                       c_tma,
                       g.bias,
                       has_pre ? g.pre : nullptr,
                       g.act};
  if (bn == 256) {
    launch_bn<256>(g.elem, a_k_major, b_k_major, map_a, map_b, map_c, map_pre, p, static_cast<int>(tiles), device, stream);
  } else {
    launch_bn<128>(g.elem, a_k_major, b_k_major, map_a, map_b, map_c, map_pre, p, static_cast<int>(tiles), device, stream);
  }
  return true;
}

#endif  // DTR_GEMM_SM90

}  // namespace dtr::kernels::cuda::sm90
