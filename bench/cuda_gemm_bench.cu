// dtr's handwritten CUDA GEMM against cuBLAS (the yardstick only: dtr's training
// path never calls it), on the same buffers: bf16 square sizes and the GPT-2 124M
// layer shapes (tokens = 8192), and f32 at 4096; then what the bias and GELU epilogue adds.
//
// Each case: random inputs, several input sets rotated so that they do not sit in
// L2, 5 warm-up runs, then the median of 25 runs timed with CUDA events. TFLOP/s
// counts 2*m*n*k. Columns: dtr's mma.sync kernel (wgmma path switched off), dtr's
// default dispatch ("dtr": the wgmma path on an H100 where it applies; "path" says
// which ran), the wgmma kernel forced to 128- and 256-wide tiles, cuBLAS, and the
// relative norm of the difference between dtr's default result and cuBLAS's.
//   cuda_gemm_bench [--quick]   (--quick: square 4096 NN and GPT-2's shapes that matter most)
#include "dtr/kernels/cuda/gemm.h"
#include "dtr/kernels/cuda/gemm_sm90.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <type_traits>
#include <vector>

using dtr::kernels::Transpose;

namespace {

#define BENCH_CUDA(expr)                                                                      \
  do {                                                                                        \
    cudaError_t s_ = (expr);                                                                  \
    if (s_ != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(s_)); \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)
#define BENCH_CUBLAS(expr)                                                          \
  do {                                                                              \
    cublasStatus_t s_ = (expr);                                                     \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                              \
      std::fprintf(stderr, "%s:%d: %s: cuBLAS status %d\n", __FILE__, __LINE__, #expr, \
                   static_cast<int>(s_));                                           \
      std::exit(1);                                                                 \
    }                                                                               \
  } while (0)

struct Problem {
  const char* name;
  int m, n, k;
  Transpose ta, tb;
  int a_pad = 0;       // elements past each stored row of A (padded rows, like GPT-2's dlogits)
  bool quick = false;  // also run with --quick
};

template <class T>
cudaDataType_t cuda_type() {
  if constexpr (std::is_same_v<T, float>) return CUDA_R_32F;
  if constexpr (std::is_same_v<T, dtr::bf16>) return CUDA_R_16BF;
  return CUDA_R_16F;
}

template <class T>
float median_ms(int sets, const std::vector<T*>& a, const std::vector<T*>& b, T* c, const auto& call) {
  constexpr int kWarmup = 5, kRuns = 25;
  for (int i = 0; i < kWarmup; ++i) call(a[i % sets], b[i % sets], c);
  BENCH_CUDA(cudaDeviceSynchronize());
  std::vector<cudaEvent_t> ev(2 * kRuns);
  for (auto& e : ev) BENCH_CUDA(cudaEventCreate(&e));
  for (int i = 0; i < kRuns; ++i) {
    BENCH_CUDA(cudaEventRecord(ev[2 * i]));
    call(a[i % sets], b[i % sets], c);
    BENCH_CUDA(cudaEventRecord(ev[2 * i + 1]));
  }
  BENCH_CUDA(cudaDeviceSynchronize());
  BENCH_CUDA(cudaGetLastError());
  std::vector<float> ms(kRuns);
  for (int i = 0; i < kRuns; ++i) BENCH_CUDA(cudaEventElapsedTime(&ms[i], ev[2 * i], ev[2 * i + 1]));
  for (auto& e : ev) BENCH_CUDA(cudaEventDestroy(e));
  std::nth_element(ms.begin(), ms.begin() + kRuns / 2, ms.end());
  return ms[kRuns / 2];
}

template <class T>
double rel_diff(const T* x, const T* y, size_t n) {
  std::vector<T> hx(n), hy(n);
  BENCH_CUDA(cudaMemcpy(hx.data(), x, n * sizeof(T), cudaMemcpyDeviceToHost));
  BENCH_CUDA(cudaMemcpy(hy.data(), y, n * sizeof(T), cudaMemcpyDeviceToHost));
  double d2 = 0, r2 = 0;
  for (size_t i = 0; i < n; ++i) {
    const double a = static_cast<float>(hx[i]), b = static_cast<float>(hy[i]);
    d2 += (a - b) * (a - b);
    r2 += b * b;
  }
  return std::sqrt(d2 / std::max(r2, 1e-30));
}

template <class T>
void run(cublasHandle_t handle, const Problem& p, const char* dtype) {
  // Row-major leading dims of the stored operands.
  const int lda = (p.ta == Transpose::no ? p.k : p.m) + p.a_pad;
  const int ldb = p.tb == Transpose::no ? p.n : p.k;
  const int ldc = p.n;
  const size_t a_elems = size_t(p.ta == Transpose::no ? p.m : p.k) * lda;
  const size_t b_elems = size_t(p.k) * p.n, c_elems = size_t(p.m) * p.n;
  const size_t set_bytes = (a_elems + b_elems) * sizeof(T);
  const int sets = static_cast<int>(std::clamp<size_t>((size_t{256} << 20) / set_bytes, 1, 16));
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<T> host(std::max(a_elems, b_elems));
  std::vector<T*> a(sets), b(sets);
  for (int s = 0; s < sets; ++s) {
    BENCH_CUDA(cudaMalloc(&a[s], a_elems * sizeof(T)));
    BENCH_CUDA(cudaMalloc(&b[s], b_elems * sizeof(T)));
    for (size_t i = 0; i < a_elems; ++i) host[i] = T(dist(rng));
    BENCH_CUDA(cudaMemcpy(a[s], host.data(), a_elems * sizeof(T), cudaMemcpyHostToDevice));
    for (size_t i = 0; i < b_elems; ++i) host[i] = T(dist(rng));
    BENCH_CUDA(cudaMemcpy(b[s], host.data(), b_elems * sizeof(T), cudaMemcpyHostToDevice));
  }
  T *c_dtr = nullptr, *c_ref = nullptr;
  BENCH_CUDA(cudaMalloc(&c_dtr, c_elems * sizeof(T)));
  BENCH_CUDA(cudaMalloc(&c_ref, c_elems * sizeof(T)));

  auto dtr_call = [&](const T* a_, const T* b_, T* c_) {
    dtr::kernels::cuda::gemm<T>(p.ta, p.tb, p.m, p.n, p.k, 1.f, a_, lda, b_, ldb, 0.f, c_, ldc, nullptr);
  };
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the operands.
  auto cublas_call = [&](const T* a_, const T* b_, T* c_) {
    const float alpha = 1.f, beta = 0.f;
    BENCH_CUBLAS(cublasGemmEx(handle, p.tb == Transpose::yes ? CUBLAS_OP_T : CUBLAS_OP_N,
                              p.ta == Transpose::yes ? CUBLAS_OP_T : CUBLAS_OP_N, p.n, p.m, p.k, &alpha, b_,
                              cuda_type<T>(), ldb, a_, cuda_type<T>(), lda, &beta, c_, cuda_type<T>(), ldc,
                              CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  };
  namespace kc = dtr::kernels::cuda;
  const double flops = 2.0 * p.m * p.n * p.k;
  auto tflops = [&](float ms) { return flops / (ms * 1e9); };
  const bool half = !std::is_same_v<T, float>;
  const bool wgmma = half && kc::gemm_wgmma_available();

  kc::gemm_enable_wgmma(false);
  const float ms_mma = median_ms<T>(sets, a, b, c_dtr, dtr_call);
  kc::gemm_enable_wgmma(true);
  float ms_wg128 = 0, ms_wg256 = 0;
  if (wgmma) {
    kc::sm90::set_tile_n(128);
    ms_wg128 = median_ms<T>(sets, a, b, c_dtr, dtr_call);
    kc::sm90::set_tile_n(256);
    ms_wg256 = median_ms<T>(sets, a, b, c_dtr, dtr_call);
    kc::sm90::set_tile_n(0);
  }
  const float ms_dtr = median_ms<T>(sets, a, b, c_dtr, dtr_call);
  const kc::GemmPath path = kc::gemm_last_path();
  const float ms_ref = median_ms<T>(sets, a, b, c_ref, cublas_call);
  dtr_call(a[0], b[0], c_dtr);
  cublas_call(a[0], b[0], c_ref);
  BENCH_CUDA(cudaDeviceSynchronize());
  const double diff = rel_diff(c_dtr, c_ref, c_elems);
  const char* path_name = path == kc::GemmPath::wgmma ? "wgmma"
                          : path == kc::GemmPath::simt ? "simt"
                          : path == kc::GemmPath::mma_sync ? "mma.sync"
                                                           : "other";
  auto opt = [&](float ms, char* buf) {
    if (ms > 0) std::snprintf(buf, 16, "%7.1f", tflops(ms));
    else std::snprintf(buf, 16, "%7s", "-");
    return buf;
  };
  char b128[16], b256[16];
  std::printf("%-13s %-4s %c%c %5d %5d %5d  %8.1f %7.1f %7s %7s %7.1f  %5.1f%% %5.1f%%  %.1e  %s\n", p.name, dtype,
              p.ta == Transpose::yes ? 'T' : 'N', p.tb == Transpose::yes ? 'T' : 'N', p.m, p.n, p.k, tflops(ms_mma),
              tflops(ms_dtr), opt(ms_wg128, b128), opt(ms_wg256, b256), tflops(ms_ref),
              100.0 * tflops(ms_mma) / tflops(ms_ref), 100.0 * tflops(ms_dtr) / tflops(ms_ref), diff, path_name);
  std::fflush(stdout);
  for (int s = 0; s < sets; ++s) {
    BENCH_CUDA(cudaFree(a[s]));
    BENCH_CUDA(cudaFree(b[s]));
  }
  BENCH_CUDA(cudaFree(c_dtr));
  BENCH_CUDA(cudaFree(c_ref));
}

}  // namespace

// What the epilogue costs (dtr/kernels/gemm_epilogue.h): one GEMM of `p` plain, with a
// bias row, and with bias, GELU and the pre-activation stored, as a Linear layer and
// GPT-2's feed-forward up projection run them.
template <class T>
void run_epilogue(const Problem& p, const char* dtype) {
  const size_t a_elems = size_t(p.m) * p.k, b_elems = size_t(p.k) * p.n, c_elems = size_t(p.m) * p.n;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  auto device_random = [&](size_t n) {
    std::vector<T> host(n);
    for (T& x : host) x = T(dist(rng));
    T* d = nullptr;
    BENCH_CUDA(cudaMalloc(&d, n * sizeof(T)));
    BENCH_CUDA(cudaMemcpy(d, host.data(), n * sizeof(T), cudaMemcpyHostToDevice));
    return d;
  };
  T* a = device_random(a_elems);
  T* b = device_random(b_elems);
  T* bias = device_random(size_t(p.n));
  T *c = nullptr, *pre = nullptr;
  BENCH_CUDA(cudaMalloc(&c, c_elems * sizeof(T)));
  BENCH_CUDA(cudaMalloc(&pre, c_elems * sizeof(T)));
  const int lda = p.ta == Transpose::no ? p.k : p.m;
  const int ldb = p.tb == Transpose::no ? p.n : p.k;
  using dtr::kernels::GemmActivation;
  auto timed = [&](const dtr::kernels::GemmEpilogue<T>& e) {
    auto call = [&](const T* a_, const T* b_, T* c_) {
      dtr::kernels::cuda::gemm<T>(p.ta, p.tb, p.m, p.n, p.k, 1.f, a_, lda, b_, ldb, 0.f, c_, p.n, nullptr, e);
    };
    return median_ms<T>(1, {a}, {b}, c, call);
  };
  const float plain = timed({});
  const float with_bias = timed({.bias = bias});
  const float with_gelu = timed({.bias = bias, .activation = GemmActivation::gelu_tanh, .pre = pre});
  const double flops = 2.0 * p.m * p.n * p.k;
  std::printf("%-13s %-4s %5d %5d %5d  plain %6.1f TFLOP/s (%.3f ms), +bias %.3f ms (%+.1f%%), "
              "+bias+GELU+pre %.3f ms (%+.1f%%)\n",
              p.name, dtype, p.m, p.n, p.k, flops / (plain * 1e9), plain, with_bias,
              100.0 * (with_bias / plain - 1), with_gelu, 100.0 * (with_gelu / plain - 1));
  for (T* ptr : {a, b, bias, c, pre}) BENCH_CUDA(cudaFree(ptr));
}

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  cudaDeviceProp prop{};
  BENCH_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs, L2 %d MiB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);
  cublasHandle_t handle = nullptr;
  BENCH_CUBLAS(cublasCreate(&handle));
  BENCH_CUBLAS(cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH));  // f32 stays f32 (no TF32)

  constexpr Transpose N = Transpose::no, T = Transpose::yes;
  // GPT-2 124M, tokens = 8192, C = 768: y = x . W^T with W stored [out, in] (B transposed).
  std::vector<Problem> bf16_problems = {
      {"square", 1024, 1024, 1024, N, N},
      {"square", 2048, 2048, 2048, N, N},
      {"square", 4096, 4096, 4096, N, N, 0, true},
      {"square", 4096, 4096, 4096, N, T},
      {"square", 4096, 4096, 4096, T, N},
      {"square", 8192, 8192, 8192, N, N},
      {"gpt2.qkv", 8192, 2304, 768, N, T, 0, true},
      {"gpt2.attproj", 8192, 768, 768, N, T},
      {"gpt2.fc", 8192, 3072, 768, N, T, 0, true},
      {"gpt2.fcproj", 8192, 768, 3072, N, T, 0, true},
      // Backward: dX = dY . W is NN (W stored [out, in]).
      {"gpt2.fc.dX", 8192, 768, 3072, N, N},
      // The tied head (vocabulary 50257): logits = h . W^T, whose rows of 50257 bf16 are
      // not 16-byte aligned (C); dh = dlogits . W and dW = dlogits^T . h read dlogits
      // in rows padded to 50264 as cross-entropy's backward writes them.
      {"gpt2.head", 8192, 50257, 768, N, T, 0, true},
      {"gpt2.head.dX", 8192, 768, 50257, N, N, 7, true},
      {"gpt2.head.dW", 50257, 768, 8192, T, N, 7, true},
  };
  if (quick) std::erase_if(bf16_problems, [](const Problem& p) { return !p.quick; });
  std::printf("TFLOP/s; mma%% and dtr%% are of cuBLAS\n");
  std::printf("%-13s %-4s %-2s %5s %5s %5s  %8s %7s %7s %7s %7s  %6s %6s  %7s  %s\n", "case", "dtype", "op", "m", "n",
              "k", "mma.sync", "dtr", "wg128", "wg256", "cuBLAS", "mma%", "dtr%", "rel.diff", "path");
  for (const Problem& p : bf16_problems) run<dtr::bf16>(handle, p, "bf16");
  run<float>(handle, {"square", 4096, 4096, 4096, N, N}, "f32");
  std::printf("\nepilogue cost (dtr's default path)\n");
  run_epilogue<dtr::bf16>({"gpt2.fc", 8192, 3072, 768, N, T}, "bf16");
  run_epilogue<dtr::bf16>({"gpt2.qkv", 8192, 2304, 768, N, T}, "bf16");
  BENCH_CUBLAS(cublasDestroy(handle));
  return 0;
}
