// Bandwidth of the CUDA elementwise kernels against a device-to-device cudaMemcpy.
//
// For f32 and bf16 on 64M elements: add (2 reads + 1 write per element) and gelu,
// both forms (1 read + 1 write), on the vectorised path (aligned, contiguous), plus
// add on the 1-D unvectorised path (operands offset by one element) and on the N-D
// path (a transposed operand). GB/s counts every byte read and written once; the
// memcpy row copies 256 MiB and counts its read and its write. Times are medians of
// 20 runs timed with events after 3 warm-up runs; inputs are hashed, non-zero values.
//   cuda_elementwise_bench [elements]   (default 64M)
//
// Measured on an H100 80GB HBM3 (132 SMs), 64M elements, sm_90 build:
//   memcpy d2d 256 MiB                 0.189 ms  2840 GB/s
//   add f32 / bf16                     0.278 / 0.139 ms  2897 / 2893 GB/s  (102% / 102%)
//   gelu_tanh f32 / bf16               0.190 / 0.121 ms  2822 / 2213 GB/s  ( 99% /  78%)
//   gelu_erf f32 / bf16                0.192 / 0.163 ms  2798 / 1649 GB/s  ( 99% /  58%)
//   add f32 / bf16 misaligned (1-D)    0.373 / 0.370 ms  2158 / 1088 GB/s  ( 76% /  38%)
//   add f32 / bf16 transposed (N-D)    0.634 / 0.587 ms  1270 /  686 GB/s  ( 45% /  24%)
// bf16 gelu is bound by arithmetic, not bytes (8 erfcf/expf per thread per 16 bytes);
// the misaligned path moves 2-4 bytes per access, and the N-D path divides in 64 bits.
#include "bench/cuda_buffers.cuh"
#include "bench/cuda_timing.cuh"
#include "dtr/kernels/cuda/cuda_check.h"
#include "dtr/kernels/cuda/elementwise.h"
#include "dtr/kernels/scalar_types.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <vector>

namespace {

using dtr::bf16;
namespace kc = dtr::kernels::cuda;

template <class T>
T* device_buffer(int64_t n, uint32_t seed) {
  T* p = nullptr;
  DTR_CUDA_CHECK(cudaMalloc(&p, (n + 16) * sizeof(T)));
  dtr::bench::fill_hashed<<<4096, 256>>>(p, n + 16, seed, -4.0f, 4.0f);
  DTR_CUDA_CHECK_LAUNCH();
  return p;
}

using dtr::bench::median_ms;

double g_copy_gbps = 0;

void report(const char* name, double bytes, float ms) {
  const double gbps = bytes / (ms * 1e-3) / 1e9;
  std::printf("%-34s %9.3f ms %8.1f GB/s %6.1f%% of memcpy\n", name, ms, gbps,
              g_copy_gbps > 0 ? 100.0 * gbps / g_copy_gbps : 100.0);
}

template <class T>
void bench_dtype(const char* dtype, int64_t n, cudaStream_t stream) {
  T* a = device_buffer<T>(n, 1);
  T* b = device_buffer<T>(n, 2);
  T* out = device_buffer<T>(n, 3);
  const int64_t size[1] = {n};
  const int64_t unit[1] = {1};
  const double e = sizeof(T);
  char name[64];

  std::snprintf(name, sizeof name, "add %s", dtype);
  report(name, 3 * e * n, median_ms([&] {
           kc::binary<T>(dtr::kernels::BinaryOp::add, 1, size, a, unit, b, unit, out, unit, stream);
         }, stream));
  std::snprintf(name, sizeof name, "add %s misaligned (1-D path)", dtype);
  report(name, 3 * e * n, median_ms([&] {
           kc::binary<T>(dtr::kernels::BinaryOp::add, 1, size, a + 1, unit, b + 1, unit, out + 1,
                         unit, stream);
         }, stream));
  for (auto [op, label] : {std::pair{dtr::kernels::UnaryOp::gelu_tanh, "gelu_tanh"},
                           std::pair{dtr::kernels::UnaryOp::gelu_erf, "gelu_erf"}}) {
    std::snprintf(name, sizeof name, "%s %s", label, dtype);
    report(name, 2 * e * n, median_ms([&] {
             kc::unary<T>(op, 1, size, a, unit, out, unit, stream);
           }, stream));
  }
  // [rows, cols] = a + b^T, b read through transposed strides (N-D path).
  const int64_t cols = 4096, rows = n / cols;
  const int64_t shape2[2] = {rows, cols};
  const int64_t row_major[2] = {cols, 1};
  const int64_t transposed[2] = {1, rows};
  std::snprintf(name, sizeof name, "add %s transposed (N-D path)", dtype);
  report(name, 3 * e * rows * cols, median_ms([&] {
           kc::binary<T>(dtr::kernels::BinaryOp::add, 2, shape2, a, row_major, b, transposed, out,
                         row_major, stream);
         }, stream));
  DTR_CUDA_CHECK(cudaFree(a));
  DTR_CUDA_CHECK(cudaFree(b));
  DTR_CUDA_CHECK(cudaFree(out));
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const int64_t n = argc > 1 ? std::atoll(argv[1]) : int64_t{64} << 20;
    cudaStream_t stream;
    DTR_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cudaDeviceProp prop{};
    DTR_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    std::printf("%s, %d SMs, %lld elements\n", prop.name, prop.multiProcessorCount,
                static_cast<long long>(n));

    const size_t bytes = static_cast<size_t>(n) * sizeof(float);
    void *src = nullptr, *dst = nullptr;
    DTR_CUDA_CHECK(cudaMalloc(&src, bytes));
    DTR_CUDA_CHECK(cudaMalloc(&dst, bytes));
    DTR_CUDA_CHECK(cudaMemsetAsync(src, 1, bytes, stream));
    const float copy_ms = median_ms([&] {
      DTR_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream));
    }, stream);
    g_copy_gbps = 2.0 * bytes / (copy_ms * 1e-3) / 1e9;
    report("memcpy d2d 256 MiB (read + write)", 2.0 * bytes, copy_ms);
    DTR_CUDA_CHECK(cudaFree(src));
    DTR_CUDA_CHECK(cudaFree(dst));

    bench_dtype<float>("f32", n, stream);
    bench_dtype<bf16>("bf16", n, stream);
    DTR_CUDA_CHECK(cudaStreamDestroy(stream));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuda_elementwise_bench: %s\n", e.what());
    return 1;
  }
}
