// Bandwidth of the fused multi-tensor CUDA AdamW (dtr/kernels/cuda/adamw.h) against a
// device-to-device cudaMemcpy, for ~100M f32 parameters split into a model-like
// mix of tensors (4M-element matrices, 768 x 3072 ones, 768- and 3072-element
// vectors), each array's tensors 256-byte aligned in one allocation.
//
// Rows: AdamW with f32 grads (28 bytes per parameter: param, grad, exp_avg and
// exp_avg_sq read, param and both moments written), with bf16 grads (26 bytes),
// the same f32 update issued as one launch per tensor (what the table-driven
// launch saves), fused SGD with momentum (20 bytes: param, grad and buffer read,
// param and buffer written), and, for scale, the other multi-tensor kernels on the
// same tensors: the grad-norm partials + fold (4 bytes read per parameter) and the
// FSDP-style copy f32 -> bf16 (6 bytes). GB/s counts every byte read and written
// once; the memcpy row counts its read and its write. Medians of 20 runs timed with
// events after 3 warm-up runs.
//   cuda_adamw_bench [parameters]   (default 100M)
#include "bench/cuda_buffers.cuh"
#include "bench/cuda_timing.cuh"
#include "dtr/kernels/cuda/adamw.h"
#include "dtr/kernels/cuda/cuda_check.h"
#include "dtr/kernels/cuda/grad_norm.h"
#include "dtr/kernels/cuda/multi_copy.h"
#include "dtr/kernels/cuda/sgd.h"
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
T* device_array(int64_t n, uint32_t seed, float lo, float hi) {
  T* p = nullptr;
  DTR_CUDA_CHECK(cudaMalloc(&p, static_cast<size_t>(n) * sizeof(T)));
  dtr::bench::fill_hashed<<<4096, 256>>>(p, n, seed, lo, hi);
  DTR_CUDA_CHECK_LAUNCH();
  return p;
}

using dtr::bench::median_ms;

double g_copy_gbps = 0;

void report(const char* name, double bytes, float ms) {
  const double gbps = bytes / (ms * 1e-3) / 1e9;
  std::printf("%-44s %9.3f ms %8.1f GB/s %6.1f%% of memcpy\n", name, ms, gbps,
              g_copy_gbps > 0 ? 100.0 * gbps / g_copy_gbps : 100.0);
}

// Tensor sizes summing to n, and each one's start in a 256-byte aligned packing.
struct Split {
  std::vector<int64_t> sizes, starts;
  int64_t padded_total = 0;
};

Split model_like_split(int64_t n) {
  Split s;
  const int64_t pattern[] = {int64_t{4} << 20, 768, 768 * 3072, 768, 3072};
  for (size_t k = 0; n > 0; ++k) {
    const int64_t size = std::min(n, pattern[k % 5]);
    s.sizes.push_back(size);
    s.starts.push_back(s.padded_total);
    s.padded_total += (size + 63) / 64 * 64;  // 64 elements: 256 bytes of f32
    n -= size;
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const int64_t n = argc > 1 ? std::atoll(argv[1]) : int64_t{100} << 20;
    cudaStream_t stream;
    DTR_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cudaDeviceProp prop{};
    DTR_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    const Split split = model_like_split(n);
    std::printf("%s, %d SMs, %lld parameters in %zu tensors\n", prop.name, prop.multiProcessorCount,
                static_cast<long long>(n), split.sizes.size());

    const size_t bytes = static_cast<size_t>(n) * sizeof(float);
    void *src = nullptr, *dst = nullptr;
    DTR_CUDA_CHECK(cudaMalloc(&src, bytes));
    DTR_CUDA_CHECK(cudaMalloc(&dst, bytes));
    DTR_CUDA_CHECK(cudaMemsetAsync(src, 1, bytes, stream));
    const float copy_ms = median_ms(
        [&] { DTR_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream)); }, stream);
    g_copy_gbps = 2.0 * static_cast<double>(bytes) / (copy_ms * 1e-3) / 1e9;
    report("memcpy d2d, n f32 (read + write)", 2.0 * static_cast<double>(bytes), copy_ms);
    DTR_CUDA_CHECK(cudaFree(src));
    DTR_CUDA_CHECK(cudaFree(dst));

    const int64_t total = split.padded_total;
    float* param = device_array<float>(total, 1, -1.0f, 1.0f);
    float* grad = device_array<float>(total, 2, -1e-2f, 1e-2f);
    bf16* grad_bf16 = device_array<bf16>(total, 3, -1e-2f, 1e-2f);
    float* exp_avg = device_array<float>(total, 4, -1e-3f, 1e-3f);
    float* exp_avg_sq = device_array<float>(total, 5, 0.0f, 1e-4f);
    bf16* copy_out = device_array<bf16>(total, 6, 0.0f, 1.0f);
    const dtr::kernels::cpu::AdamWHyper hyper{.lr = 1e-4};

    std::vector<kc::AdamWTensor<float, float>> f32;
    std::vector<kc::AdamWTensor<float, bf16>> half;
    std::vector<kc::NormTensor<float>> norm;
    std::vector<kc::MultiCopyItem> copies;
    std::vector<kc::SGDTensor<float>> sgd;  // exp_avg serves as the momentum buffer
    int64_t partials = 0;
    for (size_t k = 0; k < split.sizes.size(); ++k) {
      const int64_t s = split.starts[k], m = split.sizes[k];
      f32.push_back({param + s, grad + s, exp_avg + s, exp_avg_sq + s, m, 10});
      half.push_back({param + s, grad_bf16 + s, exp_avg + s, exp_avg_sq + s, m, 10});
      norm.push_back({grad + s, m});
      copies.push_back({.src = param + s, .dst = copy_out + s, .rows = 1, .cols = m});
      sgd.push_back({param + s, grad + s, exp_avg + s, m, 10});
      partials += kc::norm_pow_partial_count(m);
    }
    double* workspace = nullptr;
    DTR_CUDA_CHECK(cudaMalloc(&workspace, static_cast<size_t>(partials + 1) * sizeof(double)));
    const double nd = static_cast<double>(n);

    report("fused AdamW, f32 grads (28 B/param)", 28 * nd,
           median_ms([&] { kc::adamw(f32.data(), f32.size(), hyper, stream); }, stream));
    report("fused AdamW, bf16 grads (26 B/param)", 26 * nd,
           median_ms([&] { kc::adamw(half.data(), half.size(), hyper, stream); }, stream));
    report("AdamW, one launch per tensor, f32 grads", 28 * nd, median_ms([&] {
             for (const auto& t : f32) kc::adamw(&t, 1, hyper, stream);
           }, stream));
    const kc::SGDHyper sgd_hyper{.lr = 1e-4, .momentum = 0.9, .weight_decay = 1e-4, .nesterov = true};
    report("fused SGD, momentum + Nesterov (20 B/param)", 20 * nd,
           median_ms([&] { kc::sgd(sgd.data(), sgd.size(), sgd_hyper, stream); }, stream));
    report("grad norm (p = 2) partials + fold (4 B/param)", 4 * nd, median_ms([&] {
             kc::norm_pow_partials(norm.data(), norm.size(), 2.0, workspace, stream);
             kc::norm_pow_fold(workspace, partials, 2.0, false, workspace + partials, stream);
           }, stream));
    report("multi_copy f32 -> bf16 (6 B/param)", 6 * nd, median_ms([&] {
             kc::multi_copy<float, bf16>(copies.data(), copies.size(), stream);
           }, stream));

    for (void* p : {static_cast<void*>(param), static_cast<void*>(grad), static_cast<void*>(grad_bf16),
                    static_cast<void*>(exp_avg), static_cast<void*>(exp_avg_sq), static_cast<void*>(copy_out),
                    static_cast<void*>(workspace)}) {
      DTR_CUDA_CHECK(cudaFree(p));
    }
    DTR_CUDA_CHECK(cudaStreamDestroy(stream));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuda_adamw_bench: %s\n", e.what());
    return 1;
  }
}
