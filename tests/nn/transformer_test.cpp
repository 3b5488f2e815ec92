// The transformer models: the GPT-2 124M shape's parameter count against the
// published figure, causality, and gradients against finite differences.
#include "dtr/nn/optim/adamw.h"
#include "dtr/nn/transformer.h"
#include "dtr/tensor/allocator.h"
#include "dtr/tensor/autograd/grad_mode.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/nn.h"
#include "dtr/tensor/ops/reduce.h"
#include "dtr/tensor/random.h"
#include "tests/support/tiny_transformer.h"

#include <catch2/catch.hpp>

#include <cmath>

using namespace dtr;
using namespace dtr::nn;
using dtr::testing::tokens_of;

namespace {

TransformerConfig tiny(TransformerStyle style) {
  return {.style = style, .vocab_size = 11, .dim = 8, .n_layers = 2, .n_heads = 4,
          .n_kv_heads = style == TransformerStyle::llama ? 2 : 0, .ffn_hidden = 12, .max_seq_len = 8,
          .dtype = DType::f64};
}

// [rows, cols] token ids drawn uniformly from [0, vocab).
Tensor randint_like_tokens(int64_t rows, int64_t cols, int64_t vocab) {
  std::vector<float> u = rand({rows, cols}).to_vector<float>();
  std::vector<int64_t> ids;
  for (float x : u) ids.push_back(std::min<int64_t>(vocab - 1, static_cast<int64_t>(x * vocab)));
  return from_vector<int64_t>(ids, {rows, cols});
}

// The loss's value: a double for the finite differences.
double loss_value_of(Transformer& model, const Tensor& tokens, const Tensor& targets) {
  Tensor logits = model(tokens);
  return cross_entropy(logits.reshape({-1, model.config().vocab_size}), targets.reshape({-1})).item();
}

}  // namespace

TEST_CASE("the GPT-2 124M shape has 124,439,808 parameters and builds on meta without memory", "[nn][transformer]") {
  TransformerConfig config = TransformerConfig::gpt2_124m();
  config.device = Device::meta();
  const int64_t allocations = memory_stats(Device::cpu()).total.num_allocations;
  Transformer model(config);
  // wte 50257x768 + wpe 1024x768 + 12 blocks x 7,087,872 + final LayerNorm 1536 (tied head).
  CHECK(model.num_parameters() == 124439808);
  CHECK(memory_stats(Device::cpu()).total.num_allocations == allocations);
}

TEST_CASE("logits at position t do not depend on later tokens", "[nn][transformer]") {
  for (TransformerStyle style : {TransformerStyle::llama, TransformerStyle::gpt2}) {
    manual_seed(3);
    Transformer model(tiny(style));
    NoGradGuard no_grad;
    Tensor a = model(tokens_of({1, 2, 3, 4, 5, 6}, 1, 6));
    Tensor b = model(tokens_of({1, 2, 3, 9, 9, 9}, 1, 6));
    REQUIRE(a.sizes() == Shape{1, 6, 11});
    CHECK(a.narrow(1, 0, 3).to_vector<double>() == b.narrow(1, 0, 3).to_vector<double>());
    CHECK(a.narrow(1, 3, 1).to_vector<double>() != b.narrow(1, 3, 1).to_vector<double>());
  }
}

TEST_CASE("transformer gradients match central differences on every parameter tensor", "[nn][transformer]") {
  for (TransformerStyle style : {TransformerStyle::llama, TransformerStyle::gpt2}) {
    for (bool tied : {false, true}) {
      manual_seed(5);
      TransformerConfig config = tiny(style);
      config.tie_weights = tied;
      Transformer model(config);
      Tensor tokens = tokens_of({1, 5, 2, 7, 3, 0, 4, 4, 9, 10}, 2, 5);
      Tensor targets = tokens_of({5, 2, 7, 3, 1, 4, 4, 9, 10, 6}, 2, 5);
      Tensor logits = model(tokens);
      cross_entropy(logits.reshape({-1, 11}), targets.reshape({-1})).backward();
      for (auto& [name, p] : model.named_parameters()) {
        INFO((style == TransformerStyle::llama ? "llama " : "gpt2 ") << (tied ? "tied " : "") << name);
        REQUIRE(p->grad().defined());
        std::vector<double> analytic = p->grad().contiguous().to_vector<double>();
        double* data = p->data<double>();
        // A few elements of each parameter tensor, spread over it.
        for (int64_t j = 0; j < p->numel(); j += std::max<int64_t>(1, p->numel() / 3)) {
          const double eps = 1e-6, saved = data[j];
          double plus, minus;
          {
            NoGradGuard no_grad;
            data[j] = saved + eps;
            plus = loss_value_of(model, tokens, targets);
            data[j] = saved - eps;
            minus = loss_value_of(model, tokens, targets);
            data[j] = saved;
          }
          const double numeric = (plus - minus) / (2 * eps);
          CHECK(std::abs(analytic[j] - numeric) <= 1e-7 + 1e-5 * std::abs(numeric));
        }
      }
    }
  }
}

TEST_CASE("bad transformer configs and inputs are clear errors", "[nn][transformer]") {
  TransformerConfig c = tiny(TransformerStyle::llama);
  c.n_kv_heads = 3;
  CHECK_THROWS_WITH(Transformer(c), Catch::Contains("n_heads 4 is not a multiple of n_kv_heads 3"));
  c = tiny(TransformerStyle::gpt2);
  c.dim = 10;
  CHECK_THROWS_WITH(Transformer(c), Catch::Contains("dim 10 is not a multiple of n_heads 4"));
  Transformer model(tiny(TransformerStyle::llama));
  CHECK_THROWS_WITH(model(zeros({1, 4})), Catch::Contains("expected i64 token ids [B, T], got f32 [1, 4]"));
  CHECK_THROWS_WITH(model(zeros({1, 9}, {.dtype = DType::i64})), Catch::Contains("sequence length 9 exceeds max_seq_len 8"));
}

namespace {

// Trains a 2-layer tiny transformer with AdamW on one fixed batch; returns the losses.
std::vector<double> overfit_tiny_transformer() {
  manual_seed(11);
  TransformerConfig config{.vocab_size = 32, .dim = 32, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2,
                           .max_seq_len = 16};
  Transformer model(config);
  Tensor batch = randint_like_tokens(4, 17, config.vocab_size);
  Tensor inputs = batch.narrow(1, 0, 16).contiguous(), targets = batch.narrow(1, 1, 16).contiguous();
  optim::AdamW opt(model.parameters(), {.lr = 1e-2, .weight_decay = 0.0});
  std::vector<double> losses;
  for (int step = 0; step < 150; ++step) {
    Tensor loss = cross_entropy(model(inputs).reshape({-1, config.vocab_size}), targets.reshape({-1}));
    losses.push_back(loss.item());
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
  return losses;
}

}  // namespace

TEST_CASE("a tiny transformer overfits a fixed batch with AdamW, the same every run", "[nn][transformer][training]") {
  std::vector<double> losses = overfit_tiny_transformer();
  INFO("first loss " << losses.front() << ", last loss " << losses.back());
  CHECK(losses.front() > 3.0);  // about log(32) at initialisation
  CHECK(losses.back() < 0.05);
  CHECK(overfit_tiny_transformer() == losses);
}
