// The memory estimator on a 7B-class Llama shape (dtr/fsdp/memory_estimate.h):
// parameter count and per-rank state from the shapes alone, the printable table
// for every strategy, and no tensor memory allocated to make them.
#include "dtr/fsdp/memory_estimate.h"
#include "dtr/fsdp/wrap_policy.h"
#include "dtr/nn/transformer.h"
#include "dtr/nn/transformer_memory.h"
#include "dtr/tensor/allocator.h"

#include <catch2/catch.hpp>

#include <functional>

using namespace dtr;

namespace {

nn::TransformerConfig llama_7b() {
  nn::TransformerConfig c;
  c.vocab_size = 32000;
  c.dim = 4096;
  c.n_layers = 32;
  c.n_heads = 32;
  c.ffn_hidden = 11008;
  c.max_seq_len = 4096;
  return c;
}

}  // namespace

TEST_CASE("estimate_memory of a 7B-class config allocates nothing and counts its parameters") {
  const MemoryStats before = memory_stats(Device::cpu());
  const nn::TransformerConfig c = llama_7b();
  // Per block: 4 x 4096^2 attention + 3 x 4096 x 11008 feed-forward + 2 norms; embedding, head, final norm.
  const int64_t block = 4 * 4096LL * 4096 + 3 * 4096LL * 11008 + 2 * 4096;
  const int64_t psi = 32 * block + 2 * 32000LL * 4096 + 4096;
  REQUIRE(psi == 6738415616LL);  // Llama-2-7B

  nn::TransformerConfig meta = c;
  meta.device = Device::meta();
  nn::Transformer model(meta);
  const auto blocks = fsdp::module_type_policy<nn::TransformerBlock>();
  const fsdp::ActivationModel activations = std::bind_front(nn::estimate_activation_bytes, c);
  const auto e = fsdp::estimate_memory(model, blocks, 8, {.batch_size = 1, .seq_len = 4096}, activations);
  REQUIRE(e.num_params == psi);
  REQUIRE(e.groups.size() == 33);
  // Every dim-0 size divides by 8: no padding, each rank holds psi / 8 in f32.
  REQUIRE(e.params == psi / 8 * 4);
  REQUIRE(e.grads == e.params);
  REQUIRE(e.optimizer_state == 2 * e.params);
  // The root (embedding, head, norm) plus one block, unsharded.
  REQUIRE(e.unsharded_peak == 4 * ((2 * 32000LL * 4096 + 4096) + block));
  REQUIRE(e.activations_ckpt < e.activations_no_ckpt);

  const auto none = fsdp::estimate_memory(model, blocks, 8, {.strategy = fsdp::ShardingStrategy::no_shard});
  REQUIRE(none.params == psi * 4);
  const auto hsdp = fsdp::estimate_memory(model, blocks, 8, {.strategy = fsdp::ShardingStrategy::hybrid_shard,
                                                 .hybrid_shard_size = 4});
  REQUIRE(hsdp.params == psi / 4 * 4);

  const std::string table = fsdp::memory_table(model, blocks, 8, {.batch_size = 1, .seq_len = 4096}, activations);
  WARN(table);
  REQUIRE(table.find("FULL_SHARD") != std::string::npos);
  REQUIRE(table.find("HYBRID_SHARD(2)") != std::string::npos);
  REQUIRE(table.find("NO_SHARD") != std::string::npos);
  REQUIRE(e.to_string().find("params") != std::string::npos);

  const MemoryStats after = memory_stats(Device::cpu());
  REQUIRE(after.total.num_allocations == before.total.num_allocations);
  REQUIRE(after.total.current_bytes == before.total.current_bytes);
}
