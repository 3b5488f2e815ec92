// Activation checkpointing under FSDP at world sizes 1-4: the blocks are wrapped
// by apply_activation_checkpointing and then fully_shard is applied to each
// wrapper and to the root (AC first, then FSDP). Training with dropout matches
// FSDP training without checkpointing (same losses, same parameters), and each
// step issues exactly as many all-gathers: the recomputation in backward uses the
// parameters FSDP's pre-backward already gathered.
#include "dtr/fsdp/fully_shard.h"
#include "dtr/mesh/distributed.h"
#include "tests/support/mpi_test_util.h"
#include "dtr/nn/activation_checkpoint.h"
#include "dtr/nn/optim/adamw.h"
#include "dtr/nn/transformer.h"
#include "dtr/tensor/ops/elementwise.h"
#include "dtr/tensor/ops/nn.h"
#include "dtr/tensor/random.h"

#include "tests/support/tiny_transformer.h"

#include <catch2/catch.hpp>

using namespace dtr;
using dtr::testing::kSeq;
using dtr::testing::values_of;

namespace {

constexpr int64_t kCheckpointedBatch = 12;  // divisible by 1-4 ranks

std::shared_ptr<nn::Transformer> make_model(DType dtype) {
  nn::TransformerConfig c;
  c.dtype = dtype;
  c.vocab_size = 32;
  c.dim = 16;
  c.n_layers = 3;
  c.n_heads = 2;
  c.max_seq_len = 16;
  c.dropout = 0.2;  // the recomputation must replay the masks
  manual_seed(17);
  return std::make_shared<nn::Transformer>(c);
}

struct Trained {
  std::vector<double> losses;
  std::vector<int64_t> all_gathers_per_step;
  std::vector<std::pair<std::string, std::vector<double>>> params;  // full values
};

// shard_inner: fully_shard each block first and wrap the sharded blocks (FSDP's
// hooks then run again when the wrapper recomputes the block in backward).
Trained train(nn::Transformer& model, bool checkpoint, int steps, bool shard_inner = false) {
  const int n = distributed::world_size(), me = distributed::rank();
  if (shard_inner) {
    for (auto& layer : model.layers()) fsdp::fully_shard(*layer);
  }
  if (checkpoint) {
    int wrapped = nn::apply_activation_checkpointing(
        model, [](const nn::Module& m) { return dynamic_cast<const nn::TransformerBlock*>(&m) != nullptr; });
    REQUIRE(wrapped == model.config().n_layers);
  }
  for (auto& layer : model.layers()) {
    REQUIRE((dynamic_cast<nn::CheckpointWrapper*>(layer.get()) != nullptr) == checkpoint);
    if (!shard_inner) fsdp::fully_shard(*layer);
  }
  auto root = fsdp::fully_shard(model);
  const mesh::ProcessGroupPtr& group = root.mesh().group(0);  // shared by every group (the default mesh)
  nn::optim::AdamW opt(model.parameters(), {.lr = 1e-2});
  const int64_t local = kCheckpointedBatch / n;
  Trained out;
  for (int step = 0; step < steps; ++step) {
    manual_seed(1000 + static_cast<uint64_t>(step));
    const int64_t gathers_before = group->stats().calls_of(mesh::CollectiveKind::all_gather);
    auto [tokens, targets] = testing::token_batch(step, me * local, (me + 1) * local, kSeq);
    Tensor logits = model(tokens);
    Tensor loss = cross_entropy(logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}));
    loss.backward();
    opt.step();
    opt.zero_grad();
    out.all_gathers_per_step.push_back(group->stats().calls_of(mesh::CollectiveKind::all_gather) - gathers_before);
    out.losses.push_back(loss.item());
  }
  for (auto& [name, p] : model.named_parameters()) {
    REQUIRE(p.is_sharded());
    out.params.emplace_back(name, values_of(p.as_dtensor().full_tensor()));
  }
  return out;
}

}  // namespace

TEST_CASE("FSDP with activation checkpointing trains like FSDP without it, with as many all-gathers per step") {
  for (DType dtype : {DType::f64, DType::f32}) {
    INFO((dtype == DType::f64 ? "f64" : "f32"));
    auto plain_model = make_model(dtype);
    auto ckpt_model = make_model(dtype);
    const int steps = 3;
    Trained plain = train(*plain_model, /*checkpoint=*/false, steps);
    Trained ckpt = train(*ckpt_model, /*checkpoint=*/true, steps);

    // Per step: the root once (kept after forward), every block once in forward and
    // once again in backward; checkpointing adds none. One rank computes on its
    // shards and gathers nothing.
    const int64_t blocks = plain_model->config().n_layers;
    const int64_t expected_all_gathers = distributed::world_size() > 1 ? 1 + 2 * blocks : 0;
    for (int step = 0; step < steps; ++step) {
      INFO("step " << step);
      CHECK(plain.all_gathers_per_step[step] == expected_all_gathers);
      CHECK(ckpt.all_gathers_per_step[step] == plain.all_gathers_per_step[step]);
      // The same computation in the same order: the same bits.
      CHECK(ckpt.losses[step] == plain.losses[step]);
    }
    REQUIRE(ckpt.params.size() == plain.params.size());
    for (size_t i = 0; i < plain.params.size(); ++i) {
      INFO(plain.params[i].first);
      CHECK(ckpt.params[i].first == plain.params[i].first);  // checkpointing keeps names
      CHECK(ckpt.params[i].second == plain.params[i].second);
    }
  }
}

TEST_CASE("FSDP applied inside the checkpoint wrappers trains alike, without extra all-gathers") {
  auto plain_model = make_model(DType::f64);
  auto ckpt_model = make_model(DType::f64);
  const int steps = 3;
  Trained plain = train(*plain_model, /*checkpoint=*/false, steps);
  Trained ckpt = train(*ckpt_model, /*checkpoint=*/true, steps, /*shard_inner=*/true);
  for (int step = 0; step < steps; ++step) {
    INFO("step " << step);
    CHECK(ckpt.all_gathers_per_step[step] == plain.all_gathers_per_step[step]);
    CHECK(ckpt.losses[step] == plain.losses[step]);
  }
  for (size_t i = 0; i < plain.params.size(); ++i) {
    INFO(plain.params[i].first);
    CHECK(ckpt.params[i].second == plain.params[i].second);
  }
}
