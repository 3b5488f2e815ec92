// Activation checkpointing (dtr/nn/activation_checkpoint.h): gradients equal bit for bit with and
// without it (dropout masks replayed), parameter names unchanged, parameters of a
// module whose input needs no grad still get gradients, the re-entrant backward,
// and the activation memory it saves on a 4-block transformer.
#include "dtr/nn/activation_checkpoint.h"
#include "dtr/nn/container.h"
#include "dtr/nn/layers.h"
#include "dtr/nn/linear.h"
#include "dtr/nn/transformer.h"
#include "dtr/tensor/allocator.h"
#include "dtr/tensor/autograd/engine.h"
#include "dtr/tensor/autograd/grad_mode.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/elementwise.h"
#include "dtr/tensor/ops/nn.h"
#include "dtr/tensor/ops/reduce.h"
#include "dtr/tensor/random.h"
#include "tests/support/tiny_transformer.h"

#include <catch2/catch.hpp>

using namespace dtr;
using namespace dtr::nn;
using dtr::testing::tokens_of;

namespace {

bool is_block(const Module& m) { return dynamic_cast<const TransformerBlock*>(&m) != nullptr; }

TransformerConfig config_of(TransformerStyle style, double dropout, int64_t n_layers = 2) {
  return {.style = style, .vocab_size = 13, .dim = 16, .n_layers = n_layers, .n_heads = 4,
          .n_kv_heads = style == TransformerStyle::llama ? 2 : 0, .ffn_hidden = 24, .max_seq_len = 8,
          .dropout = dropout, .dtype = DType::f64};
}

Tensor loss_of(Transformer& model, const Tensor& tokens, const Tensor& targets) {
  Tensor logits = model(tokens);
  return cross_entropy(logits.reshape({-1, model.config().vocab_size}), targets.reshape({-1}));
}

std::vector<std::string> names_of(const Module& m) {
  std::vector<std::string> out;
  for (auto& [name, p] : m.named_parameters()) out.push_back(name);
  return out;
}

}  // namespace

TEST_CASE("apply_activation_checkpointing wraps each matching block once and keeps parameter names",
          "[nn][checkpoint]") {
  manual_seed(1);
  Transformer plain(config_of(TransformerStyle::llama, 0.0, 3));
  manual_seed(1);
  Transformer model(config_of(TransformerStyle::llama, 0.0, 3));
  CHECK(apply_activation_checkpointing(model, is_block) == 3);
  for (const ModulePtr& layer : model.layers()) {
    CHECK(layer->type_name() == "CheckpointWrapper(TransformerBlock)");
    CHECK(dynamic_cast<CheckpointWrapper*>(layer.get()) != nullptr);
  }
  CHECK(apply_activation_checkpointing(model, is_block) == 0);  // already wrapped
  CHECK(names_of(model) == names_of(plain));
  CHECK(model.state_dict().size() == plain.state_dict().size());
  model.load_state_dict(plain.state_dict());  // strict: the same keys
  // The wrapper and the block it wraps are both listed, under the same path.
  int at_layer0 = 0;
  for (auto& [path, m] : model.named_modules()) at_layer0 += path == "layers.0" ? 1 : 0;
  CHECK(at_layer0 == 2);
  // A module that calls its children through members of its own refuses to swap them.
  CHECK_THROWS_WITH(apply_activation_checkpointing(model.layers()[0], [](const Module& m) {
                      return m.type_name() == "Attention";
                    }),
                    Catch::Contains("cannot replace its child 'attn'"));
}

TEST_CASE("checkpointed transformer blocks give bit-identical f64 gradients with dropout in training mode",
          "[nn][checkpoint]") {
  for (TransformerStyle style : {TransformerStyle::llama, TransformerStyle::gpt2}) {
    INFO((style == TransformerStyle::llama ? "llama" : "gpt2"));
    manual_seed(5);
    Transformer plain(config_of(style, 0.25));
    manual_seed(5);
    Transformer checkpointed(config_of(style, 0.25));
    REQUIRE(apply_activation_checkpointing(checkpointed, is_block) == 2);
    Tensor tokens = tokens_of({1, 5, 2, 7, 3, 0, 4, 4, 9, 10, 12, 11}, 2, 6);
    Tensor targets = tokens_of({5, 2, 7, 3, 1, 4, 4, 9, 10, 6, 11, 12}, 2, 6);

    for (int step = 0; step < 2; ++step) {  // the second step draws different masks
      manual_seed(100 + step);
      const GeneratorState start = default_generator().state();
      Tensor loss_plain = loss_of(plain, tokens, targets);
      const GeneratorState after_plain_forward = default_generator().state();
      loss_plain.backward();
      CHECK(default_generator().state() == after_plain_forward);
      CHECK(after_plain_forward.offset > start.offset);  // dropout drew

      manual_seed(100 + step);
      Tensor loss_ckpt = loss_of(checkpointed, tokens, targets);
      CHECK(default_generator().state() == after_plain_forward);
      loss_ckpt.backward();
      // Recomputation replays the saved state and puts the generator back.
      CHECK(default_generator().state() == after_plain_forward);

      CHECK(loss_ckpt.item() == loss_plain.item());
      auto plain_params = plain.named_parameters();
      auto ckpt_params = checkpointed.named_parameters();
      REQUIRE(plain_params.size() == ckpt_params.size());
      for (size_t i = 0; i < plain_params.size(); ++i) {
        INFO("step " << step << " " << plain_params[i].first);
        REQUIRE(ckpt_params[i].first == plain_params[i].first);
        REQUIRE(plain_params[i].second->grad().defined());
        REQUIRE(ckpt_params[i].second->grad().defined());
        CHECK(ckpt_params[i].second->grad().to_vector<double>() == plain_params[i].second->grad().to_vector<double>());
      }
      plain.zero_grad();
      checkpointed.zero_grad();
    }
  }
}

TEST_CASE("a dropout mask is replayed: checkpointing without the saved generator state would change gradients",
          "[nn][checkpoint]") {
  // The same dropout module run twice from different generator states gives different
  // masks, so equal gradients above really depend on the replay.
  Dropout drop(0.5);
  Tensor x = ones({64}, {.dtype = DType::f64});
  manual_seed(7);
  std::vector<double> first = drop(x).to_vector<double>();
  std::vector<double> second = drop(x).to_vector<double>();
  CHECK(first != second);
  // Checkpointed: the gradient through the mask equals the mask of the forward.
  manual_seed(7);
  auto inner = std::make_shared<Dropout>(0.5);
  std::vector<bool> recomputing;  // what the inner module's forward hook sees, per call
  inner->register_forward_hook([&](Module&, const Tensor&, const Tensor&) {
    recomputing.push_back(in_checkpoint_recomputation());
    return Tensor();
  });
  auto wrapped = checkpoint_wrapper(inner);
  Tensor leaf = ones({64}, {.dtype = DType::f64});
  leaf.requires_grad_();
  Tensor y = (*wrapped)(leaf);
  CHECK(y.to_vector<double>() == first);
  drop(x);  // the outer stream moves on before backward
  const GeneratorState outer = default_generator().state();
  sum(y).backward();
  CHECK(leaf.grad().to_vector<double>() == first);  // d(sum(mask * x))/dx = mask (with x = 1)
  CHECK(default_generator().state() == outer);
  CHECK(recomputing == std::vector<bool>{false, true});
  CHECK_FALSE(in_checkpoint_recomputation());
}

TEST_CASE("a checkpointed module gets parameter gradients when its input does not require grad",
          "[nn][checkpoint]") {
  manual_seed(3);
  auto first = std::make_shared<Linear>(6, 5, LinearOptions{.dtype = DType::f64});
  auto second = std::make_shared<Linear>(5, 4, LinearOptions{.dtype = DType::f64});
  Sequential model{checkpoint_wrapper(first), second};
  Tensor x = randn({3, 6}, {.dtype = DType::f64});
  REQUIRE_FALSE(x.requires_grad());
  sum(model(x)).backward();
  REQUIRE(first->parameter("weight").grad().defined());
  std::vector<double> w_ckpt = first->parameter("weight").grad().to_vector<double>();
  std::vector<double> b_ckpt = first->parameter("bias").grad().to_vector<double>();
  model.zero_grad();

  Sequential plain_model{first, second};
  sum(plain_model(x)).backward();
  CHECK(first->parameter("weight").grad().to_vector<double>() == w_ckpt);
  CHECK(first->parameter("bias").grad().to_vector<double>() == b_ckpt);

  // Under NoGradGuard (evaluation) the wrapper records nothing.
  NoGradGuard no_grad;
  CHECK_FALSE(model(x).requires_grad());
}

TEST_CASE("backward may be called from inside a running backward and its callbacks run at the outer end",
          "[nn][checkpoint][autograd]") {
  std::vector<std::string> order;
  Tensor a = from_vector<double>({2.0}, {1});
  a.requires_grad_();
  Tensor b = from_vector<double>({3.0}, {1});
  b.requires_grad_();
  Tensor y = a * Scalar(1.0);
  y.register_hook([&](const Tensor& g) {
    // A nested backward: d(b * b)/db = 6 (hooks run with grad mode off, as formulas do).
    Tensor z;
    {
      autograd::EnableGradGuard grad_mode;
      z = b * b;
    }
    autograd::backward({z}, {});
    order.push_back("nested done");
    autograd::queue_callback([&] { order.push_back("callback"); });
    CHECK(autograd::in_backward());
    return g;
  });
  y.backward();
  order.push_back("outer done");
  CHECK(b.grad().item() == 6.0);
  CHECK(a.grad().item() == 1.0);
  CHECK(order == std::vector<std::string>{"nested done", "callback", "outer done"});
  CHECK_FALSE(autograd::in_backward());
}

TEST_CASE("checkpointing 4 transformer blocks keeps only their inputs as activations", "[nn][checkpoint][memory]") {
  const Device cpu = Device::cpu();
  auto activation_bytes = [&] { return memory_stats(cpu)[MemoryTag::activation].current_bytes; };
  TransformerConfig config{.vocab_size = 32, .dim = 32, .n_layers = 4, .n_heads = 4, .ffn_hidden = 64,
                           .max_seq_len = 16, .dropout = 0.1, .dtype = DType::f32};
  const int64_t batch = 2, seq = 16;
  manual_seed(9);
  Transformer plain(config);
  manual_seed(9);
  Transformer checkpointed(config);
  REQUIRE(apply_activation_checkpointing(checkpointed, is_block) == 4);
  Tensor tokens = from_vector<int64_t>(std::vector<int64_t>(batch * seq, 3), {batch, seq});
  std::vector<int64_t> target_ids;
  for (int64_t i = 0; i < batch * seq; ++i) target_ids.push_back(i % config.vocab_size);
  Tensor targets = from_vector<int64_t>(target_ids, {batch * seq});

  // What one block's graph keeps besides its input and output: the activations
  // checkpointing frees. Measured on a lone block with an input needing grad.
  int64_t block_internal = 0;
  {
    MemoryTagGuard tag(MemoryTag::activation);
    TransformerBlock block(config);
    Tensor x = randn({batch, seq, config.dim});
    x.requires_grad_();
    const int64_t before = activation_bytes();
    Tensor out = block(x);
    block_internal = activation_bytes() - before - out.numel() * 4;
  }
  REQUIRE(block_internal > 0);

  struct Measured {
    int64_t after_forward;
    int64_t peak;
  };
  auto measure = [&](Transformer& model) {
    model.zero_grad();
    MemoryTagGuard tag(MemoryTag::activation);
    manual_seed(21);
    const int64_t before = activation_bytes();
    reset_peak_memory_stats(cpu);
    Tensor logits = model(tokens);
    Measured m{activation_bytes() - before, 0};
    cross_entropy(logits.reshape({-1, config.vocab_size}), targets).backward();
    m.peak = memory_stats(cpu)[MemoryTag::activation].peak_bytes - before;
    return m;
  };
  const Measured without = measure(plain);
  const Measured with = measure(checkpointed);
  INFO("one block keeps " << block_internal << " bytes; after forward: " << without.after_forward << " without, "
                          << with.after_forward << " with checkpointing; peaks " << without.peak << " and "
                          << with.peak);
  // After forward, the plain model holds every block's internal activations; the
  // checkpointed one only the block inputs (which the plain one keeps too).
  CHECK(without.after_forward - with.after_forward == config.n_layers * block_internal);
  // The peak during forward and backward: the plain model's comes with all blocks'
  // activations alive; the checkpointed one holds at most one recomputed block at a
  // time (its internal activations and its recomputed output) on top of what the
  // plain backward needs, so it saves the other blocks' worth (less one output).
  const int64_t block_output = batch * seq * config.dim * 4;
  CHECK(without.peak - with.peak >= (config.n_layers - 1) * block_internal - block_output);
  CHECK(with.peak < without.peak / 2);
  // And the gradients still agree (dropout replayed).
  for (auto& [name, p] : plain.named_parameters()) {
    INFO(name);
    bool found = false;
    for (auto& [n, q] : checkpointed.named_parameters()) {
      if (n != name) continue;
      found = true;
      CHECK(q->grad().to_vector<float>() == p->grad().to_vector<float>());
    }
    CHECK(found);
  }
}

namespace {

// (x, y) -> (tanh(lin(x)) * y, sum of y squared): two inputs, two outputs.
struct GateAndNorm : Module {
  std::shared_ptr<Linear> lin = register_module("lin", std::make_shared<Linear>(4, 4, LinearOptions{.dtype = DType::f64}));
  std::string type_name() const override { return "GateAndNorm"; }
  Tensors forward_multi(const Tensors& in) override {
    return {mul(tanh((*lin)(in.at(0))), in.at(1)), sum(square(in.at(1)))};
  }
};

// The inputs' and parameters' gradients after a backward of sum(out0) + 3 out1.
std::vector<std::vector<double>> two_input_grads(Module& m, bool y_requires_grad) {
  manual_seed(5);
  Tensor x = randn({3, 4}, {.dtype = DType::f64}).requires_grad_();
  Tensor y = randn({3, 4}, {.dtype = DType::f64});
  if (y_requires_grad) y.requires_grad_();
  Tensors out = m(x, y);
  add(sum(out.at(0)), mul(out.at(1), Scalar(3.0))).backward();
  std::vector<std::vector<double>> grads{x.grad().to_vector<double>()};
  if (y_requires_grad) grads.push_back(y.grad().to_vector<double>());
  for (auto& p : m.parameters()) grads.push_back(p->grad().to_vector<double>());
  return grads;
}

}  // namespace

TEST_CASE("a checkpointed module with two inputs and two outputs gives the plain module's gradients",
          "[nn][checkpoint]") {
  for (bool y_requires_grad : {true, false}) {
    INFO("y requires grad: " << y_requires_grad);
    manual_seed(2);
    GateAndNorm plain;
    manual_seed(2);
    CheckpointWrapper wrapped(std::make_shared<GateAndNorm>());
    const auto want = two_input_grads(plain, y_requires_grad);
    CHECK(two_input_grads(wrapped, y_requires_grad) == want);
  }
}
