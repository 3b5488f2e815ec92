// The Hopper GEMM (see gemm_sm90.h), host side: checks the arguments, picks the block
// tile's width, describes the operands as tensor maps for the copy engine and launches the
// kernel family (gemm_sm90_family.h) for the element type and width; the kernels are in
// gemm_sm90_kernel.cuh. Built only when DTR_GEMM_SM90 is defined (see
// kernels/CMakeLists.txt); otherwise this file provides stubs that decline every call.
#include "dtr/kernels/cuda/gemm_sm90.h"

#include "dtr/kernels/cuda/cuda_check.h"

#if defined(DTR_GEMM_SM90)
#include "dtr/kernels/cuda/gemm_sm90_family.h"

#include <cuda.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <atomic>
#include <limits>
#endif

namespace dtr::kernels::cuda::sm90 {

#if !defined(DTR_GEMM_SM90)

bool compiled() { return false; }
bool device_supported() { return false; }
bool gemm(const GemmArgs&, cudaStream_t) { return false; }
void set_tile_n(int) {}

#else

namespace {

using detail::Bf16;
using detail::F16;
using detail::kBK;
using detail::kBM;
using detail::KernelFamily;
using detail::KernelParams;
using detail::kThreads;

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

template <int BN>
void launch_bn(Elem elem, bool a_k_major, bool b_k_major, const CUtensorMap& ma, const CUtensorMap& mb,
               const CUtensorMap& mc, const CUtensorMap& mp, const KernelParams& p, int tiles, int device,
               cudaStream_t stream) {
  if (elem == Elem::bf16) {
    KernelFamily<Bf16, BN>::launch(a_k_major, b_k_major, ma, mb, mc, mp, p, tiles, device, stream);
  } else {
    KernelFamily<F16, BN>::launch(a_k_major, b_k_major, ma, mb, mc, mp, p, tiles, device, stream);
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
    ok = KernelFamily<Bf16, 256>::attributes(&attr) == cudaSuccess &&
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
