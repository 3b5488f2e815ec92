// TFLOP/s of the fused CUDA attention kernels (dtr/kernels/cuda/attention.h), forward
// and forward + backward, causal bf16, on the shapes of a GPT-2-small layer and of a
// GQA model layer:
//   B 4, H 12, T 1024, D 64            B 1, Hq 32, Hkv 8, T 2048, D 128
// once with the tensor-core kernels and once with the CUDA-core (SIMT) ones.
// FLOPs counted as FlashAttention does: forward 4 B Hq T S D (halved for causal),
// backward 2.5x the forward. Times are the median of event-timed runs after a
// warm-up. Usage: dtr_attention_bench   (prints one table)
#include "dtr/kernels/cuda/attention.h"
#include "dtr/tensor/cuda/cuda_runtime.h"
#include "dtr/tensor/factory.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <vector>

namespace {

using namespace dtr;
namespace kc = dtr::kernels::cuda;

constexpr int kWarmup = 3;
constexpr int kRuns = 15;

Tensor random_gpu(const Shape& shape, std::mt19937& gen) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(numel_of(shape)));
  for (float& x : v) x = dist(gen);
  return from_vector(v, shape).to(DType::bf16).to(Device::cuda(0));
}

// Median milliseconds of `fn` enqueued on `stream`.
double median_ms(const std::function<void()>& fn, cudaStream_t stream) {
  for (int i = 0; i < kWarmup; ++i) fn();
  std::vector<double> ms;
  for (int i = 0; i < kRuns; ++i) {
    cuda::Event start(true), stop(true);
    start.record(stream);
    fn();
    stop.record(stream);
    stop.synchronize();
    ms.push_back(start.elapsed_ms(stop));
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

void bench(int64_t B, int64_t Hq, int64_t Hkv, int64_t T, int64_t D, std::mt19937& gen) {
  const kernels::cpu::AttentionDims dims{.batch = B, .q_heads = Hq, .kv_heads = Hkv, .q_len = T,
                                         .kv_len = T, .head_dim = D, .causal = true,
                                         .scale = 1.0 / std::sqrt(static_cast<double>(D))};
  const Device gpu = Device::cuda(0);
  const Tensor q = random_gpu({B, Hq, T, D}, gen), k = random_gpu({B, Hkv, T, D}, gen),
               v = random_gpu({B, Hkv, T, D}, gen), dout = random_gpu({B, Hq, T, D}, gen);
  Tensor out = empty(q.sizes(), {.dtype = DType::bf16, .device = gpu});
  Tensor lse = empty({B, Hq, T}, {.dtype = DType::f32, .device = gpu});
  Tensor delta = empty({B, Hq, T}, {.dtype = DType::f32, .device = gpu});
  Tensor dq = empty(q.sizes(), {.dtype = DType::bf16, .device = gpu});
  Tensor dk = empty(k.sizes(), {.dtype = DType::bf16, .device = gpu});
  Tensor dv = empty(v.sizes(), {.dtype = DType::bf16, .device = gpu});
  cudaStream_t stream = cuda::current_stream(0);
  auto forward = [&] {
    kc::attention_forward<bf16>(q.data<bf16>(), k.data<bf16>(), v.data<bf16>(), dims, out.data<bf16>(),
                                lse.data<float>(), stream);
  };
  auto backward = [&] {
    kc::attention_backward<bf16>(q.data<bf16>(), k.data<bf16>(), v.data<bf16>(), out.data<bf16>(),
                                 lse.data<float>(), dout.data<bf16>(), dims, dq.data<bf16>(), dk.data<bf16>(),
                                 dv.data<bf16>(), delta.data<float>(), stream);
  };
  const double fwd_flops = 4.0 * B * Hq * T * T * D / 2;  // causal
  for (const bool tensor_cores : {true, false}) {
    kc::attention_enable_tensor_cores(tensor_cores);
    forward();
    const bool tc = kc::attention_last_path() == kc::AttentionPath::tensor_core;
    const double f_ms = median_ms(forward, stream);
    const double fb_ms = median_ms([&] { forward(); backward(); }, stream);
    std::printf("B %lld Hq %2lld Hkv %2lld T %5lld D %3lld causal bf16  %-11s  fwd %8.3f ms %7.1f TFLOP/s   "
                "fwd+bwd %8.3f ms %7.1f TFLOP/s\n",
                static_cast<long long>(B), static_cast<long long>(Hq), static_cast<long long>(Hkv),
                static_cast<long long>(T), static_cast<long long>(D), tc ? "tensor-core" : "simt", f_ms,
                fwd_flops / (f_ms * 1e9), fb_ms, 3.5 * fwd_flops / (fb_ms * 1e9));
  }
  kc::attention_enable_tensor_cores(true);
}

}  // namespace

int main() {
  if (!dtr::cuda::is_available()) {
    std::printf("no CUDA device\n");
    return 1;
  }
  std::mt19937 gen(1234);
  bench(4, 12, 12, 1024, 64, gen);
  bench(1, 32, 8, 2048, 128, gen);
  return 0;
}
