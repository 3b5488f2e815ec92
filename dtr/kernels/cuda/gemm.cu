// GEMM on a CUDA device (see gemm.h). Two kernel families here, and the Hopper wgmma
// path in gemm_sm90.cu that bf16/f16 GEMMs try first on a compute capability 9.0 GPU:
//  - mma_gemm_kernel (bf16, f16): tensor cores through mma.sync.m16n8k16 with f32
//    accumulators. Tiles of A and B sit in shared memory as stored in global memory
//    (k or m/n unit-stride), 16-byte chunks XOR-swizzled so that ldmatrix reads are
//    free of bank conflicts; ldmatrix(.trans) turns either layout into the mma
//    fragments, so all four transpose combinations share one kernel. Loads are either
//    cp.async 16-byte copies in a STAGES-deep pipeline (aligned operands) or guarded
//    element loads (anything else).
// The float kernel is in gemm_simt.cu; the pieces both files use in gemm_common.cuh.
#include "dtr/kernels/cuda/gemm.h"

#include "dtr/kernels/cuda/cuda_check.h"
#include "dtr/kernels/cuda/gemm_common.cuh"
#include "dtr/kernels/cuda/gemm_epilogue.cuh"
#include "dtr/kernels/cuda/gemm_sm90.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

namespace dtr::kernels::cuda {

namespace {

using namespace gemm_detail;

// ---------------------------------------------------------------------------------
// Tensor-core kernel (bf16, f16)

// Per-type conversions and the mma instruction; elements travel as raw 16-bit words.
template <class T>
struct Mma;
template <>
struct Mma<bf16> {
  __device__ static float to_float(uint16_t x) { return __uint_as_float(uint32_t{x} << 16); }
  __device__ static uint16_t from_float(float x) { return __bfloat16_as_ushort(__float2bfloat16_rn(x)); }
  __device__ static void mma(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
};
template <>
struct Mma<f16> {
  __device__ static float to_float(uint16_t x) { return __half2float(__ushort_as_half(x)); }
  __device__ static uint16_t from_float(float x) { return __half_as_ushort(__float2half_rn(x)); }
  __device__ static void mma(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
};

__device__ inline uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte global -> shared copy; with valid == false it writes 16 zero bytes.
__device__ inline void cp_async16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(valid ? 16 : 0)
               : "memory");
}
__device__ inline void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ inline void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

template <bool kTrans>
__device__ inline void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  if constexpr (kTrans) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
  } else {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
  }
}

// Which index of a stored operand is unit-stride: k (A not transposed, B transposed)
// or the outer index, m for A and n for B.
enum class Layout { k_contiguous, outer_contiguous };

// One operand's tile of OUTER x BK elements in shared memory, in its global layout:
// rows of COLS 16-bit elements, the 16-byte chunks of row r XOR-ed with a function of
// r so that 8 consecutive rows at one chunk column fall in 8 different bank groups.
template <int OUTER, int BK, Layout L>
struct OperandTile {
  static constexpr int kRows = L == Layout::k_contiguous ? OUTER : BK;
  static constexpr int kCols = L == Layout::k_contiguous ? BK : OUTER;
  static constexpr int kChunks = kCols / 8;  // per row
  static constexpr int kElems = kRows * kCols;
  static_assert(kChunks == 2 || kChunks == 4 || kChunks % 8 == 0, "unsupported tile width");

  __device__ static int offset_rc(int r, int c) {
    const int swz = kChunks >= 8 ? (r & 7) : (r / (8 / kChunks)) % kChunks;
    return r * kCols + (((c >> 3) ^ swz) << 3) + (c & 7);
  }
  // Element (outer index i, k index kk) of the tile.
  __device__ static int offset(int i, int kk) {
    return L == Layout::k_contiguous ? offset_rc(i, kk) : offset_rc(kk, i);
  }
};

// Copies tiles of a stored operand into shared memory with cp.async, k-tile after
// k-tile; out-of-range chunks become zeros. Needs 16-byte aligned rows and an extent of
// the unit-stride index that is a multiple of 8 (each chunk is wholly in or out).
// Thread t copies the chunks in column t % kChunks of rows t / kChunks + j * kRowStep:
// one pointer and one shared-memory offset per tile, stepped by constants.
template <class Tile, Layout L, int kThreads>
struct AsyncLoader {
  static constexpr int kRowStep = kThreads / Tile::kChunks;
  static constexpr int kCount = Tile::kRows / kRowStep;  // chunks per thread
  static constexpr int kBK = L == Layout::k_contiguous ? Tile::kCols : Tile::kRows;
  // The swizzle repeats every 8 rows, so all of a thread's chunks share one pattern.
  static_assert(kThreads % Tile::kChunks == 0 && kRowStep % 8 == 0 && kCount * kRowStep == Tile::kRows,
                "tile chunks must divide evenly among the threads");

  const uint16_t* ptr;  // this thread's first chunk at k-tile 0
  int64_t row_step;     // elements between a thread's chunks
  int64_t kt_step;      // elements between k-tiles
  uint32_t dst;         // byte offset of the first chunk in a stage
  int outer_left;       // k_contiguous: rows left in the operand below this thread's first row
  bool outer_ok;        // outer_contiguous: this thread's chunk column is inside the operand
  int k_left;           // k indices left after this thread's first k (at k-tile 0)

  __device__ AsyncLoader(const uint16_t* g, int64_t ld, int outer0, int outer_n, int k_n) {
    const int r0 = static_cast<int>(threadIdx.x) / Tile::kChunks;
    const int c0 = (static_cast<int>(threadIdx.x) % Tile::kChunks) * 8;
    dst = 2 * Tile::offset_rc(r0, c0);
    row_step = kRowStep * ld;
    if constexpr (L == Layout::k_contiguous) {
      ptr = g + int64_t{outer0 + r0} * ld + c0;
      kt_step = kBK;
      outer_left = outer_n - outer0 - r0;
      outer_ok = true;
      k_left = k_n - c0;
    } else {
      ptr = g + int64_t{r0} * ld + outer0 + c0;
      kt_step = kBK * ld;
      outer_left = 0;
      outer_ok = outer0 + c0 < outer_n;
      k_left = k_n - r0;
    }
  }

  __device__ void load(uint32_t stage_base, int kt, const uint16_t* fallback) const {
    const uint16_t* src = ptr + kt * kt_step;
    const int k_rel = kt * kBK;
#pragma unroll
    for (int j = 0; j < kCount; ++j) {
      const bool ok = L == Layout::k_contiguous ? (j * kRowStep < outer_left && k_rel < k_left)
                                                : (outer_ok && k_rel + j * kRowStep < k_left);
      cp_async16(stage_base + dst + j * kRowStep * Tile::kCols * 2, ok ? src + j * row_step : fallback, ok);
    }
  }
};

// Byte offsets in a stage of this lane's ldmatrix.x4 rows: the 16 (outer) x 16 (k) block
// t of a warp's slice at k step ks. kOuterHalf says which bit of the lane's matrix index
// (lane / 8) adds 8 along the outer index: bit 0 for A, bit 1 for B (see the fragment
// layouts of mma.m16n8k16). Because the swizzle only XORs the low chunk bits with the row
// (lane-dependent), stepping t or ks becomes one XOR plus one constant add.
template <class Tile, Layout L, int kWarpOuter, int kOuterHalf>
struct FragOffsets {
  static constexpr bool kXorStep = L == Layout::k_contiguous || kWarpOuter >= 64;
  uint32_t base;
  int i0, k0, li;  // for the general path

  __device__ FragOffsets(int warp_outer0, int lane) {
    const int q = lane >> 3;
    li = lane & 7;
    i0 = warp_outer0 + ((q >> kOuterHalf) & 1) * 8;
    k0 = ((q >> (1 - kOuterHalf)) & 1) * 8;
    base = 2 * offset(0, 0);
  }
  __device__ int offset(int t, int ks) const {
    return L == Layout::k_contiguous ? Tile::offset(i0 + t * 16 + li, k0 + ks * 16)
                                     : Tile::offset(i0 + t * 16, k0 + ks * 16 + li);
  }
  __device__ uint32_t at(int t, int ks) const {
    if constexpr (!kXorStep) {
      return 2 * offset(t, ks);
    } else if constexpr (L == Layout::k_contiguous) {
      return (base ^ (ks * 32)) + t * 16 * Tile::kCols * 2;
    } else {
      return (base ^ (t * 32)) + ks * 16 * Tile::kCols * 2;
    }
  }
};

// The same tile with bounds-checked element loads: any shape, any alignment.
template <class Tile, Layout L, int kThreads>
__device__ inline void load_tile_guarded(uint16_t* dst, const uint16_t* g, int64_t ld, int outer0,
                                         int outer_n, int k0, int k_n) {
  static_assert(Tile::kElems % kThreads == 0, "tile elements must divide among the threads");
#pragma unroll 4
  for (int j = 0; j < Tile::kElems / kThreads; ++j) {
    const int e = static_cast<int>(threadIdx.x) + j * kThreads;
    const int r = e / Tile::kCols;
    const int c = e % Tile::kCols;
    const int outer = outer0 + (L == Layout::k_contiguous ? r : c);
    const int kk = k0 + (L == Layout::k_contiguous ? c : r);
    const bool ok = outer < outer_n && kk < k_n;
    const int64_t off = L == Layout::k_contiguous ? int64_t{outer} * ld + kk : int64_t{kk} * ld + outer;
    dst[Tile::offset_rc(r, c)] = ok ? g[off] : uint16_t{0};
  }
}

enum class Load { async, guarded };

// Block tile BM x BN x BK, WARPS_M x WARPS_N warps, STAGES shared-memory buffers.
template <int BM_, int BN_, int BK_, int WARPS_M_, int WARPS_N_, int STAGES_, int MIN_BLOCKS_>
struct TileConfig {
  static constexpr int BM = BM_, BN = BN_, BK = BK_, WARPS_M = WARPS_M_, WARPS_N = WARPS_N_;
  static constexpr int STAGES = STAGES_, MIN_BLOCKS = MIN_BLOCKS_;
  static constexpr int kThreads = WARPS_M * WARPS_N * 32;
  static constexpr int WTM = BM / WARPS_M, WTN = BN / WARPS_N;  // warp tile
  static constexpr int MI = WTM / 16, NI = WTN / 8;               // mma tiles per warp
  static constexpr int kSmemBytes = STAGES * (BM + BN) * BK * 2;
  static_assert(WTM % 16 == 0 && WTN % 16 == 0 && BK % 16 == 0, "bad tile config");
};

// kAct: whether the epilogue applies p.act; kernels without it compile no activation code
// (see gemm_epilogue.cuh).
template <class Cfg, class T, Transpose TA, Transpose TB, Load LOAD, bool kAct>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::MIN_BLOCKS)
    mma_gemm_kernel(const GemmParams<uint16_t> p) {
  constexpr Layout LA = TA == Transpose::no ? Layout::k_contiguous : Layout::outer_contiguous;
  constexpr Layout LB = TB == Transpose::yes ? Layout::k_contiguous : Layout::outer_contiguous;
  using TileA = OperandTile<Cfg::BM, Cfg::BK, LA>;
  using TileB = OperandTile<Cfg::BN, Cfg::BK, LB>;
  constexpr int kStages = Cfg::STAGES;
  constexpr int kMI = Cfg::MI, kNI = Cfg::NI;

  extern __shared__ __align__(128) uint16_t smem[];
  uint16_t* const sa = smem;
  uint16_t* const sb = smem + kStages * TileA::kElems;
  const uint32_t sa_addr = smem_addr(sa);
  const uint32_t sb_addr = smem_addr(sb);

  int tm, tn;
  tile_coords(ceil_div(p.m, Cfg::BM), ceil_div(p.n, Cfg::BN), tm, tn);
  const int m0 = tm * Cfg::BM;
  const int n0 = tn * Cfg::BN;
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int wm0 = (warp / Cfg::WARPS_N) * Cfg::WTM;
  const int wn0 = (warp % Cfg::WARPS_N) * Cfg::WTN;
  const int ktiles = ceil_div(p.k, Cfg::BK);
  const FragOffsets<TileA, LA, Cfg::WTM, 0> fa(wm0, lane);
  const FragOffsets<TileB, LB, Cfg::WTN, 1> fb(wn0, lane);
  constexpr int kKSteps = Cfg::BK / 16;

  for (int64_t bz = blockIdx.y; bz < p.batch; bz += gridDim.y) {
    const uint16_t* ga = p.a + bz * p.stride_a;
    const uint16_t* gb = p.b + bz * p.stride_b;
    const AsyncLoader<TileA, LA, Cfg::kThreads> load_a(ga, p.lda, m0, p.m, p.k);
    const AsyncLoader<TileB, LB, Cfg::kThreads> load_b(gb, p.ldb, n0, p.n, p.k);

    auto load_stage = [&](int stage, int kt) {
      if (kt < ktiles) {
        if constexpr (LOAD == Load::async) {
          load_a.load(sa_addr + 2 * stage * TileA::kElems, kt, ga);
          load_b.load(sb_addr + 2 * stage * TileB::kElems, kt, gb);
        } else {
          const int k0 = kt * Cfg::BK;
          load_tile_guarded<TileA, LA, Cfg::kThreads>(sa + stage * TileA::kElems, ga, p.lda, m0, p.m,
                                                      k0, p.k);
          load_tile_guarded<TileB, LB, Cfg::kThreads>(sb + stage * TileB::kElems, gb, p.ldb, n0, p.n,
                                                      k0, p.k);
        }
      }
      if constexpr (LOAD == Load::async) cp_async_commit();  // empty groups keep the count
    };

    float acc[kMI][kNI][4];
#pragma unroll
    for (int mi = 0; mi < kMI; ++mi)
#pragma unroll
      for (int ni = 0; ni < kNI; ++ni)
#pragma unroll
        for (int r = 0; r < 4; ++r) acc[mi][ni][r] = 0.f;

#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) load_stage(s, s);

    for (int kt = 0; kt < ktiles; ++kt) {
      if constexpr (LOAD == Load::async) cp_async_wait<kStages - 2>();
      __syncthreads();  // tile kt has landed; every warp is done with tile kt - 1
      load_stage((kt + kStages - 1) % kStages, kt + kStages - 1);

      const int stage = kt % kStages;
      const uint32_t a_base = sa_addr + 2 * stage * TileA::kElems;
      const uint32_t b_base = sb_addr + 2 * stage * TileB::kElems;
      // Fragments in two buffers: those of step ks + 1 load while step ks multiplies.
      uint32_t af[2][kMI][4];
      uint32_t bfr[2][kNI][2];
      auto load_frags = [&](int buf, int ks) {
#pragma unroll
        for (int mi = 0; mi < kMI; ++mi) {
          ldmatrix_x4<LA == Layout::outer_contiguous>(af[buf][mi], a_base + fa.at(mi, ks));
        }
#pragma unroll
        for (int nj = 0; nj < kNI / 2; ++nj) {
          uint32_t r[4];
          ldmatrix_x4<LB == Layout::outer_contiguous>(r, b_base + fb.at(nj, ks));
          bfr[buf][2 * nj][0] = r[0];
          bfr[buf][2 * nj][1] = r[1];
          bfr[buf][2 * nj + 1][0] = r[2];
          bfr[buf][2 * nj + 1][1] = r[3];
        }
      };
      load_frags(0, 0);
#pragma unroll
      for (int ks = 0; ks < kKSteps; ++ks) {
        if (ks + 1 < kKSteps) load_frags((ks + 1) & 1, ks + 1);
#pragma unroll
        for (int mi = 0; mi < kMI; ++mi)
#pragma unroll
          for (int ni = 0; ni < kNI; ++ni) Mma<T>::mma(acc[mi][ni], af[ks & 1][mi], bfr[ks & 1][ni]);
      }
    }

    // Epilogue: fragment (mi, ni) holds rows g and g + 8, columns 2t and 2t + 1.
    uint16_t* gc = p.c + bz * p.stride_c;
    uint16_t* gpre = p.pre != nullptr ? p.pre + bz * p.stride_c : nullptr;
    const int g = lane >> 2;
    const int t = lane & 3;
#pragma unroll
    for (int mi = 0; mi < kMI; ++mi) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = m0 + wm0 + mi * 16 + g + h * 8;
        if (row >= p.m) continue;
        uint16_t* crow = gc + int64_t{row} * p.ldc;
        uint16_t* prow = gpre != nullptr ? gpre + int64_t{row} * p.ldc : nullptr;
#pragma unroll
        for (int ni = 0; ni < kNI; ++ni) {
          const int col = n0 + wn0 + ni * 8 + 2 * t;
          if constexpr (kAct) {
            store_pair<Mma<T>>(p, p.act, crow, prow, col, acc[mi][ni][2 * h], acc[mi][ni][2 * h + 1]);
          } else {
            store_pair<Mma<T>>(p, NoActivation{}, crow, prow, col, acc[mi][ni][2 * h], acc[mi][ni][2 * h + 1]);
          }
        }
      }
    }
    if constexpr (LOAD == Load::async) cp_async_wait<0>();
    __syncthreads();  // before the next batch entry refills shared memory
  }
}

// Tile shapes. Aligned path: 128x128x64, 8 warps of 64x32, 3 stages (96 KiB), two blocks
// per SM; on an H100 it beat 128x128x32 (4 stages), 128x256x64 and 256x128x64 on the
// square and GPT-2 shapes of bench/cuda_gemm_bench.cu, by up to 25% (within 2% at 8192).
// Guarded path: a small tile, so that odd small shapes waste little.
using AlignedTiles = TileConfig<128, 128, 64, 2, 4, 3, 2>;
using SmallTiles = TileConfig<64, 64, 32, 2, 2, 2, 4>;

// Raises a kernel's dynamic shared-memory limit, once per device (`done` is a bit per device).
void allow_smem(const void* kernel, int bytes, std::atomic<uint64_t>& done) {
  int device = 0;
  DTR_CUDA_CHECK(cudaGetDevice(&device));
  const uint64_t bit = uint64_t{1} << (device % 64);
  if ((done.load(std::memory_order_relaxed) & bit) != 0) return;
  DTR_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  done.fetch_or(bit, std::memory_order_relaxed);
}


template <class Cfg, class T, Transpose TA, Transpose TB, Load LOAD, bool kAct>
void launch_mma_act(const GemmParams<uint16_t>& p, cudaStream_t stream) {
  const auto kernel = mma_gemm_kernel<Cfg, T, TA, TB, LOAD, kAct>;
  static std::atomic<uint64_t> smem_raised{0};
  allow_smem(reinterpret_cast<const void*>(kernel), Cfg::kSmemBytes, smem_raised);
  kernel<<<gemm_grid(p.m, p.n, Cfg::BM, Cfg::BN, p.batch), Cfg::kThreads, Cfg::kSmemBytes, stream>>>(p);
  DTR_CUDA_CHECK_LAUNCH();
}

template <class Cfg, class T, Transpose TA, Transpose TB, Load LOAD>
void launch_mma_typed(const GemmParams<uint16_t>& p, cudaStream_t stream) {
  if (p.act == GemmActivation::none) {
    launch_mma_act<Cfg, T, TA, TB, LOAD, false>(p, stream);
  } else {
    launch_mma_act<Cfg, T, TA, TB, LOAD, true>(p, stream);
  }
}

template <class Cfg, class T, Load LOAD>
void launch_mma(Transpose ta, Transpose tb, const GemmParams<uint16_t>& p, cudaStream_t stream) {
  using enum Transpose;
  if (ta == no && tb == no) launch_mma_typed<Cfg, T, no, no, LOAD>(p, stream);
  if (ta == no && tb == yes) launch_mma_typed<Cfg, T, no, yes, LOAD>(p, stream);
  if (ta == yes && tb == no) launch_mma_typed<Cfg, T, yes, no, LOAD>(p, stream);
  if (ta == yes && tb == yes) launch_mma_typed<Cfg, T, yes, yes, LOAD>(p, stream);
}

// ---------------------------------------------------------------------------------
// Launchers

std::string dims_message(const char* what, int64_t value, int64_t bound) {
  return std::string("gemm: ") + what + " = " + std::to_string(value) + " must be >= " + std::to_string(bound);
}

bool aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

thread_local GemmPath t_last_path = GemmPath::none;
std::atomic<bool> g_wgmma_enabled{true};

}  // namespace

GemmPath gemm_last_path() { return t_last_path; }

bool gemm_wgmma_available() {
  return g_wgmma_enabled.load(std::memory_order_relaxed) && sm90::compiled() && sm90::device_supported();
}

bool gemm_enable_wgmma(bool enable) { return g_wgmma_enabled.exchange(enable, std::memory_order_relaxed); }

template <class T>
void gemm_batched(int64_t batch, Transpose trans_a, Transpose trans_b, int64_t m, int64_t n, int64_t k,
                  float alpha, const T* a, int64_t lda, int64_t batch_stride_a, const T* b, int64_t ldb,
                  int64_t batch_stride_b, float beta, T* c, int64_t ldc, int64_t batch_stride_c,
                  cudaStream_t stream, const GemmEpilogue<T>& epilogue_in) {
  const GemmEpilogue<T> epilogue = epilogue_in.normalized();
  constexpr int64_t kIntMax = std::numeric_limits<int>::max();
  DTR_CUDA_KERNEL_CHECK(m >= 0 && n >= 0 && k >= 0 && batch >= 0,
                        "gemm: negative size (m = " + std::to_string(m) + ", n = " + std::to_string(n) +
                            ", k = " + std::to_string(k) + ", batch = " + std::to_string(batch) + ")");
  DTR_CUDA_KERNEL_CHECK(m <= kIntMax && n <= kIntMax && k <= kIntMax, "gemm: m, n and k must fit in int32");
  DTR_CUDA_KERNEL_CHECK(lda >= std::max<int64_t>(1, trans_a == Transpose::no ? k : m),
                        dims_message("lda", lda, std::max<int64_t>(1, trans_a == Transpose::no ? k : m)));
  DTR_CUDA_KERNEL_CHECK(ldb >= std::max<int64_t>(1, trans_b == Transpose::no ? n : k),
                        dims_message("ldb", ldb, std::max<int64_t>(1, trans_b == Transpose::no ? n : k)));
  DTR_CUDA_KERNEL_CHECK(ldc >= std::max<int64_t>(1, n), dims_message("ldc", ldc, std::max<int64_t>(1, n)));
  DTR_CUDA_KERNEL_CHECK(batch <= 1 || batch_stride_c != 0,
                        "gemm: C's batch stride must be nonzero when batch > 1 (entries would overlap)");
  t_last_path = GemmPath::none;
  if (m == 0 || n == 0 || batch == 0) return;
  // alpha == 0 or k == 0: C = beta * C, reading neither A nor B. The product term is then
  // +0, as on the CPU, not alpha * 0 (-0 for a negative alpha, NaN for an infinite one).
  const int k_used = alpha == 0.f ? 0 : static_cast<int>(k);
  const float alpha_used = k_used == 0 ? 0.f : alpha;

  if constexpr (std::is_same_v<T, float>) {
    const GemmParams<float> p{a,     b,         c,          static_cast<int>(m), static_cast<int>(n),
                              k_used, lda,      ldb,        ldc,                 batch_stride_a,
                              batch_stride_b, batch_stride_c, batch,             alpha_used,
                              beta,  false,     epilogue.bias, epilogue.pre,     epilogue.activation};
    launch_simt(trans_a, trans_b, p, stream);
    t_last_path = GemmPath::simt;
  } else {
    if (k_used > 0 && gemm_wgmma_available()) {
      const sm90::GemmArgs args{std::is_same_v<T, bf16> ? sm90::Elem::bf16 : sm90::Elem::f16,
                                trans_a, trans_b,
                                reinterpret_cast<const uint16_t*>(a), reinterpret_cast<const uint16_t*>(b),
                                reinterpret_cast<uint16_t*>(c), m, n, k_used, lda, ldb, ldc,
                                batch_stride_a, batch_stride_b, batch_stride_c, batch, alpha, beta,
                                reinterpret_cast<const uint16_t*>(epilogue.bias),
                                reinterpret_cast<uint16_t*>(epilogue.pre), epilogue.activation};
      if (sm90::gemm(args, stream)) {
        t_last_path = GemmPath::wgmma;
        return;
      }
    }
    const auto* a16 = reinterpret_cast<const uint16_t*>(a);
    const auto* b16 = reinterpret_cast<const uint16_t*>(b);
    auto* c16 = reinterpret_cast<uint16_t*>(c);
    const bool c_pairs = reinterpret_cast<uintptr_t>(c) % 4 == 0 &&
                         reinterpret_cast<uintptr_t>(epilogue.pre) % 4 == 0 && ldc % 2 == 0 &&
                         (batch == 1 || batch_stride_c % 2 == 0);
    const GemmParams<uint16_t> p{a16,
                                 b16,
                                 c16,
                                 static_cast<int>(m),
                                 static_cast<int>(n),
                                 k_used,
                                 lda,
                                 ldb,
                                 ldc,
                                 batch_stride_a,
                                 batch_stride_b,
                                 batch_stride_c,
                                 batch,
                                 alpha_used,
                                 beta,
                                 c_pairs,
                                 reinterpret_cast<const uint16_t*>(epilogue.bias),
                                 reinterpret_cast<uint16_t*>(epilogue.pre),
                                 epilogue.activation};
    // The cp.async path copies 16-byte chunks along each operand's unit-stride index.
    const bool a_vec = aligned16(a) && lda % 8 == 0 && (batch == 1 || batch_stride_a % 8 == 0) &&
                       (trans_a == Transpose::no ? k : m) % 8 == 0;
    const bool b_vec = aligned16(b) && ldb % 8 == 0 && (batch == 1 || batch_stride_b % 8 == 0) &&
                       (trans_b == Transpose::yes ? k : n) % 8 == 0;
    if ((a_vec && b_vec) || k_used == 0) {
      launch_mma<AlignedTiles, T, Load::async>(trans_a, trans_b, p, stream);
      t_last_path = GemmPath::mma_sync;
    } else {
      launch_mma<SmallTiles, T, Load::guarded>(trans_a, trans_b, p, stream);
      t_last_path = GemmPath::mma_sync_guarded;
    }
  }
}

template <class T>
void gemm(Transpose trans_a, Transpose trans_b, int64_t m, int64_t n, int64_t k, float alpha, const T* a,
          int64_t lda, const T* b, int64_t ldb, float beta, T* c, int64_t ldc, cudaStream_t stream,
          const GemmEpilogue<T>& epilogue) {
  gemm_batched<T>(1, trans_a, trans_b, m, n, k, alpha, a, lda, 0, b, ldb, 0, beta, c, ldc, 0, stream, epilogue);
}

#define DTR_INSTANTIATE_GEMM(T)                                                                           \
  template void gemm<T>(Transpose, Transpose, int64_t, int64_t, int64_t, float, const T*, int64_t,          \
                        const T*, int64_t, float, T*, int64_t, cudaStream_t, const GemmEpilogue<T>&);        \
  template void gemm_batched<T>(int64_t, Transpose, Transpose, int64_t, int64_t, int64_t, float, const T*, \
                                int64_t, int64_t, const T*, int64_t, int64_t, float, T*, int64_t, int64_t, \
                                cudaStream_t, const GemmEpilogue<T>&);
DTR_INSTANTIATE_GEMM(float)
DTR_INSTANTIATE_GEMM(::dtr::bf16)
DTR_INSTANTIATE_GEMM(::dtr::f16)

}  // namespace dtr::kernels::cuda
