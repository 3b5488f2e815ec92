// One training step of the GPT-2 124M shape on one GPU: tokens/s and MFU, to be read
// next to bench/torch_gpt2_step.py (the same model in plain PyTorch on the same GPU).
// The CPU twin is bench/train_step_bench.cpp.
//
// The step: nn::Transformer(TransformerConfig::gpt2_124m()) on cuda, fsdp::fully_shard
// on every block and then the root over a 1-D CUDA mesh of all ranks (NCCL; world
// size 1 without mpirun), bf16 mixed precision (MixedPrecisionPolicy param_dtype
// bf16, reduce_dtype f32; the shards and AdamW's state stay f32), forward + cross
// entropy on random tokens, backward, optional grad clipping, FusedAdamW (falls back
// to op-by-op AdamW, saying so, when FusedAdamW refuses CUDA parameters).
//
// Model init: --init cpu (default) builds the model with its values on the host and
// moves it to the GPU before sharding; --init meta builds it on meta, shards it, then
// to_empty(cuda) + reset_parameters() (needs the CUDA random fills).
//
// Timing: --warmup untimed steps (the first allocates the optimizer state), then
// --steps steps back to back between two cuda::synchronize() (device-wide, so FSDP's
// communication streams are included): ms/step is their mean. Then --breakdown steps
// with a synchronize after forward+loss, backward and the optimizer give the split
// (the fastest of them; the syncs cost a little, so the split sums to a bit more).
//
// FLOPs per token (the PaLM / nanoGPT estimate, used by torch_gpt2_step.py too):
//   6 * N + 12 * L * T * d
// with N the parameters less the position-embedding table (a lookup, not a matmul;
// the tied token embedding counts once, as the output head's matmul), L layers,
// T the sequence length, d the width. The attention term counts the full T x T
// score matrix (causal masking not subtracted), as the formula does. MFU = achieved
// TFLOP/s / --peak-tflops (default 989: H100 SXM dense bf16).
//
// Memory: peak CUDA bytes by tag over the timed steps (dtr::memory_stats), forward
// and backward running under MemoryTagGuard(activation).
//
// An op without a CUDA kernel (or any other dtr::Error) ends the run with its message
// and exit status 1.
//
//   build/device/bench/dtr_gpu_train_step_bench [--batch 8] [--seq 1024] [--warmup 3]
//       [--steps 10] [--breakdown 2] [--peak-tflops 989] [--optimizer fused|adamw]
//       [--param-dtype bf16|f32] [--init cpu|meta] [--clip-grad-norm 0]
//   (several GPUs: mpirun -np N ...; every rank runs B x T, figures are per GPU.)
//   --kernel-table N adds 2 steps under CUPTI (bench/kernel_table.h) and prints the N
//   kernels and copies with the most GPU time per step (where the step's time goes).
//   --cpu-smoke runs the same code on the CPU with a 2-layer, 64-wide, vocab-512
//   model (e.g. --cpu-smoke --batch 2 --seq 32): a check of the program without a GPU.
//   With --smoke-layers 12 --batch 1 --seq 8 it runs GPT-2's ops on tiny tensors: its
//   ms/step is mostly the host's cost per step (op dispatch, autograd, FSDP), which a
//   GPU step must exceed for the GPU to stay busy (CUDA adds its launch cost on top).
#ifdef DTR_WITH_CUPTI
#include "bench/kernel_table.h"
#endif
#include "dtr/base/error.h"
#include "dtr/fsdp/fully_shard.h"
#include "dtr/mesh/device_mesh.h"
#include "dtr/mesh/distributed.h"
#include "dtr/nn/optim/adamw.h"
#include "dtr/nn/optim/clip_grad.h"
#include "dtr/nn/optim/fused_adamw.h"
#include "dtr/nn/transformer.h"
#include "dtr/tensor/allocator.h"
#include "dtr/tensor/cuda/cuda_runtime.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/memory_stats.h"
#include "dtr/tensor/ops/nn.h"
#include "dtr/tensor/random.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <typeinfo>
#include <vector>

namespace {

struct Options {
  int64_t batch = 8;
  int64_t seq = 1024;
  int warmup = 3;
  int steps = 10;
  int breakdown = 2;
  double peak_tflops = 989.0;
  std::string optimizer = "fused";
  std::string param_dtype = "bf16";
  std::string init = "cpu";
  double clip_grad_norm = 0.0;
  bool cpu_smoke = false;  // the same code on the CPU with a tiny model (a check without a GPU)
  int smoke_layers = 2;    // its blocks (12: GPT-2's ops per step, for the host's own cost)
  int kernel_table = 0;    // rows of the per-kernel GPU time table (0: none)
};

int g_rank = 0;

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

double mib(int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

// Random next-token data on this rank: inputs [B, T] and targets [B, T] (i64) on `device`.
std::pair<dtr::Tensor, dtr::Tensor> random_batch(const Options& opt, int64_t vocab, dtr::Device device, int rank) {
  std::mt19937_64 gen(1234 + static_cast<uint64_t>(rank));
  std::uniform_int_distribution<int64_t> dist(0, vocab - 1);
  std::vector<int64_t> ids(static_cast<size_t>(opt.batch * (opt.seq + 1)));
  for (int64_t& id : ids) id = dist(gen);
  std::vector<int64_t> inputs, targets;
  inputs.reserve(static_cast<size_t>(opt.batch * opt.seq));
  targets.reserve(static_cast<size_t>(opt.batch * opt.seq));
  for (int64_t b = 0; b < opt.batch; ++b) {
    const auto row = static_cast<size_t>(b * (opt.seq + 1));
    for (int64_t t = 0; t < opt.seq; ++t) {
      inputs.push_back(ids[row + static_cast<size_t>(t)]);
      targets.push_back(ids[row + static_cast<size_t>(t) + 1]);
    }
  }
  return {dtr::from_vector<int64_t>(inputs, {opt.batch, opt.seq}).to(device),
          dtr::from_vector<int64_t>(targets, {opt.batch, opt.seq}).to(device)};
}

int run(const Options& opt) {
  using namespace dtr;
  DTR_CHECK(opt.cpu_smoke || cuda::is_available(), "no CUDA device is visible (cuda::device_count() = {})",
            cuda::device_count());
  DTR_CHECK(opt.param_dtype == "bf16" || opt.param_dtype == "f32", "--param-dtype must be bf16 or f32, got {}",
            opt.param_dtype);
  DTR_CHECK(opt.optimizer == "fused" || opt.optimizer == "adamw", "--optimizer must be fused or adamw, got {}",
            opt.optimizer);
  DTR_CHECK(opt.init == "cpu" || opt.init == "meta", "--init must be cpu or meta, got {}", opt.init);
  const Device device = opt.cpu_smoke ? Device::cpu() : Device::cuda(cuda::current_device());
  // Device-wide: FSDP's communication streams included.
  auto sync = [&] {
    if (device.is_cuda()) cuda::synchronize(device.index);
  };
  const int world = distributed::world_size();

  // 1. The model, sharded per block and then at the root, bf16 compute.
  nn::TransformerConfig config = nn::TransformerConfig::gpt2_124m();
  if (opt.cpu_smoke) {
    config.vocab_size = 512;
    config.dim = 64;
    config.n_layers = opt.smoke_layers;
    config.n_heads = 4;
    config.max_seq_len = 64;
  }
  config.max_seq_len = std::max(config.max_seq_len, opt.seq);
  if (opt.init == "meta") config.device = Device::meta();
  manual_seed(0);
  auto model = std::make_shared<nn::Transformer>(config);
  const int64_t n_params = model->num_parameters();
  const int64_t n_matmul_params = n_params - config.max_seq_len * config.dim;  // less the position table
  if (opt.init == "cpu") model->to(device);
  const mesh::DeviceMesh mesh = mesh::init_device_mesh(device.type, {world}, {"dp"});
  fsdp::MixedPrecisionPolicy mp;
  if (opt.param_dtype == "bf16") {
    mp = fsdp::MixedPrecisionPolicy{.param_dtype = DType::bf16, .reduce_dtype = DType::f32};
  }
  for (auto& layer : model->layers()) fsdp::fully_shard(*layer, {.mesh = mesh, .mp_policy = mp});
  fsdp::fully_shard(*model, {.mesh = mesh, .mp_policy = mp});
  if (opt.init == "meta") {
    model->to_empty(device);
    manual_seed(0);
    model->reset_parameters();
  }
  const std::vector<nn::Parameter> params = model->parameters();

  // 2. The optimizer over the local shards (GPT-2 practice: betas 0.9/0.95, wd 0.1).
  const nn::optim::AdamWOptions adamw{.lr = 3e-4, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
  std::unique_ptr<nn::optim::Optimizer> optimizer;
  std::string optimizer_name = "AdamW (op by op)";
  if (opt.optimizer == "fused") {
    try {
      optimizer = std::make_unique<nn::optim::FusedAdamW>(params, adamw);
      optimizer_name = "FusedAdamW";
    } catch (const Error& e) {
      optimizer_name = fmt::format("AdamW (op by op; FusedAdamW refused: {})", e.what());
    }
  }
  if (!optimizer) {
    nn::optim::AdamWOptions op_by_op = adamw;
    op_by_op.fused = false;
    optimizer = std::make_unique<nn::optim::AdamW>(params, op_by_op);
  }

  Tensor inputs, targets;
  std::tie(inputs, targets) = random_batch(opt, config.vocab_size, device, distributed::rank());
  const int64_t vocab = config.vocab_size;

  if (g_rank == 0) {
    fmt::print("dtr GPU train step: {} ({} layers x {} wide, {} heads, vocab {}, {} positions) on {}\n",
               opt.cpu_smoke ? "CPU SMOKE RUN, tiny GPT-2-style model" : "GPT-2 124M shape", config.n_layers,
               config.dim, config.n_heads, config.vocab_size, config.max_seq_len, device);
    fmt::print("N = {} parameters ({} without the position table); B={} T={} per GPU, {} GPU(s)\n", n_params,
               n_matmul_params, opt.batch, opt.seq, world);
    fmt::print("fully_shard per block + root over {}; params {} / reduce {}; init {}; optimizer {}{}\n",
               mesh.to_string(), opt.param_dtype == "bf16" ? "bf16" : "f32", "f32", opt.init, optimizer_name,
               opt.clip_grad_norm > 0 ? fmt::format("; clip grad norm {}", opt.clip_grad_norm) : "");
    fmt::print("{} warm-up + {} timed steps (+ {} for the split)\n", opt.warmup, opt.steps, opt.breakdown);
    std::fflush(stdout);
  }

  // One step; with `split`, synchronizes after each phase and records their seconds.
  std::array<double, 3> phase{};
  auto step = [&](bool split) {
    const double t0 = split ? now_s() : 0.0;
    Tensor loss;
    {
      MemoryTagGuard tag(MemoryTag::activation);
      Tensor logits = (*model)(inputs);
      loss = cross_entropy(logits.reshape({-1, vocab}), targets.reshape({-1}));
      if (split) sync();
      const double t1 = split ? now_s() : 0.0;
      optimizer->zero_grad();
      loss.backward();
      if (split) {
        sync();
        phase[0] = t1 - t0;
        phase[1] = now_s() - t1;
      }
    }
    const double t2 = split ? now_s() : 0.0;
    if (opt.clip_grad_norm > 0) nn::optim::clip_grad_norm_(params, opt.clip_grad_norm);
    optimizer->step();
    if (split) {
      sync();
      phase[2] = now_s() - t2;
    }
    return loss;
  };

  // 3. Warm-up, timed steps, split.
  double first_loss = 0.0;
  for (int i = 0; i < opt.warmup; ++i) {
    Tensor loss = step(false);
    if (i == 0) first_loss = loss.item();  // also surfaces errors of the first step early
  }
  sync();
  reset_peak_memory_stats(device);
  const double t0 = now_s();
  Tensor last;
  for (int i = 0; i < opt.steps; ++i) last = step(false);
  sync();
  const double step_s = (now_s() - t0) / opt.steps;
  const MemoryStats memory = memory_stats(device);
  const double last_loss = last.item();
  std::array<double, 3> best{1e30, 1e30, 1e30};
  for (int i = 0; i < opt.breakdown; ++i) {
    step(true);
    for (size_t k = 0; k < 3; ++k) best[k] = std::min(best[k], phase[k]);
  }
  // Two more steps under CUPTI, after the timed ones (its records slow launches a little).
  std::string kernels;
  if (opt.kernel_table > 0) {
#ifdef DTR_WITH_CUPTI
    constexpr int kTableSteps = 2;
    bench::KernelTable table;
    sync();
    table.reset();
    for (int i = 0; i < kTableSteps; ++i) step(false);
    sync();
    kernels = table.table(opt.kernel_table, kTableSteps);
#else
    kernels = "(no kernel table: this build found no CUPTI library)\n";
#endif
  }

  // 4. Report.
  if (g_rank != 0) return 0;
  const double tokens = static_cast<double>(opt.batch * opt.seq);
  const double flops_per_token = 6.0 * static_cast<double>(n_matmul_params) +
                                 12.0 * static_cast<double>(config.n_layers * opt.seq * config.dim);
  const double tflops = flops_per_token * tokens / step_s / 1e12;
  fmt::print("\nloss: ");
  if (opt.warmup > 0) fmt::print("{:.4f} (first warm-up step) -> ", first_loss);
  fmt::print("{:.4f} (last timed step); ln(vocab) = {:.4f}\n", last_loss, std::log(static_cast<double>(vocab)));
  fmt::print("FLOPs/token = 6*N + 12*L*T*d = 6*{} + 12*{}*{}*{} = {:.4e}\n", n_matmul_params, config.n_layers,
             opt.seq, config.dim, flops_per_token);
  fmt::print("\n{:>10} {:>12} {:>10} {:>8} | {:>9} {:>9} {:>9}\n", "ms/step", "tokens/s", "TFLOP/s", "MFU",
             "fwd ms", "bwd ms", "opt ms");
  if (opt.breakdown > 0) {
    fmt::print("{:>10.2f} {:>12.0f} {:>10.1f} {:>7.1f}% | {:>9.2f} {:>9.2f} {:>9.2f}\n", 1e3 * step_s,
               tokens / step_s, tflops, 100.0 * tflops / opt.peak_tflops, 1e3 * best[0], 1e3 * best[1],
               1e3 * best[2]);
  } else {
    fmt::print("{:>10.2f} {:>12.0f} {:>10.1f} {:>7.1f}% | {:>9} {:>9} {:>9}\n", 1e3 * step_s, tokens / step_s,
               tflops, 100.0 * tflops / opt.peak_tflops, "-", "-", "-");
  }
  fmt::print("(per GPU; MFU against {} TFLOP/s; fwd includes the loss, opt includes clipping)\n", opt.peak_tflops);

  fmt::print("\nMemory on {} by tag (MiB; peak over the timed steps, current after them)\n",
             device);
  fmt::print("{:>16} {:>10} {:>10}\n", "tag", "peak", "current");
  for (int k = 0; k < kNumMemoryTags; ++k) {
    const auto tag = static_cast<MemoryTag>(k);
    fmt::print("{:>16} {:>10.1f} {:>10.1f}\n", memory_tag_name(tag), mib(memory[tag].peak_bytes),
               mib(memory[tag].current_bytes));
  }
  fmt::print("{:>16} {:>10.1f} {:>10.1f}\n", "total", mib(memory.total.peak_bytes), mib(memory.total.current_bytes));
  fmt::print("{:>16} {:>10} {:>10.1f}\n", "reserved", "", mib(memory.reserved_bytes));
  fmt::print("(f32 state for reference: params {:.1f}, grads {:.1f}, AdamW moments {:.1f} MiB per {} GPU(s))\n",
             mib(4 * n_params) / world, mib(4 * n_params) / world, mib(8 * n_params) / world, world);
  if (!kernels.empty()) fmt::print("\nGPU time by kernel (CUPTI, rank 0, mean of 2 steps)\n{}", kernels);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  CLI::App app{"dtr GPU training-step benchmark: GPT-2 124M, FSDP at 1 rank per GPU, bf16 mixed precision"};
  app.add_option("--batch", opt.batch, "sequences per GPU")->check(CLI::PositiveNumber);
  app.add_option("--seq", opt.seq, "sequence length (above 1024 the position table grows)")
      ->check(CLI::PositiveNumber);
  app.add_option("--warmup", opt.warmup, "untimed warm-up steps")->check(CLI::NonNegativeNumber);
  app.add_option("--steps", opt.steps, "timed steps (mean reported)")->check(CLI::PositiveNumber);
  app.add_option("--breakdown", opt.breakdown, "extra synchronized steps for the fwd/bwd/opt split (0: none)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--peak-tflops", opt.peak_tflops, "peak dense TFLOP/s for MFU (H100 SXM bf16: 989)")
      ->check(CLI::PositiveNumber);
  app.add_option("--optimizer", opt.optimizer, "fused (FusedAdamW) or adamw (op by op)")
      ->check(CLI::IsMember({"fused", "adamw"}));
  app.add_option("--param-dtype", opt.param_dtype, "compute dtype of the parameters: bf16 or f32")
      ->check(CLI::IsMember({"bf16", "f32"}));
  app.add_option("--init", opt.init, "cpu (init on host, copy) or meta (to_empty(cuda) + reset_parameters)")
      ->check(CLI::IsMember({"cpu", "meta"}));
  app.add_option("--clip-grad-norm", opt.clip_grad_norm, "clip the global grad norm to this (0: off)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--kernel-table", opt.kernel_table,
                 "after the timed steps, 2 more under CUPTI: the N kernels and copies taking the most GPU time per "
                 "step (0: off)")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--cpu-smoke", opt.cpu_smoke,
               "run the same code on the CPU with a 2-layer 64-wide model (checks the program without a GPU)");
  app.add_option("--smoke-layers", opt.smoke_layers,
                 "blocks of the --cpu-smoke model (12, with --batch 1 --seq 8: GPT-2's ops per step on tiny tensors, "
                 "so ms/step is mostly the host's own cost per step)")
      ->check(CLI::PositiveNumber);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  int status = 0;
  try {
    dtr::distributed::init();
    g_rank = dtr::distributed::rank();
    status = run(opt);
  } catch (const dtr::Error& e) {
    fmt::print(stderr, "dtr_gpu_train_step_bench: FAILED (rank {}): {}\n", g_rank, e.what());
    status = 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "dtr_gpu_train_step_bench: FAILED (rank {}, {}): {}\n", g_rank, typeid(e).name(), e.what());
    status = 1;
  }
  try {
    dtr::distributed::finalize();
  } catch (const std::exception& e) {
    fmt::print(stderr, "dtr_gpu_train_step_bench: finalize: {}\n", e.what());
  }
  return status;
}
