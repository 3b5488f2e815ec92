// Memory-bound kernels of the training step that the other CUDA benches leave out:
// layer_norm and rms_norm forward and backward, the f32 <-> bf16 casts, the one-pass
// GELU gradient, cross-entropy forward and backward, the embedding backward. Each
// row prints its GPU time and its bytes (each operand read or written once) per
// second as a share of the device-to-device copy's, the figure issue 10 sets at
// >= 80% for norms, softmax, AdamW and casts.
//
// Two sizes: the GPT-2 124M step's own (B*T = 8192 rows of 768, a 50257 vocabulary),
// where a kernel of ~10 us also pays its launch and tail, and a large one
// ([32768, 4096], 2^28 elements) that shows the bandwidth the kernel can reach.
//
//   dtr_cuda_rowwise_bench   (no arguments; the GPU is device 0)
#include "bench/cuda_buffers.cuh"
#include "bench/cuda_timing.cuh"
#include "dtr/kernels/cuda/copy.h"
#include "dtr/kernels/cuda/cross_entropy.h"
#include "dtr/kernels/cuda/cuda_check.h"
#include "dtr/kernels/cuda/elementwise.h"
#include "dtr/kernels/cuda/embedding.h"
#include "dtr/kernels/cuda/norm.h"
#include "dtr/kernels/scalar_types.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

namespace {

using namespace dtr;
using dtr::bench::CopyShareTable;
using dtr::bench::device_empty;
using dtr::bench::device_random;
namespace kc = dtr::kernels::cuda;

std::string shape(int64_t rows, int64_t cols) {
  return "[" + std::to_string(rows) + ", " + std::to_string(cols) + "]";
}

template <class T>
const char* dtype_name() {
  return std::is_same_v<T, float> ? "f32" : "bf16";
}

// layer_norm / rms_norm forward (x read, y written) and backward (dy and x read, dx
// written; dweight/dbias go through a [chunks, cols] scratch that is not counted).
template <class T>
void norms(CopyShareTable& bench, int64_t rows, int64_t cols, cudaStream_t stream) {
  const int64_t n = rows * cols;
  const double rw = 2.0 * n * sizeof(T), rrw = 3.0 * n * sizeof(T);
  auto x = device_random<T>(n, 11), dy = device_random<T>(n, 12);
  auto weight = device_random<T>(cols, 13, 0.5f, 1.5f), bias = device_random<T>(cols, 14);
  auto y = device_empty<T>(n), dx = device_empty<T>(n);
  auto dweight = device_empty<T>(cols), dbias = device_empty<T>(cols);
  auto mean = device_empty<acc_t<T>>(rows), rstd = device_empty<acc_t<T>>(rows);
  auto scratch = device_empty<acc_t<T>>(kc::norm_backward_scratch_elements(rows, cols, true, true));
  const std::string what = std::string(dtype_name<T>()) + " " + shape(rows, cols);
  bench.add("layer_norm fwd " + what, rw, [&] {
    kc::layer_norm_forward<T>(x.get(), weight.get(), bias.get(), rows, cols, 1e-5, y.get(), mean.get(),
                              rstd.get(), stream);
  });
  bench.add("layer_norm bwd (dx, dw, db) " + what, rrw, [&] {
    kc::layer_norm_backward<T>(dy.get(), x.get(), mean.get(), rstd.get(), weight.get(), rows, cols, dx.get(),
                               dweight.get(), dbias.get(), scratch.get(), stream);
  });
  bench.add("rms_norm fwd " + what, rw, [&] {
    kc::rms_norm_forward<T>(x.get(), weight.get(), rows, cols, 1e-5, y.get(), rstd.get(), stream);
  });
  bench.add("rms_norm bwd (dx, dw) " + what, rrw, [&] {
    kc::rms_norm_backward<T>(dy.get(), x.get(), rstd.get(), weight.get(), rows, cols, dx.get(), dweight.get(),
                             scratch.get(), stream);
  });
}

template <class From, class To>
void cast(CopyShareTable& bench, int64_t n, cudaStream_t stream) {
  auto src = device_random<From>(n, 21);
  auto dst = device_empty<To>(n);
  const int64_t one = 1;
  bench.add(std::string("cast ") + dtype_name<From>() + " -> " + dtype_name<To>() + " 2^28",
            1.0 * n * (sizeof(From) + sizeof(To)),
            [&] { kc::copy<From, To>(1, &n, src.get(), &one, dst.get(), &one, stream); });
}

void gelu_grad(CopyShareTable& bench, int64_t n, cudaStream_t stream) {
  auto g = device_random<bf16>(n, 31), x = device_random<bf16>(n, 32);
  auto dx = device_empty<bf16>(n);
  const int64_t one = 1;
  for (auto [op, label] : {std::pair{kernels::UnaryOp::gelu_tanh, "gelu_tanh"},
                           std::pair{kernels::UnaryOp::gelu_erf, "gelu_erf"}}) {
    bench.add(std::string(label) + " grad bf16 2^27 (g, x -> dx)", 3.0 * n * sizeof(bf16), [&, op = op] {
      kc::unary_grad<bf16>(op, 1, &n, g.get(), &one, x.get(), &one, dx.get(), &one, stream);
    });
  }
}

// GPT-2's loss: bf16 logits [8192, 50257], dlogits written into rows padded to 50264
// (16-byte aligned, as the op layer allocates them for the head's GEMMs).
void cross_entropy(CopyShareTable& bench, cudaStream_t stream) {
  const int64_t rows = 8192, cols = 50257, ld = 50264;
  auto logits = device_random<bf16>(rows * cols, 41);
  auto targets = device_random<int64_t>(rows, 42, 0.0f, static_cast<float>(cols));
  auto loss = device_empty<float>(rows), row_max = device_empty<float>(rows), log_sum = device_empty<float>(rows);
  auto dlogits = device_empty<bf16>(rows * ld);
  auto grad_loss = device_empty<double>(1);
  const double one = 1.0;
  DTR_CUDA_CHECK(cudaMemcpy(grad_loss.get(), &one, sizeof one, cudaMemcpyHostToDevice));
  const double bytes = 2.0 * rows * cols;
  bench.add("cross_entropy fwd bf16 " + shape(rows, cols), bytes, [&] {
    kc::cross_entropy_forward<bf16>(logits.get(), targets.get(), rows, cols, -100, 0.0, loss.get(),
                                    row_max.get(), log_sum.get(), stream);
  });
  bench.add("cross_entropy bwd bf16 " + shape(rows, cols) + " (ld 50264)", 2.0 * bytes, [&] {
    kc::cross_entropy_backward<bf16>(logits.get(), targets.get(), row_max.get(), log_sum.get(), rows, cols, -100,
                                     0.0, grad_loss.get(), rows, dlogits.get(), ld, stream);
  });
}

// GPT-2's token embedding: 8192 tokens of 768 into a [50257, 768] table, every row
// of which is written (zeros where no token points).
void embedding_backward(CopyShareTable& bench, cudaStream_t stream) {
  const int64_t tokens = 8192, rows = 50257, cols = 768;
  auto grad_out = device_random<bf16>(tokens * cols, 51);
  auto indices = device_random<int64_t>(tokens, 52, 0.0f, static_cast<float>(rows));
  auto grad_table = device_empty<bf16>(rows * cols);
  auto workspace = device_empty<char>(static_cast<int64_t>(kc::embedding_backward_workspace_bytes(tokens)));
  bench.add("embedding bwd bf16 8192 tokens -> [50257, 768]", 2.0 * cols * (tokens + rows), [&] {
    kc::embedding_backward<bf16>(grad_out.get(), indices.get(), tokens, rows, cols, grad_table.get(),
                                 workspace.get(), stream);
  });
}

}  // namespace

int main() {
  try {
    cudaDeviceProp prop{};
    DTR_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    std::printf("device: %s, %d SMs, L2 %d MiB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);
    cudaStream_t stream;
    DTR_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    CopyShareTable bench(stream);
    const int64_t n = int64_t{1} << 28;
    {
      auto src = device_random<float>(n, 1);
      auto dst = device_empty<float>(n);
      bench.add("copy f32 2^28 (read + write)", 2.0 * n * sizeof(float), [&] {
        DTR_CUDA_CHECK(cudaMemcpyAsync(dst.get(), src.get(), n * sizeof(float), cudaMemcpyDeviceToDevice, stream));
      });
    }
    norms<bf16>(bench, 8192, 768, stream);
    norms<bf16>(bench, 32768, 4096, stream);
    norms<float>(bench, 32768, 4096, stream);
    cast<float, bf16>(bench, n, stream);
    cast<bf16, float>(bench, n, stream);
    gelu_grad(bench, n / 2, stream);
    cross_entropy(bench, stream);
    embedding_backward(bench, stream);
    DTR_CUDA_CHECK(cudaStreamSynchronize(stream));
    bench.print();
    DTR_CUDA_CHECK(cudaStreamDestroy(stream));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuda_rowwise_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
