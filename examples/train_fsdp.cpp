// train_fsdp: a byte-level Llama-style model trained with fully_shard on every
// block and the root, each rank on its own slice of every global batch.
//   mpirun -np 2 build/release/examples/train_fsdp [steps=150]
// Each rank holds about 1/N of the parameters, gradients and AdamW state; rank 0
// prints the loss (averaged over the ranks) and the per-rank state memory. Then it
// saves a checkpoint of the model and its optimizer in one call
// (train_fsdp_ckpt_np<N> in the working directory), resumes a fresh model and
// optimizer from it in one call, and checks that one more step of each gives the
// same loss. The process exits non-zero if the loss did not fall below half its
// start or the resumed step differs.
#include <dtr/dtr.h>
#include <dtr/tensor/allocator.h>

#include <fmt/format.h>

#include <cstdlib>
#include <string_view>

namespace {

constexpr std::string_view kText =
    "It is a truth universally acknowledged, that a single man in possession of a good fortune, "
    "must be in want of a wife. However little known the feelings or views of such a man may be "
    "on his first entering a neighbourhood, this truth is so well fixed in the minds of the "
    "surrounding families, that he is considered the rightful property of some one or other of "
    "their daughters. ";

// Rows [begin, end) of a global batch: windows of the text at offsets that move with the step.
std::pair<dtr::Tensor, dtr::Tensor> batch(int step, int64_t begin, int64_t end, int64_t seq) {
  std::vector<int64_t> tokens, targets;
  for (int64_t b = begin; b < end; ++b) {
    const size_t start = static_cast<size_t>(step * 37 + b * 53) % (kText.size() - seq - 1);
    for (int64_t t = 0; t < seq; ++t) {
      tokens.push_back(static_cast<unsigned char>(kText[start + t]));
      targets.push_back(static_cast<unsigned char>(kText[start + t + 1]));
    }
  }
  return {dtr::from_vector(tokens, {end - begin, seq}), dtr::from_vector(targets, {end - begin, seq})};
}

}  // namespace

int main(int argc, char** argv) {
  using namespace dtr;
  distributed::init();
  const int steps = argc > 1 ? std::atoi(argv[1]) : 150;
  const int n = distributed::world_size(), rank = distributed::rank();
  const int64_t global_batch = 8 * n, seq = 32;

  nn::TransformerConfig config;  // Llama style, byte vocabulary
  config.vocab_size = 256;
  config.dim = 64;
  config.n_layers = 2;
  config.n_heads = 4;
  config.max_seq_len = seq;
  config.device = Device::meta();  // build without memory; each rank materialises its shards
  auto build = [&] {
    auto model = std::make_shared<nn::Transformer>(config);
    for (auto& layer : model->layers()) fsdp::fully_shard(*layer);
    fsdp::fully_shard(*model);
    model->to_empty(Device::cpu());
    return model;
  };
  auto model = build();
  const int64_t psi = model->num_parameters();  // the whole model's count, on every rank
  manual_seed(0);
  model->reset_parameters();  // the values of an unsharded init, whatever the number of ranks

  nn::optim::AdamW opt(model->parameters(), {.lr = 3e-3, .weight_decay = 0.0});
  const int64_t local = global_batch / n;
  // One optimizer step on this rank's rows of batch `step`; the loss averaged over the ranks.
  auto train_step = [&](nn::Module& m, nn::optim::Optimizer& o, int step) {
    auto [tokens, targets] = batch(step, rank * local, (rank + 1) * local, seq);
    o.zero_grad();
    Tensor logits = m(tokens);
    Tensor loss = cross_entropy(logits.reshape({-1, config.vocab_size}), targets.reshape({-1}));
    loss.backward();
    o.step();
    Tensor mean_loss = full({1}, loss.item(), {.dtype = DType::f64});
    distributed::world_group()->all_reduce(mean_loss, mesh::ReduceOp::avg())->wait();
    return mean_loss.item();
  };
  double first = 0, last = 0;
  for (int step = 0; step < steps; ++step) {
    last = train_step(*model, opt, step);
    if (step == 0) first = last;
    if (rank == 0 && (step % 25 == 0 || step == steps - 1)) fmt::print("step {:4d}  loss {:.4f}\n", step, last);
  }
  const auto stats = memory_stats(Device::cpu());
  const int64_t state = stats[MemoryTag::param].current_bytes + stats[MemoryTag::grad].current_bytes +
                        stats[MemoryTag::optimizer_state].current_bytes;
  if (rank == 0) {
    fmt::print("{} ranks, {} parameters: rank 0 holds {:.2f} MB of parameters + gradients + AdamW state "
               "(16 bytes x params / ranks = {:.2f} MB)\n",
               n, psi, state / 1e6, 16.0 * psi / n / 1e6);
  }

  // Checkpoint and resume, one call each (any world size can load it).
  const std::string dir = fmt::format("train_fsdp_ckpt_np{}", n);
  checkpoint::save(dir, *model, opt, {{"step", steps}});
  auto resumed = build();
  nn::optim::AdamW resumed_opt(resumed->parameters(), {.lr = 3e-3, .weight_decay = 0.0});
  const nlohmann::json extra = checkpoint::load(dir, *resumed, resumed_opt);
  const int next = extra.at("step").get<int>();
  const double continued = train_step(*model, opt, next), after_resume = train_step(*resumed, resumed_opt, next);
  if (rank == 0) fmt::print("step {} from {}: loss {:.6f}, continuing without it {:.6f}\n", next, dir, after_resume,
                            continued);
  distributed::finalize();
  return last < 0.5 * first && after_resume == continued ? 0 : 1;
}
