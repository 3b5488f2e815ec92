// shard_a_model: a commented walk-through of sharding a model with fully_shard,
// printing every rank's parameter / gradient / optimizer-state memory at each
// stage (from the CPU allocator's tagged statistics) so the Psi/N effect shows:
//   mpirun -np 2 build/release/examples/shard_a_model [checkpoint_dir=runs/shard_a_model/ckpt]
// Stages: build on meta -> fully_shard bottom-up -> to_empty(cpu) ->
// reset_parameters -> train -> save a distributed checkpoint. The program checks
// what it prints: nothing allocated on meta, 4 * Psi / N (+ at most one padding row
// per parameter) bytes of parameters per rank, as much gradient and twice as much
// AdamW state; the loss falls; the checkpoint has its metadata. Exit 1 otherwise.
#include <dtr/dtr.h>
#include <dtr/tensor/allocator.h>

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace {

using namespace dtr;

int failures = 0;
void expect(bool ok, const std::string& what) {
  if (!ok && distributed::rank() == 0) fmt::print(stderr, "FAIL: {}\n", what);
  if (!ok) ++failures;
}

// Bytes this rank holds now, by tag (what the allocator counts).
struct Held {
  double params = 0, grads = 0, optimizer = 0, param_peak = 0;
};

// Every rank's Held (one all-gather), printed by rank 0 as one line per rank.
std::vector<Held> report(const std::string& stage) {
  const MemoryStats s = memory_stats(Device::cpu());
  Tensor mine = from_vector(std::vector<double>{static_cast<double>(s[MemoryTag::param].current_bytes),
                                                static_cast<double>(s[MemoryTag::grad].current_bytes),
                                                static_cast<double>(s[MemoryTag::optimizer_state].current_bytes),
                                                static_cast<double>(s[MemoryTag::param].peak_bytes)},
                            {4});
  const auto world = distributed::world_group();
  Tensor all = empty({4 * world->size()}, {.dtype = DType::f64});
  world->all_gather_into_tensor(all, mine)->wait();
  const std::vector<double> v = all.to_vector<double>();
  std::vector<Held> held;
  for (int r = 0; r < world->size(); ++r) held.push_back({v[4 * r], v[4 * r + 1], v[4 * r + 2], v[4 * r + 3]});
  if (distributed::rank() == 0) {
    fmt::print("\n{}\n", stage);
    for (int r = 0; r < world->size(); ++r) {
      const Held& h = held[r];
      fmt::print("  rank {}: params {:8.1f} KiB   grads {:8.1f} KiB   AdamW state {:8.1f} KiB   "
                 "(params peak {:8.1f} KiB)\n",
                 r, h.params / 1024, h.grads / 1024, h.optimizer / 1024, h.param_peak / 1024);
    }
  }
  return held;
}

constexpr std::string_view kText =
    "It is a truth universally acknowledged, that a single man in possession of a good fortune, "
    "must be in want of a wife. However little known the feelings or views of such a man may be "
    "on his first entering a neighbourhood, this truth is so well fixed in the minds of the "
    "surrounding families, that he is considered the rightful property of some one or other of "
    "their daughters. ";

}  // namespace

int main(int argc, char** argv) {
  distributed::init();
  const int rank = distributed::rank(), n = distributed::world_size();
  const std::filesystem::path ckpt_dir = argc > 1 ? argv[1] : "runs/shard_a_model/ckpt";

  // 1. Build the model on the meta device: parameters get shapes and dtypes but
  //    no storage, so even a model larger than one rank's memory can be described.
  nn::TransformerConfig config;  // a small byte-level Llama-style decoder
  config.vocab_size = 256;
  config.dim = 128;
  config.n_layers = 4;
  config.n_heads = 4;
  config.max_seq_len = 32;
  config.device = Device::meta();
  nn::Transformer model(config);
  const int64_t psi = model.num_parameters();
  if (rank == 0) {
    fmt::print("{} rank(s); the model has Psi = {} parameters = {:.1f} KiB in f32; each rank should hold 1/{} of it\n",
               n, psi, 4.0 * psi / 1024, n);
  }
  auto held = report("1. built on meta: nothing allocated yet");
  for (const Held& h : held) expect(h.params == 0, "a meta model allocates no parameter bytes");

  // 2. fully_shard bottom-up: each TransformerBlock becomes its own parameter group
  //    (one all-gather / reduce-scatter each), then the root takes what is left
  //    (embedding, final norm, output projection). Every parameter is now a Shard(0)
  //    DTensor over the world mesh, still on meta.
  for (auto& block : model.layers()) fsdp::fully_shard(*block);
  fsdp::fully_shard(model);
  held = report(fmt::format("2. fully_shard on {} blocks, then the root: still nothing allocated", config.n_layers));
  for (const Held& h : held) expect(h.params == 0, "fully_shard on meta allocates no parameter bytes");

  // 3. to_empty(cpu): each rank allocates only its shard of every parameter
  //    (torch.chunk rows: the first ranks take one row more when rows do not divide).
  model.to_empty(Device::cpu());
  held = report("3. to_empty(cpu): each rank allocates its shards, about 1/N of the parameters");
  int64_t row_bytes = 0;  // one row of every parameter: the most an uneven split adds
  for (const auto& [name, p] : model.named_parameters()) row_bytes += 4 * p->numel() / std::max<int64_t>(1, p->size(0));
  for (const Held& h : held) {
    expect(std::abs(h.params - 4.0 * static_cast<double>(psi) / n) <= static_cast<double>(row_bytes),
           fmt::format("parameter bytes {} are 4 * Psi / N = {} (+- one row per parameter)", h.params, 4.0 * psi / n));
  }

  // 4. reset_parameters: every rank fills its shard with the values an unsharded
  //    initialisation would have there (counter-based RNG), whatever N is.
  manual_seed(0);
  model.reset_parameters();
  report("4. reset_parameters: values in place, no new memory");

  // 5. Train a few steps. The optimizer sees the local shards only, so its state is
  //    1/N too; during forward/backward a block's parameters are all-gathered and
  //    freed again (the "params peak" column: the shards plus the gathered groups).
  nn::optim::AdamW opt(model.parameters(), {.lr = 3e-3, .weight_decay = 0.0});
  const int64_t seq = config.max_seq_len, rows = 4;  // sequences per rank
  double first = 0, last = 0;
  for (int step = 0; step < 20; ++step) {
    std::vector<int64_t> tokens, targets;
    for (int64_t b = 0; b < rows; ++b) {  // this rank's windows of the text
      const size_t start = static_cast<size_t>(step * 37 + (rank * rows + b) * 53) % (kText.size() - seq - 1);
      for (int64_t t = 0; t < seq; ++t) {
        tokens.push_back(static_cast<unsigned char>(kText[start + t]));
        targets.push_back(static_cast<unsigned char>(kText[start + t + 1]));
      }
    }
    opt.zero_grad();
    Tensor logits = model(from_vector(tokens, {rows, seq}));
    Tensor loss = cross_entropy(logits.reshape({-1, config.vocab_size}), from_vector(targets, {rows * seq}));
    loss.backward();  // each block's gradients are reduce-scattered into its shards' .grad
    opt.step();
    Tensor mean = full({1}, loss.item(), {.dtype = DType::f64});
    distributed::world_group()->all_reduce(mean, mesh::ReduceOp::avg())->wait();
    last = mean.item();
    if (step == 0) first = last;
  }
  if (rank == 0) fmt::print("\ntrained 20 steps: loss {:.3f} -> {:.3f}\n", first, last);
  expect(last < 0.8 * first, fmt::format("the loss fell: {:.3f} -> {:.3f}", first, last));
  held = report("5. after training: sharded gradients and AdamW moments (exp_avg, exp_avg_sq) are 1/N too");
  for (const Held& h : held) {
    expect(h.grads == h.params, fmt::format("gradient bytes {} equal the shards' {}", h.grads, h.params));
    expect(h.optimizer >= 2 * h.params && h.optimizer <= 2 * h.params + 1024,
           fmt::format("AdamW state {} bytes is two moments of the shards' {}", h.optimizer, h.params));
  }

  // 6. Save a distributed checkpoint: every rank writes its own shards (rank_<r>.bin)
  //    in parallel, rank 0 the metadata; it loads at any number of ranks.
  checkpoint::CheckpointState state;
  state.add_model(model);
  state.add_optimizer(opt, model);
  state.extra["step"] = 20;
  checkpoint::save(ckpt_dir, state);
  const auto file = ckpt_dir / fmt::format("rank_{}.bin", rank);
  Tensor size = full({1}, static_cast<double>(std::filesystem::file_size(file)), {.dtype = DType::f64});
  distributed::world_group()->all_reduce(size, mesh::ReduceOp::max())->wait();
  if (rank == 0) {
    fmt::print("\n6. saved {} (largest rank file {:.1f} KiB: its shards of the parameters and AdamW state)\n",
               ckpt_dir.string(), size.item() / 1024);
  }
  expect(std::filesystem::exists(ckpt_dir / "metadata.json"), "the checkpoint has metadata.json");
  distributed::finalize();
  return failures == 0 ? 0 : 1;
}
