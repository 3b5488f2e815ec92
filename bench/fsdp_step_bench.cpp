// FSDP training-step benchmark on the CPU: one step (forward, backward, AdamW) of
// a GPT-2-style Transformer with fsdp::fully_shard applied to every block and then
// the root (default options: blocks reshard after forward, the root keeps its
// parameters), each rank on its slice of the global batch. Reported on rank 0:
//
//  - ms/step: the median over --steps timed steps (after --warmup untimed ones,
//    the first of which allocates the optimizer state) of the slowest rank's time
//    (each step starts after a barrier); tokens/s = global batch * seq / that;
//    the median forward / backward / optimizer split of rank 0.
//  - Bytes communicated per step by this rank, from the stats of the FSDP mesh's
//    group (fsdp_module(root).mesh().group(0); not the world group, fully_shard's
//    default mesh has its own): all-gather input (the shard) and reduce-scatter
//    input (the full flat buffer), against the theory of 2 all-gathers and
//    1 reduce-scatter of Psi parameters per step (per rank: 2 * Psi / N * 4 bytes
//    of all-gather input, Psi * 4 bytes of reduce-scatter input), and against the
//    exact expectation from the groups' padded flat sizes (the root group is
//    all-gathered once per step, since it does not reshard after forward).
//  - Per-rank peak memory by tag over the timed steps, and the state bytes
//    (param + grad + optimizer_state currently held after a step) against 16 * Psi / N
//    (f32 parameter, gradient and AdamW's two moments). Forward and backward run
//    under MemoryTagGuard(activation), so untagged allocations there count as
//    activations.
//  - With --profile-overhead: the step profiler's cost (dtr/tensor/profiler.h):
//    --steps pairs of FSDP steps, one with the profiler off and one with it on
//    (recording every span; the trace is not written), in alternating order;
//    the medians of the slowest rank, their ratio and the events per step.
//  - With --hsdp: fully_shard over mesh::init_hsdp_mesh (replicate across hosts,
//    shard within each); the bytes above are then those of the shard group. With
//    --reshard-to K: the blocks keep 1/K of their parameters after forward
//    (reshard_after_forward = K), so backward all-gathers within K ranks only.
//    With --quantize-weights and --quantize-grads B: ZeRO++'s quantized
//    communication between the job's hosts (fsdp::QuantizedCommPolicy): int8
//    all-gathers and B-bit partial gradient sums across hosts.
//    With --tp T: FSDP (or --hsdp's HSDP) over tensor parallelism, the model
//    split over T consecutive ranks (tensor_parallel::parallelize_transformer,
//    with the tied embedding and head split by vocabulary and the loss computed
//    on the split logits), which share their batch slice; the theory then counts
//    Psi_tp, the parameters a tensor-parallel rank holds, over the data-parallel
//    ranks.
//  - With --count-interface IF: the bytes this job's hosts sent on network
//    interface IF (its tx counter in /sys/class/net, read by each host's first
//    rank) per timed step, summed over hosts: what crossed between hosts, for
//    the simulated cluster (bench/cluster_hsdp.sh).
//  - With --compare-unsharded (default on at 1 rank): the same step on a plain,
//    unsharded model of the same shape and seed, run on every rank at the same time
//    (each on its own batch slice, no communication, so CPU contention matches the
//    FSDP run; at 1 rank this is exactly "the plain model on rank 0"), and the
//    FSDP / unsharded step-time ratio (the target: <= 1.03 at 1 rank, where
//    FSDP computes on its shards and communicates nothing).
//    For the ratio both models stay alive and their steps alternate (FSDP, plain,
//    FSDP, ...), so a change in machine load hits both alike; the plain model's
//    memory is measured on its own steps, less what the idle FSDP model holds.
//    At 2 or more ranks, then --steps FSDP steps under the step profiler: the time
//    the caller spent issuing and waiting for collectives (the communication the
//    step does not hide) and in FSDP's buffer copies, and the ratio of the FSDP
//    step less that share of it to the unsharded step (target <= 1.05).
//
// The default shape is GPT-2's block shape reduced to fit a 2-core machine: 6
// layers x 384 wide, 6 heads, vocab 8192 (not GPT-2's 50257: the embedding and
// output head would dominate parameters, memory and time), seq 64, global batch 8.
//
// Run (as root add --allow-run-as-root; with more ranks than cores add --oversubscribe):
//   OMPI_MCA_mpi_yield_when_idle=1 mpirun -np 2 build/dev/bench/dtr_fsdp_step_bench
//       [--layers 6] [--dim 384] [--heads 6] [--vocab 8192] [--seq 64] [--batch 8]
//       [--steps 5] [--warmup 2] [--threads 0] [--compare-unsharded | --no-compare-unsharded]
//       [--profile-overhead] [--hsdp] [--reshard-to K] [--tp T] [--count-interface eth0]
// --threads 0 gives each rank max(1, cores / ranks on the node) compute threads.
// DTR_MPI_PROGRESS_INTERVAL_US sets the MPI progress thread's polling interval.
#include "dtr/base/error.h"
#include "dtr/fsdp/fully_shard.h"
#include "dtr/nn/tensor_parallel/loss_parallel.h"
#include "dtr/nn/tensor_parallel/transformer_plan.h"
#include "dtr/kernels/cpu/cpu_level.h"
#include "dtr/kernels/cpu/parallel.h"
#include "dtr/mesh/device_mesh.h"
#include "dtr/mesh/distributed.h"
#include "dtr/nn/activation_checkpoint.h"
#include "dtr/nn/optim/adamw.h"
#include "dtr/nn/transformer.h"
#include "dtr/tensor/allocator.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/memory_stats.h"
#include "dtr/tensor/ops/nn.h"
#include "dtr/tensor/profiler.h"
#include "dtr/tensor/random.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <variant>
#include <vector>

namespace {

using dtr::MemoryTag;

struct Options {
  int64_t layers = 6;
  int64_t dim = 384;
  int64_t heads = 6;
  int64_t vocab = 8192;
  int64_t seq = 64;
  int64_t batch = 8;  // global
  int steps = 5;
  int warmup = 2;
  int threads = 0;
  bool compare_unsharded = false;  // default: on at 1 rank only
  bool no_compare_unsharded = false;
  bool variants = false;  // also run the bf16 / activation checkpointing / ZeRO-2 variants
  bool profile_overhead = false;  // also time steps with the profiler off and on
  bool hsdp = false;              // mesh::init_hsdp_mesh instead of one dim over all ranks
  int reshard_to = 0;             // > 1: the blocks' reshard_after_forward = K
  bool quantize_weights = false;  // qwZ between the job's hosts
  int quantize_grads = 0;         // qgZ: 8 or 4 bits; 0 off
  int tp = 1;                     // > 1: tensor parallelism over groups of T consecutive ranks
  std::string count_interface;    // a network interface whose sent bytes to count per step
};

// A configuration of fully_shard to compare against the default (FULL_SHARD, f32).
struct Variant {
  const char* name;
  dtr::fsdp::MixedPrecisionPolicy mp;
  bool reshard_after_forward = true;
  bool activation_checkpointing = false;
};

int g_rank = 0;
int g_size = 1;
dtr::mesh::DeviceMesh g_loss_mesh;  // with --tp: the logits are split by vocabulary over it

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double mib(double bytes) { return bytes / (1 << 20); }

constexpr std::array<MemoryTag, 5> kTags{MemoryTag::param, MemoryTag::grad, MemoryTag::optimizer_state,
                                         MemoryTag::activation, MemoryTag::comm_buffer};

struct Result {
  double step_s = 0;  // median of the slowest rank's step time
  double forward_s = 0, backward_s = 0, optimizer_s = 0;  // rank 0's medians
  double loss = 0;
  dtr::MemoryStats memory;      // after the last timed step (peaks over the timed steps)
  int64_t state_bytes = 0;      // param + grad + optimizer_state current after the step
  dtr::mesh::CommStats comm;    // over the timed steps (FSDP only)
  std::string group_name;
  int64_t ag_bytes_expected = 0, rs_bytes_expected = 0;  // per step, from the padded flat sizes
};

dtr::nn::TransformerConfig make_config(const Options& opt) {
  dtr::nn::TransformerConfig c;
  c.style = dtr::nn::TransformerStyle::gpt2;
  c.vocab_size = opt.vocab;
  c.dim = opt.dim;
  c.n_layers = opt.layers;
  c.n_heads = opt.heads;
  c.max_seq_len = opt.seq;
  return c;
}

// This rank's rows of the global batch: inputs and next-token targets.
std::pair<dtr::Tensor, dtr::Tensor> local_batch(const Options& opt) {
  dtr::manual_seed(1234);  // the same global batch on every rank
  std::vector<float> u = dtr::rand({opt.batch, opt.seq + 1}).to_vector<float>();
  // A tensor-parallel group shares one data-parallel rank's rows.
  const int64_t local = opt.batch / (g_size / opt.tp), begin = g_rank / opt.tp * local;
  std::vector<int64_t> ids;
  for (int64_t b = begin; b < begin + local; ++b) {
    for (int64_t t = 0; t <= opt.seq; ++t) {
      ids.push_back(static_cast<int64_t>(u[static_cast<size_t>(b * (opt.seq + 1) + t)] *
                                         static_cast<float>(opt.vocab - 1)));
    }
  }
  dtr::Tensor tokens = dtr::from_vector<int64_t>(ids, {local, opt.seq + 1});
  return {tokens.narrow(1, 0, opt.seq).contiguous(), tokens.narrow(1, 1, opt.seq).contiguous()};
}

// One model, its optimizer and this rank's batch; step() runs forward, backward
// (both under MemoryTagGuard(activation)) and AdamW, and records the split.
struct Trainer {
  dtr::nn::Transformer& model;
  dtr::nn::optim::AdamW optimizer;
  dtr::Tensor inputs, targets;
  int64_t vocab;
  double forward_s = 0, backward_s = 0, optimizer_s = 0;

  Trainer(dtr::nn::Transformer& m, const Options& opt)
      : model(m), optimizer(m.parameters(), {.lr = 1e-4}), vocab(opt.vocab) {
    std::tie(inputs, targets) = local_batch(opt);
  }

  double step() {
    using namespace dtr;
    const double t0 = now_s();
    double t1 = 0, t2 = 0;
    Tensor loss;
    {
      MemoryTagGuard tag(MemoryTag::activation);
      const Tensor logits = model(inputs);
      loss = g_loss_mesh.defined()
                 ? nn::tensor_parallel::vocab_parallel_cross_entropy(logits.reshape({-1, logits.size(-1)}),
                                                                     targets.reshape({-1}), g_loss_mesh, vocab)
                 : cross_entropy(logits.reshape({-1, vocab}), targets.reshape({-1}));
      t1 = now_s();
      optimizer.zero_grad();
      loss.backward();
      t2 = now_s();
    }
    optimizer.step();
    const double value = loss.item();
    const double t3 = now_s();
    forward_s = t1 - t0, backward_s = t2 - t1, optimizer_s = t3 - t2;
    return value;
  }
};

// Timed steps of the trainers, in turns within each rep (so changes in machine
// load hit them alike); every step starts after a barrier. Returns per trainer:
// the median of the slowest rank's step time, and rank 0's fwd/bwd/opt medians.
std::vector<Result> time_steps(const std::vector<Trainer*>& trainers, int steps) {
  const size_t n = trainers.size();
  std::vector<std::vector<double>> times(n), fwd(n), bwd(n), optim(n);
  std::vector<Result> results(n);
  for (int i = 0; i < steps; ++i) {
    for (size_t t = 0; t < n; ++t) {
      MPI_Barrier(MPI_COMM_WORLD);
      const double t0 = now_s();
      results[t].loss = trainers[t]->step();
      times[t].push_back(now_s() - t0);
      fwd[t].push_back(trainers[t]->forward_s);
      bwd[t].push_back(trainers[t]->backward_s);
      optim[t].push_back(trainers[t]->optimizer_s);
    }
  }
  for (size_t t = 0; t < n; ++t) {
    MPI_Allreduce(MPI_IN_PLACE, times[t].data(), steps, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    results[t].step_s = median(times[t]);
    results[t].forward_s = median(fwd[t]);
    results[t].backward_s = median(bwd[t]);
    results[t].optimizer_s = median(optim[t]);
  }
  return results;
}

// The communication an FSDP step does not hide: `steps` steps with the step
// profiler on, each summing the time the caller spent issuing collectives
// ("comm" spans) and waiting for them ("comm_wait"), and FSDP's buffer copies
// (its "copy_" and "padding" spans).
// Medians of the slowest rank, in seconds.
struct ExposedCommunication {
  double step_s = 0, issue_s = 0, wait_s = 0, copies_s = 0;
};

ExposedCommunication exposed_communication(Trainer& trainer, int steps) {
  dtr::profiler::finalize();  // DTR_PROFILE: stop (and write) first
  std::vector<double> step, issue, wait, copies;
  for (int i = 0; i < steps; ++i) {
    dtr::profiler::start({.print_summary = false});
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = now_s();
    trainer.step();
    step.push_back(now_s() - t0);
    dtr::profiler::stop();
    double in_issue = 0, in_wait = 0, in_copies = 0;
    for (const auto& span : dtr::profiler::top_spans()) {
      if (span.category == "comm") in_issue += span.total_ms / 1e3;
      if (span.category == "comm_wait") in_wait += span.total_ms / 1e3;
      const bool copies_buffers =
          span.name.find("copy_") != std::string::npos || span.name.find("padding") != std::string::npos;
      if (span.category == "fsdp" && copies_buffers) in_copies += span.total_ms / 1e3;
    }
    issue.push_back(in_issue);
    wait.push_back(in_wait);
    copies.push_back(in_copies);
    dtr::profiler::clear();
  }
  ExposedCommunication out;
  for (auto [v, field] : {std::pair{&step, &out.step_s}, std::pair{&issue, &out.issue_s}, std::pair{&wait, &out.wait_s},
                          std::pair{&copies, &out.copies_s}}) {
    MPI_Allreduce(MPI_IN_PLACE, v->data(), steps, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    *field = median(*v);
  }
  return out;
}

// The step profiler's cost: `steps` pairs of steps, profiler off and on (order
// alternating), each after a barrier; prints the medians of the slowest rank.
void profile_overhead(Trainer& trainer, int steps) {
  dtr::profiler::finalize();  // DTR_PROFILE: stop (and write) first, the pairs need it off
  std::vector<double> off, on;
  size_t events = 0;
  for (int i = 0; i < steps; ++i) {
    for (const bool profiling : {i % 2 == 1, i % 2 == 0}) {
      if (profiling) dtr::profiler::start({.print_summary = false});
      MPI_Barrier(MPI_COMM_WORLD);
      const double t0 = now_s();
      trainer.step();
      (profiling ? on : off).push_back(now_s() - t0);
      if (profiling) {
        dtr::profiler::stop();
        events += dtr::profiler::event_count();
      }
    }
  }
  dtr::profiler::clear();
  MPI_Allreduce(MPI_IN_PLACE, off.data(), steps, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, on.data(), steps, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  if (g_rank == 0) {
    const double off_ms = 1e3 * median(off), on_ms = 1e3 * median(on);
    fmt::print("\nStep profiler ({} pairs of steps, off and on alternately; median of the slowest rank):\n"
               "  off {:.1f} ms/step, on {:.1f} ms/step: on/off {:.3f} ({:+.2f}%), {} events per step on rank 0\n",
               steps, off_ms, on_ms, on_ms / off_ms, 100.0 * (on_ms / off_ms - 1.0),
               events / static_cast<size_t>(steps));
  }
}

// Memory by tag now, less `baseline`'s current bytes (what another model holds).
dtr::MemoryStats memory_since(const dtr::MemoryStats& baseline) {
  dtr::MemoryStats m = dtr::memory_stats(dtr::Device::cpu());
  for (int k = 0; k < dtr::kNumMemoryTags; ++k) {
    const auto i = static_cast<size_t>(k);
    m.by_tag[i].current_bytes -= baseline.by_tag[i].current_bytes;
    m.by_tag[i].peak_bytes -= baseline.by_tag[i].current_bytes;
  }
  m.total.current_bytes -= baseline.total.current_bytes;
  m.total.peak_bytes -= baseline.total.current_bytes;
  return m;
}

int64_t state_bytes(const dtr::MemoryStats& m) {
  return m[MemoryTag::param].current_bytes + m[MemoryTag::grad].current_bytes +
         m[MemoryTag::optimizer_state].current_bytes;
}

// Every rank's value of x, gathered on rank 0 (empty elsewhere).
std::vector<int64_t> gather(int64_t x) {
  std::vector<int64_t> all(static_cast<size_t>(g_size));
  MPI_Gather(&x, 1, MPI_INT64_T, all.data(), 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
  return all;
}

// Per-rank memory table: peak by tag, state bytes now against 16 * Psi / N.
void print_memory(const char* title, const Result& r, int64_t psi, int n_for_state, const char* ideal_label) {
  std::vector<std::vector<int64_t>> peaks;
  for (MemoryTag tag : kTags) peaks.push_back(gather(r.memory[tag].peak_bytes));
  const std::vector<int64_t> total_peak = gather(r.memory.total.peak_bytes);
  const std::vector<int64_t> state = gather(r.state_bytes);
  if (g_rank != 0) return;
  const double ideal = 16.0 * static_cast<double>(psi) / n_for_state;
  fmt::print("\n{} (MiB; peak over the timed steps; state = param + grad + optimizer_state held after a step)\n",
             title);
  fmt::print("{:>5} | {:>8} | {:>8} | {:>9} | {:>10} | {:>11} | {:>10} | {:>9} | {:>12} | {:>6}\n", "rank",
             "param", "grad", "opt_state", "activation", "comm_buffer", "total peak", "state", ideal_label, "ratio");
  fmt::print("{:->5}-+-{:->8}-+-{:->8}-+-{:->9}-+-{:->10}-+-{:->11}-+-{:->10}-+-{:->9}-+-{:->12}-+-{:->6}\n", "", "",
             "", "", "", "", "", "", "", "");
  for (int rank = 0; rank < g_size; ++rank) {
    const auto i = static_cast<size_t>(rank);
    fmt::print("{:>5} | {:>8.2f} | {:>8.2f} | {:>9.2f} | {:>10.2f} | {:>11.2f} | {:>10.2f} | {:>9.2f} | {:>12.2f} | "
               "{:>6.3f}\n",
               rank, mib(static_cast<double>(peaks[0][i])), mib(static_cast<double>(peaks[1][i])),
               mib(static_cast<double>(peaks[2][i])), mib(static_cast<double>(peaks[3][i])),
               mib(static_cast<double>(peaks[4][i])), mib(static_cast<double>(total_peak[i])),
               mib(static_cast<double>(state[i])), mib(ideal), static_cast<double>(state[i]) / ideal);
  }
}

// Bytes the hosts of the job have sent on `interface` (its tx counter, read by
// each host's first rank), summed over hosts; 0 when `interface` is empty. Collective.
// The sum over the ranks of what each sent (mesh::sent_by_link).
dtr::mesh::LinkBytes all_ranks(dtr::mesh::LinkBytes mine) {
  int64_t v[2] = {mine.within_host, mine.across_hosts};
  MPI_Allreduce(MPI_IN_PLACE, v, 2, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  return {v[0], v[1]};
}

int64_t hosts_sent_bytes(const std::string& interface) {
  if (interface.empty()) return 0;
  int64_t mine = 0;
  if (dtr::distributed::local_rank() == 0) {
    std::ifstream in("/sys/class/net/" + interface + "/statistics/tx_bytes");
    DTR_CHECK(in >> mine, "fsdp_step_bench: cannot read the tx counter of interface '{}' (rank {})", interface,
              g_rank);
  }
  int64_t total = 0;
  MPI_Allreduce(&mine, &total, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  return total;
}

void apply_variant_before_sharding(dtr::nn::Transformer& model, const Variant& v) {
  if (!v.activation_checkpointing) return;
  dtr::nn::apply_activation_checkpointing(
      model, [](const dtr::nn::Module& m) { return dynamic_cast<const dtr::nn::TransformerBlock*>(&m) != nullptr; });
}

// Builds a fresh model for `v`, shards it, and times it like the main run.
Result run_variant(const Options& opt, const Variant& v) {
  using namespace dtr;
  const MemoryStats baseline = memory_stats(Device::cpu());
  manual_seed(0);
  nn::Transformer model(make_config(opt));
  apply_variant_before_sharding(model, v);
  for (auto& layer : model.layers()) {
    fsdp::fully_shard(*layer, {.reshard_after_forward = v.reshard_after_forward, .mp_policy = v.mp});
  }
  auto root = fsdp::fully_shard(model, {.mp_policy = v.mp});
  Trainer trainer(model, opt);
  const mesh::ProcessGroupPtr group = root.mesh().group(0);
  for (int i = 0; i < opt.warmup; ++i) trainer.step();
  MPI_Barrier(MPI_COMM_WORLD);
  group->reset_stats();
  reset_peak_memory_stats(Device::cpu());
  Result r = time_steps({&trainer}, opt.steps)[0];
  r.comm = group->stats();
  r.memory = memory_since(baseline);
  r.state_bytes = state_bytes(r.memory);
  return r;
}

void print_variants(const Options& opt, const std::vector<std::pair<Variant, Result>>& runs) {
  if (g_rank != 0) return;
  fmt::print("\nVariants (fresh model each; rank 0's bytes and peaks, MiB; AG/RS = all-gather/reduce-scatter input "
             "per step)\n");
  fmt::print("{:>22} | {:>9} | {:>8} | {:>8} | {:>10} | {:>10} | {:>11} | {:>10}\n", "", "ms/step", "AG MiB",
             "RS MiB", "param pk", "activ. pk", "comm pk", "total pk");
  fmt::print("{:->22}-+-{:->9}-+-{:->8}-+-{:->8}-+-{:->10}-+-{:->10}-+-{:->11}-+-{:->10}\n", "", "", "", "", "", "",
             "", "");
  for (const auto& [v, r] : runs) {
    const double steps = opt.steps;
    fmt::print("{:>22} | {:>9.1f} | {:>8.2f} | {:>8.2f} | {:>10.2f} | {:>10.2f} | {:>11.2f} | {:>10.2f}\n", v.name,
               1e3 * r.step_s, mib(static_cast<double>(r.comm.bytes_of(dtr::mesh::CollectiveKind::all_gather)) / steps),
               mib(static_cast<double>(r.comm.bytes_of(dtr::mesh::CollectiveKind::reduce_scatter)) / steps),
               mib(static_cast<double>(r.memory[MemoryTag::param].peak_bytes)),
               mib(static_cast<double>(r.memory[MemoryTag::activation].peak_bytes)),
               mib(static_cast<double>(r.memory[MemoryTag::comm_buffer].peak_bytes)),
               mib(static_cast<double>(r.memory.total.peak_bytes)));
  }
}

}  // namespace

int main(int argc, char** argv) {
  using namespace dtr;
  distributed::init();
  g_rank = distributed::rank();
  g_size = distributed::world_size();

  Options opt;
  CLI::App app{"dtr FSDP training-step benchmark: step time, communication and memory per rank"};
  app.add_option("--layers", opt.layers, "transformer blocks")->check(CLI::PositiveNumber);
  app.add_option("--dim", opt.dim, "model width")->check(CLI::PositiveNumber);
  app.add_option("--heads", opt.heads, "attention heads")->check(CLI::PositiveNumber);
  app.add_option("--vocab", opt.vocab, "vocabulary size (GPT-2: 50257)")->check(CLI::PositiveNumber);
  app.add_option("--seq", opt.seq, "sequence length")->check(CLI::PositiveNumber);
  app.add_option("--batch", opt.batch, "global batch (divisible by the number of ranks)")
      ->check(CLI::PositiveNumber);
  app.add_option("--steps", opt.steps, "timed steps (the median is reported)")->check(CLI::PositiveNumber);
  app.add_option("--warmup", opt.warmup, "untimed warm-up steps")->check(CLI::NonNegativeNumber);
  app.add_option("--threads", opt.threads, "compute threads per rank (0: cores / ranks on the node)")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--compare-unsharded", opt.compare_unsharded,
               "also time the step on a plain unsharded model (default: on at 1 rank only)");
  app.add_flag("--no-compare-unsharded", opt.no_compare_unsharded, "do not (also at 1 rank)");
  app.add_flag("--profile-overhead", opt.profile_overhead,
               "also time FSDP steps with the step profiler off and on, alternately");
  app.add_flag("--hsdp", opt.hsdp, "shard within each host, replicate across hosts (mesh::init_hsdp_mesh)");
  app.add_option("--reshard-to", opt.reshard_to,
                 "blocks keep 1/K of their parameters after forward (reshard_after_forward = K; 0: true)")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--quantize-weights", opt.quantize_weights, "int8 all-gathers between hosts (ZeRO++'s qwZ)");
  app.add_option("--quantize-grads", opt.quantize_grads,
                 "8 | 4: partial gradient sums between hosts quantized (ZeRO++'s qgZ); 0: off");
  app.add_option("--tp", opt.tp, "tensor parallelism over groups of T consecutive ranks (FSDP over the groups)")
      ->check(CLI::PositiveNumber);
  app.add_option("--count-interface", opt.count_interface,
                 "count the bytes the hosts send on this network interface per timed step (e.g. eth0)");
  app.add_flag("--variants", opt.variants,
               "also run bf16 mixed precision, activation checkpointing and ZeRO-2 (SHARD_GRAD_OP) variants");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = g_rank == 0 ? app.exit(e) : e.get_exit_code();
    distributed::finalize();
    return code;
  }
  if (g_size % opt.tp != 0 || opt.batch % (g_size / opt.tp) != 0 ||
      (opt.tp > 1 && (opt.compare_unsharded || opt.variants || opt.heads % opt.tp != 0))) {
    if (g_rank == 0) {
      fmt::print(stderr,
                 "fsdp_step_bench: --batch {} must divide by the {} data-parallel ranks ({} ranks / --tp {}); --tp "
                 "must divide the ranks and --heads, and runs without --compare-unsharded and --variants\n",
                 opt.batch, g_size / opt.tp, g_size, opt.tp);
    }
    distributed::finalize();
    return 1;
  }
  const bool compare = !opt.no_compare_unsharded && (opt.compare_unsharded || g_size == 1) && opt.tp == 1;
  int threads = opt.threads;
  if (threads == 0) {
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    threads = std::max(1, cores / distributed::local_world_size());
  }
  kernels::set_num_threads(threads);

  const nn::TransformerConfig config = make_config(opt);
  manual_seed(0);
  nn::Transformer model(config);
  const int64_t psi = model.num_parameters();
  const int64_t dp_size = g_size / opt.tp;
  mesh::DeviceMesh dp_mesh;
  if (opt.tp == 1) {
    dp_mesh = opt.hsdp ? mesh::init_hsdp_mesh(DeviceType::cpu) : mesh::init_device_mesh(DeviceType::cpu, {g_size}, {"dp"});
  } else {
    const auto mesh = opt.hsdp ? mesh::init_hsdp_mesh(DeviceType::cpu, opt.tp)
                               : mesh::init_device_mesh(DeviceType::cpu, {dp_size, opt.tp}, {"dp", "tp"});
    nn::tensor_parallel::parallelize_transformer(model, mesh["tp"],
                                                 {.vocab_parallel_embedding = true, .loss_parallel = true});
    g_loss_mesh = mesh["tp"];
    dp_mesh = opt.hsdp ? mesh[std::vector<std::string>{"replicate", "shard"}] : mesh["dp"];
  }
  int64_t psi_tp = 0;  // what this rank holds before FSDP shards it: Psi without tensor parallelism
  for (const nn::Parameter& p : model.parameters()) psi_tp += p.data().numel();
  std::optional<std::variant<bool, int>> block_reshard;
  if (opt.reshard_to > 1) block_reshard = opt.reshard_to;
  const fsdp::QuantizedCommPolicy quantized{.weights = opt.quantize_weights, .gradient_bits = opt.quantize_grads};
  for (auto& layer : model.layers()) {
    fsdp::fully_shard(*layer, {.mesh = dp_mesh, .reshard_after_forward = block_reshard, .quantized_comm = quantized});
  }
  auto root = fsdp::fully_shard(model, {.mesh = dp_mesh, .quantized_comm = quantized});
  if (g_rank == 0) {
    fmt::print("dtr FSDP step bench: GPT-2-style {} layers x {} wide, {} heads, vocab {}, seq {}, "
               "global batch {} ({} per rank), f32, AdamW\n",
               opt.layers, opt.dim, opt.heads, opt.vocab, opt.seq, opt.batch, opt.batch / dp_size);
    fmt::print("Psi = {} parameters ({:.1f} MiB f32); {} ranks, {} compute threads each; {} warm-up + {} "
               "timed steps; CPU kernels {}\n",
               psi, mib(4.0 * static_cast<double>(psi)), g_size, threads, opt.warmup, opt.steps,
               kernels::cpu::cpu_level_description());
    fmt::print("mesh {} on {} host(s); blocks reshard after forward: {}; quantized between hosts: weights {}, "
               "gradients {}\n",
               dp_mesh.to_string(), distributed::num_hosts(),
               opt.reshard_to > 1 ? fmt::format("to {} ranks", opt.reshard_to) : "yes",
               opt.quantize_weights ? "int8" : "no",
               opt.quantize_grads ? fmt::format("int{}", opt.quantize_grads) : "no");
    if (opt.tp > 1) {
      fmt::print("tensor parallel over {} ranks: Psi_tp = {} parameters per tensor-parallel rank ({:.1f} MiB f32)\n",
                 opt.tp, psi_tp, mib(4.0 * static_cast<double>(psi_tp)));
    }
  }

  // 1. FSDP alone: step time, communication, memory.
  Trainer fsdp_trainer(model, opt);
  const mesh::ProcessGroupPtr group = root.mesh().group(root.mesh().ndim() - 1);  // the shard dim
  std::vector<mesh::ProcessGroupPtr> job_groups = {distributed::world_group()};
  for (int d = 0; d < dp_mesh.ndim(); ++d) job_groups.push_back(dp_mesh.group(d));
  if (g_loss_mesh.defined()) job_groups.push_back(g_loss_mesh.group(0));
  for (auto& split : fsdp::process_groups(model)) job_groups.push_back(split);  // hosts, post-forward groups
  for (int i = 0; i < opt.warmup; ++i) fsdp_trainer.step();  // the first allocates the optimizer state
  MPI_Barrier(MPI_COMM_WORLD);
  group->reset_stats();
  reset_peak_memory_stats(Device::cpu());
  const int64_t sent_before = hosts_sent_bytes(opt.count_interface);
  const mesh::LinkBytes counted_before = mesh::sent_by_link(job_groups);
  Result sharded = time_steps({&fsdp_trainer}, opt.steps)[0];
  const int64_t sent_per_step = (hosts_sent_bytes(opt.count_interface) - sent_before) / opt.steps;
  const mesh::LinkBytes counted = all_ranks(mesh::sent_by_link(job_groups) - counted_before);
  sharded.comm = group->stats();
  sharded.group_name = group->name();
  sharded.memory = memory_stats(Device::cpu());
  sharded.state_bytes = state_bytes(sharded.memory);
  {
    int64_t blocks_flat = 0;
    for (auto& layer : model.layers()) blocks_flat += fsdp::fsdp_module(*layer).shard_numel_padded();
    const int64_t root_flat = root.shard_numel_padded(), elem = static_cast<int64_t>(sizeof(float));
    // Blocks: forward and backward; the root keeps its parameters after forward.
    sharded.ag_bytes_expected = (2 * blocks_flat + root_flat) * elem;
    sharded.rs_bytes_expected = (blocks_flat + root_flat) * group->size() * elem;
  }

  // 2. The plain model: its memory on its own steps (less what the FSDP model
  // holds meanwhile, which does not change between its steps), then both models'
  // steps interleaved for the time ratio.
  std::optional<Result> plain, fsdp_interleaved;
  std::optional<nn::Transformer> plain_model;
  std::optional<Trainer> plain_trainer;
  if (compare) {
    const MemoryStats baseline = memory_stats(Device::cpu());
    manual_seed(0);
    plain_model.emplace(config);
    plain_trainer.emplace(*plain_model, opt);
    for (int i = 0; i < opt.warmup; ++i) plain_trainer->step();
    MPI_Barrier(MPI_COMM_WORLD);
    reset_peak_memory_stats(Device::cpu());
    plain = time_steps({&*plain_trainer}, 1)[0];
    plain->memory = memory_since(baseline);
    plain->state_bytes = state_bytes(plain->memory);
    auto both = time_steps({&fsdp_trainer, &*plain_trainer}, opt.steps);
    fsdp_interleaved = both[0];
    const MemoryStats keep = plain->memory;
    plain = both[1];
    plain->memory = keep;
    plain->state_bytes = state_bytes(keep);
  }
  std::optional<ExposedCommunication> exposed;
  if (compare && g_size > 1) exposed = exposed_communication(fsdp_trainer, opt.steps);

  const double tokens = static_cast<double>(opt.batch * opt.seq);
  if (g_rank == 0) {
    fmt::print("\nStep time (median of the slowest rank; fwd/bwd/opt: rank 0's medians; tokens/s of the global "
               "batch)\n");
    fmt::print("{:>10} | {:>9} | {:>10} | {:>8} | {:>8} | {:>8} | {:>9}\n", "", "ms/step", "tokens/s", "fwd ms",
               "bwd ms", "opt ms", "loss");
    fmt::print("{:->10}-+-{:->9}-+-{:->10}-+-{:->8}-+-{:->8}-+-{:->8}-+-{:->9}\n", "", "", "", "", "", "", "");
    auto row = [&](const char* what, const Result& r) {
      fmt::print("{:>10} | {:>9.1f} | {:>10.0f} | {:>8.1f} | {:>8.1f} | {:>8.1f} | {:>9.4f}\n", what, 1e3 * r.step_s,
                 tokens / r.step_s, 1e3 * r.forward_s, 1e3 * r.backward_s, 1e3 * r.optimizer_s, r.loss);
    };
    row("FSDP", sharded);
    if (plain) {
      fmt::print("interleaved (FSDP step, then unsharded step, {} times):\n", opt.steps);
      row("FSDP", *fsdp_interleaved);
      row("unsharded", *plain);
      const double ratio = fsdp_interleaved->step_s / plain->step_s;
      fmt::print("FSDP / unsharded step time: {:.3f}{}\n", ratio,
                 g_size == 1 ? (ratio <= 1.03 ? "  (target <= 1.03 at 1 rank: met)" : "  (target <= 1.03 at 1 rank: "
                                                                                      "NOT met)")
                             : "  (unsharded: every rank at once on its slice, no communication)");
      if (exposed) {
        // The profiled steps' share of communication, applied to the interleaved FSDP
        // step (the two sets of steps run at different times on a shared machine).
        const double exposed_share = (exposed->issue_s + exposed->wait_s) / exposed->step_s;
        const double hidden_free = fsdp_interleaved->step_s * (1 - exposed_share);
        fmt::print("communication not hidden ({} profiled FSDP steps of {:.1f} ms): issuing {:.1f} ms + waiting "
                   "{:.1f} ms per step ({:.1f}%); FSDP's buffer copies {:.1f} ms\n",
                   opt.steps, 1e3 * exposed->step_s, 1e3 * exposed->issue_s, 1e3 * exposed->wait_s,
                   100 * exposed_share, 1e3 * exposed->copies_s);
        fmt::print("FSDP less that communication / unsharded: {:.3f}  (target <= 1.05)\n",
                   hidden_free / plain->step_s);
      }
    }

    const double steps = opt.steps;
    const mesh::CommStats& c = sharded.comm;
    auto per_step = [&](mesh::CollectiveKind kind) {
      return std::pair{static_cast<double>(c.calls_of(kind)) / steps, static_cast<double>(c.bytes_of(kind)) / steps};
    };
    double other_bytes = 0;
    for (int k = 0; k < mesh::kNumCollectiveKinds; ++k) {
      const auto kind = static_cast<mesh::CollectiveKind>(k);
      if (kind != mesh::CollectiveKind::all_gather && kind != mesh::CollectiveKind::reduce_scatter) {
        other_bytes += static_cast<double>(c.bytes_of(kind)) / steps;
      }
    }
    const double n = static_cast<double>(dp_size);  // the ranks FSDP shards Psi_tp over
    if (g_size == 1) {
      fmt::print("\nCommunication per step: none (over one rank the groups compute on their shards); "
                 "measured: {} all-gathers, {} reduce-scatters\n",
                 c.calls_of(mesh::CollectiveKind::all_gather), c.calls_of(mesh::CollectiveKind::reduce_scatter));
    } else {
      fmt::print("\nCommunication per step: rank 0's input bytes on the FSDP group '{}' (MiB);\n"
                 "theory (issue) = 2 all-gathers + 1 reduce-scatter of Psi: AG 2*Psi/N*4, RS Psi*4 bytes;\n"
                 "expected = from the padded flat groups, root all-gathered once (it keeps its parameters "
                 "after forward)\n",
                 sharded.group_name);
      fmt::print("{:>14} | {:>7} | {:>10} | {:>11} | {:>8} | {:>10} | {:>9}\n", "", "calls", "measured",
                 "theory", "measured/", "expected", "measured/");
      fmt::print("{:>14} | {:>7} | {:>10} | {:>11} | {:>8} | {:>10} | {:>9}\n", "", "", "", "(issue)", "theory",
                 "", "expected");
      fmt::print("{:->14}-+-{:->7}-+-{:->10}-+-{:->11}-+-{:->9}-+-{:->10}-+-{:->9}\n", "", "", "", "", "", "", "");
      auto comm_row = [&](const char* what, std::pair<double, double> m, double theory, double expected) {
        fmt::print("{:>14} | {:>7.1f} | {:>10.3f} | {:>11.3f} | {:>9.3f} | {:>10.3f} | {:>9.3f}\n", what, m.first,
                   mib(m.second), mib(theory), m.second / theory, mib(expected), m.second / expected);
      };
      const auto ag = per_step(mesh::CollectiveKind::all_gather), rs = per_step(mesh::CollectiveKind::reduce_scatter);
      const double ag_theory = 2.0 * static_cast<double>(psi_tp) / n * 4, rs_theory = static_cast<double>(psi_tp) * 4;
      comm_row("all-gather", ag, ag_theory, static_cast<double>(sharded.ag_bytes_expected));
      comm_row("reduce-scatter", rs, rs_theory, static_cast<double>(sharded.rs_bytes_expected));
      comm_row("total", {ag.first + rs.first, ag.second + rs.second}, ag_theory + rs_theory,
               static_cast<double>(sharded.ag_bytes_expected + sharded.rs_bytes_expected));
    }
    if (other_bytes > 0) fmt::print("other collectives on the group: {:.3f} MiB per step\n", mib(other_bytes));
    if (!opt.count_interface.empty()) {
      // Full shard over N ranks on H hosts: each all-gather or reduce-scatter ring
      // step crosses hosts at H of its N links, so H/N of 3 * Psi * (N-1)/N * 4 bytes
      // (a lower bound for other algorithms; HSDP instead all-reduces the gradient
      // across hosts: 2 * Psi * (H-1)/H * 4 bytes per shard group).
      fmt::print("\nBetween hosts ({} tx of each host, summed): {:.3f} MiB per timed step\n", opt.count_interface,
                 mib(static_cast<double>(sent_per_step)));
    }
    fmt::print("Counted by dtr (CommStats sent_*: a ring's volume, all ranks' groups): {:.3f} MiB across hosts, "
               "{:.3f} MiB within hosts per timed step\n",
               mib(static_cast<double>(counted.across_hosts) / steps),
               mib(static_cast<double>(counted.within_host) / steps));
  }
  if (opt.profile_overhead) profile_overhead(fsdp_trainer, opt.steps);
  print_memory("FSDP memory per rank", sharded, psi_tp, static_cast<int>(dp_size), opt.tp > 1 ? "16*Psi_tp/N_dp" : "16*Psi/N");
  if (plain) print_memory("Unsharded memory per rank", *plain, psi, 1, "16*Psi");
  if (opt.variants) {
    plain_trainer.reset();
    plain_model.reset();
    const fsdp::MixedPrecisionPolicy bf16{.param_dtype = DType::bf16, .reduce_dtype = DType::f32};
    std::vector<std::pair<Variant, Result>> runs;
    for (const Variant& v : {Variant{"FULL_SHARD f32", {}}, Variant{"bf16 (reduce f32)", bf16},
                             Variant{"activation ckpt", {}, true, true}, Variant{"ZeRO-2 (SHARD_GRAD_OP)", {}, false}}) {
      runs.emplace_back(v, run_variant(opt, v));
    }
    print_variants(opt, runs);
  }
  g_loss_mesh = {};
  distributed::finalize();
  return 0;
}
