// One training step (forward + backward + AdamW) of the GPT-2 124M shape on the
// CPU, B=4, T=64, f32: ms/step, tokens/s and achieved GFLOP/s (6 * params * tokens
// plus attention's 12 * layers * B * T^2 * dim), next to the rate of a plain
// 1024^3 f32 GEMM through the matmul op on this machine (the target: the step at
// >= 60% of the GEMM rate).
//   build/release/bench/dtr_train_step_bench [steps=2]
#include "dtr/kernels/cpu/cpu_level.h"
#include "dtr/kernels/cpu/parallel.h"
#include "dtr/nn/optim/adamw.h"
#include "dtr/nn/transformer.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/matmul.h"
#include "dtr/tensor/ops/nn.h"
#include "dtr/tensor/random.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double gemm_gflops() {
  dtr::Tensor a = dtr::randn({1024, 1024}), b = dtr::randn({1024, 1024});
  dtr::matmul(a, b);  // warm-up
  double best = 1e30;
  for (int i = 0; i < 5; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    dtr::matmul(a, b);
    best = std::min(best, seconds_since(t0));
  }
  return 2.0 * 1024 * 1024 * 1024 / best / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace dtr;
  const int steps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 2;
  const int64_t batch = 4, seq = 64;
  manual_seed(0);
  nn::TransformerConfig config = nn::TransformerConfig::gpt2_124m();
  nn::Transformer model(config);
  nn::optim::AdamW opt(model.parameters(), {.lr = 1e-4});
  std::vector<float> u = rand({batch, seq + 1}).to_vector<float>();
  std::vector<int64_t> ids;
  for (float x : u) ids.push_back(static_cast<int64_t>(x * (config.vocab_size - 1)));
  Tensor tokens = from_vector<int64_t>(ids, {batch, seq + 1});
  Tensor inputs = tokens.narrow(1, 0, seq).contiguous(), targets = tokens.narrow(1, 1, seq).contiguous();

  auto step = [&] {
    Tensor loss = cross_entropy(model(inputs).reshape({-1, config.vocab_size}), targets.reshape({-1}));
    opt.zero_grad();
    loss.backward();
    opt.step();
    return loss.item();
  };
  fmt::print("GPT-2 124M shape ({} parameters), B={} T={}, f32, {} threads, CPU kernels {}\n",
             model.num_parameters(), batch, seq, kernels::num_threads(),
             kernels::cpu::cpu_level_description());
  step();  // warm-up: allocates the optimizer state
  double best = 1e30;
  for (int i = 0; i < steps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    double loss = step();
    double s = seconds_since(t0);
    best = std::min(best, s);
    fmt::print("step {}: loss {:.4f}, {:.0f} ms\n", i, loss, 1000 * s);
  }
  const double tokens_per_step = static_cast<double>(batch * seq);
  const double flops = 6.0 * static_cast<double>(model.num_parameters()) * tokens_per_step +
                       12.0 * config.n_layers * batch * seq * seq * config.dim;
  const double step_rate = flops / best / 1e9, gemm_rate = gemm_gflops();
  fmt::print("\n{:>10} {:>10} {:>14} {:>14} {:>10}\n", "ms/step", "tokens/s", "step GFLOP/s", "GEMM GFLOP/s", "ratio");
  fmt::print("{:>10.0f} {:>10.0f} {:>14.1f} {:>14.1f} {:>9.0f}%\n", 1000 * best, tokens_per_step / best, step_rate,
             gemm_rate, 100 * step_rate / gemm_rate);
  return 0;
}
