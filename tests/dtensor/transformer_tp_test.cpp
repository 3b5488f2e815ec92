// The built-in Transformer under tensor parallelism (transformer_plan.h) at
// world sizes 1-4: Llama (with grouped key/value heads where they divide) and
// GPT-2 (biases, tied embedding, fused GELU) train 5 AdamW steps with clipping
// and give the losses and final parameters of the same model trained in this
// process (in f64: losses to 1e-12, parameters to 1e-9), also with a
// vocabulary-parallel embedding, sequence parallelism (norms on sequence
// shards), and loss parallelism (loss_parallel.h), whose
// loss and gradient equal cross_entropy's on the whole logits; heads that do
// not divide are refused, naming them.
#include "dtr/mesh/device_mesh.h"
#include "dtr/mesh/distributed.h"
#include "dtr/nn/optim/adamw.h"
#include "dtr/nn/optim/clip_grad.h"
#include "dtr/nn/tensor_parallel/loss_parallel.h"
#include "dtr/nn/tensor_parallel/parallelize_module.h"
#include "dtr/nn/tensor_parallel/transformer_plan.h"
#include "dtr/nn/transformer.h"
#include "dtr/tensor/autograd/grad_mode.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/nn.h"
#include "dtr/tensor/ops/shape_ops.h"
#include "tests/support/dtensor_op_check.h"
#include "tests/support/parameter_check.h"
#include "dtr/tensor/random.h"

#include <catch2/catch.hpp>

#include <cmath>

using namespace dtr;
namespace tp = dtr::nn::tensor_parallel;

namespace {

constexpr int64_t kTpVocab = 40, kTpSeq = 12;  // the sequence divides by 1-4 ranks

// 12 heads of 4 over 48 features: whole heads at 1, 2, 3 and 4 ranks.
nn::TransformerConfig tp_test_config(nn::TransformerStyle style, int64_t kv_heads) {
  return {.style = style, .vocab_size = kTpVocab, .dim = 48, .n_layers = 2, .n_heads = 12, .n_kv_heads = kv_heads,
          .ffn_hidden = 72, .max_seq_len = kTpSeq, .tie_weights = style == nn::TransformerStyle::gpt2,
          .dtype = DType::f64};
}

// The same full model on every rank.
std::shared_ptr<nn::Transformer> tp_test_model(const nn::TransformerConfig& config) {
  manual_seed(11);
  return std::make_shared<nn::Transformer>(config);
}

// The next-token loss on batch `step` (the same on every rank); with a mesh, of
// logits sharded by vocabulary over it (loss parallelism).
Tensor tp_test_loss(nn::Module& model, int step, const mesh::DeviceMesh* loss_mesh) {
  std::vector<int64_t> ids(3 * (kTpSeq + 1));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = (static_cast<int64_t>(i) * 7 + step * 5 + 3) % kTpVocab;
  const Tensor batch = from_vector(ids, {3, kTpSeq + 1});
  Tensor logits = model(batch.narrow(1, 0, kTpSeq).contiguous());
  const Tensor targets = batch.narrow(1, 1, kTpSeq).contiguous().reshape({-1});
  if (loss_mesh) {
    return tp::vocab_parallel_cross_entropy(logits.reshape({-1, logits.size(-1)}), targets, *loss_mesh, kTpVocab);
  }
  return cross_entropy(logits.reshape({-1, kTpVocab}), targets);
}

// Losses of 5 AdamW steps with the gradient norm clipped to 0.5.
std::vector<double> tp_test_train(nn::Module& model, const mesh::DeviceMesh* loss_mesh = nullptr) {
  const auto params = model.parameters();
  nn::optim::AdamW opt(params, {.lr = 1e-2, .weight_decay = 0.1});
  std::vector<double> losses;
  for (int step = 0; step < 5; ++step) {
    Tensor loss = tp_test_loss(model, step, loss_mesh);
    losses.push_back(loss.item());
    loss.backward();
    nn::optim::clip_grad_norm_(params, 0.5);
    opt.step();
    opt.zero_grad();
  }
  return losses;
}

void check_against_one_process(const nn::TransformerConfig& config, const tp::TransformerPlanOptions& options = {}) {
  const bool loss_parallel = options.loss_parallel;
  const auto mesh = mesh::init_device_mesh(DeviceType::cpu, {distributed::world_size()}, {"tp"});
  auto reference = tp_test_model(config);
  auto model = tp_test_model(config);
  tp::parallelize_transformer(*model, mesh, options);
  if (options.vocab_parallel_embedding) {
    CHECK(tp::parameter_dtensor(*model, "tok_embeddings.weight").to_local().size(0) ==
          shard_range(kTpVocab, distributed::world_size(), distributed::rank()).length);
  }
  // Every block's projections hold this rank's slice.
  if (distributed::world_size() > 1) {
    const auto up = tp::parameter_dtensor(*model, "layers.0.ffn.up.weight");
    CHECK(up.to_local().size(0) == config.ffn_hidden / distributed::world_size());
    CHECK(up.placements()[0].is_shard());
  }
  const std::vector<double> want = tp_test_train(*reference),
                            got = tp_test_train(*model, loss_parallel ? &mesh : nullptr);
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("step " << i << ": " << got[i] << " with tensor parallelism, " << want[i] << " in one process");
    CHECK(std::abs(got[i] - want[i]) <= 1e-12 * std::abs(want[i]));
  }
  // AdamW divides by the root of tiny second moments: parameters to a 1e-7 of lr.
  dtr::testing::require_same_parameters(*model, *reference, 1e-9);
}

}  // namespace

TEST_CASE("tensor parallel Llama trains as one process", "[tensor_parallel][transformer]") {
  // Grouped key/value heads (6) where the ranks divide them, else one per head.
  const int64_t kv_heads = 6 % distributed::world_size() == 0 ? 6 : 12;
  check_against_one_process(tp_test_config(nn::TransformerStyle::llama, kv_heads));
}

TEST_CASE("tensor parallel GPT-2 trains as one process", "[tensor_parallel][transformer]") {
  check_against_one_process(tp_test_config(nn::TransformerStyle::gpt2, 0));
}

TEST_CASE("tensor parallel with a vocabulary-parallel embedding and loss trains as one process",
          "[tensor_parallel][transformer]") {
  const auto llama = tp_test_config(nn::TransformerStyle::llama, 12), gpt2 = tp_test_config(nn::TransformerStyle::gpt2, 0);
  SECTION("Llama, loss parallel") { check_against_one_process(llama, {.loss_parallel = true}); }
  SECTION("Llama, vocabulary-parallel embedding") {
    check_against_one_process(llama, {.vocab_parallel_embedding = true});
  }
  SECTION("Llama, both") {
    check_against_one_process(llama, {.vocab_parallel_embedding = true, .loss_parallel = true});
  }
  SECTION("GPT-2, its tied head and embedding sharded together") {
    check_against_one_process(gpt2, {.vocab_parallel_embedding = true, .loss_parallel = true});
  }
  SECTION("Llama, sequence parallel") {
    check_against_one_process(llama, {.vocab_parallel_embedding = true, .sequence_parallel = true});
  }
  SECTION("Llama, sequence and loss parallel") {
    check_against_one_process(llama,
                              {.vocab_parallel_embedding = true, .loss_parallel = true, .sequence_parallel = true});
  }
  SECTION("sequence parallel needs the vocabulary-parallel embedding and Llama style") {
    const auto mesh = mesh::init_device_mesh(DeviceType::cpu, {distributed::world_size()}, {"tp"});
    auto plain = tp_test_model(llama);
    CHECK_THROWS_WITH(tp::parallelize_transformer(*plain, mesh, {.sequence_parallel = true}),
                      Catch::Contains("sequence_parallel needs vocab_parallel_embedding"));
    auto gpt = tp_test_model(gpt2);
    CHECK_THROWS_WITH(
        tp::parallelize_transformer(*gpt, mesh,
                                    {.vocab_parallel_embedding = true, .loss_parallel = true, .sequence_parallel = true}),
        Catch::Contains("tie_weights true, style gpt2"));
  }
  SECTION("a sequence that does not divide by the ranks is refused") {
    if (distributed::world_size() == 1) return;
    const auto mesh = mesh::init_device_mesh(DeviceType::cpu, {distributed::world_size()}, {"tp"});
    auto model = tp_test_model(llama);
    tp::parallelize_transformer(*model, mesh, {.vocab_parallel_embedding = true, .sequence_parallel = true});
    const Tensor odd = from_vector<int64_t>(std::vector<int64_t>(static_cast<size_t>(distributed::world_size() + 1), 1),
                                            {1, distributed::world_size() + 1});
    CHECK_THROWS_WITH((*model)(odd), Catch::Contains("the dim must divide by the"));
  }
  SECTION("a tied head cannot be sharded without its embedding") {
    const auto mesh = mesh::init_device_mesh(DeviceType::cpu, {distributed::world_size()}, {"tp"});
    auto tied = tp_test_model(gpt2);
    CHECK_THROWS_WITH(tp::parallelize_transformer(*tied, mesh, {.loss_parallel = true}),
                      Catch::Contains("ties its output head to the token embedding"));
  }
}

TEST_CASE("vocab_parallel_cross_entropy equals cross_entropy of the whole logits", "[tensor_parallel][transformer]") {
  // 11 entries split unevenly (3 and 4 ranks), rows with an ignored target.
  const int64_t rows = 7, vocab = 11;
  const auto mesh = mesh::init_device_mesh(DeviceType::cpu, {distributed::world_size()}, {"tp"});
  const Tensor full = mul(dtr::testing::random_full({rows, vocab}, 21), 4.0);
  const Tensor targets = from_vector<int64_t>({3, 10, -100, 0, 7, -100, 5}, {rows});
  Tensor whole = full.clone().requires_grad_();
  Tensor want = cross_entropy(whole, targets);
  want.backward();
  const ShardRange mine = shard_range(vocab, distributed::world_size(), distributed::rank());
  Tensor local = full.narrow(1, mine.offset, mine.length).contiguous().requires_grad_();
  Tensor got = tp::vocab_parallel_cross_entropy(local, targets, mesh, vocab);
  got.backward();
  CHECK(std::abs(got.item() - want.item()) <= 1e-12 * std::abs(want.item()));
  dtr::testing::require_close(local.grad(), whole.grad().narrow(1, mine.offset, mine.length).contiguous(), 1e-12);
  // A target outside the vocabulary, and logits of another width.
  CHECK_THROWS_WITH(tp::vocab_parallel_cross_entropy(local, from_vector<int64_t>({11, 0, 0, 0, 0, 0, 0}, {rows}),
                                                     mesh, vocab),
                    Catch::Contains("a target is outside [0, 11)"));
  CHECK_THROWS_WITH(tp::vocab_parallel_cross_entropy(full, targets, mesh, 12),
                    Catch::Contains("expected logits [N, "));
}

TEST_CASE("tensor parallel transformer plan: heads that do not divide are refused", "[tensor_parallel][transformer]") {
  const int ranks = distributed::world_size();
  if (ranks == 1) return;  // one rank divides everything
  const auto mesh = mesh::init_device_mesh(DeviceType::cpu, {ranks}, {"tp"});
  // One more head than a multiple of the ranks (head dim 4).
  auto heads = tp_test_model({.dim = 4 * (ranks + 1), .n_heads = ranks + 1, .max_seq_len = kTpSeq});
  CHECK_THROWS_WITH(tp::parallelize_transformer(*heads, mesh),
                    Catch::Contains(fmt::format("n_heads {} does not divide by the tensor-parallel size {}", ranks + 1,
                                                ranks)));
  CHECK_FALSE(heads->named_parameters()[1].second.is_sharded());  // nothing changed
  auto kv = tp_test_model({.dim = 8 * ranks, .n_heads = 2 * ranks, .n_kv_heads = 1, .max_seq_len = kTpSeq});
  CHECK_THROWS_WITH(tp::parallelize_transformer(*kv, mesh),
                    Catch::Contains(fmt::format("the 1 key/value heads (n_kv_heads) do not divide by the "
                                                "tensor-parallel size {}",
                                                ranks)));
}
