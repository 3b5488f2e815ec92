// Modules with several inputs and outputs under fully_shard at world sizes 1-4: a
// model taking (tokens, positions) and returning (logits, aux), whose blocks take
// (hidden, position embedding) and return (hidden, aux), trained under FSDP with
// each rank on its slice of the batch, against the same model trained in one
// process on the whole batch (the reference runs in the same process, without
// FSDP): same losses, same final full parameters; also with the sharded model's
// blocks activation-checkpointed (the reference stays plain).
#include "dtr/fsdp/fully_shard.h"
#include "dtr/mesh/distributed.h"
#include "dtr/nn/activation_checkpoint.h"
#include "dtr/nn/container.h"
#include "dtr/nn/layers.h"
#include "dtr/nn/linear.h"
#include "dtr/nn/optim/adamw.h"
#include "dtr/tensor/ops/elementwise.h"
#include "dtr/tensor/ops/nn.h"
#include "dtr/tensor/ops/reduce.h"
#include "dtr/tensor/random.h"

#include "tests/support/mpi_test_util.h"
#include "tests/support/tiny_transformer.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>

using namespace dtr;
using dtr::testing::kGlobalBatch;
using dtr::testing::kSeq;
using dtr::testing::values_of;

namespace {

constexpr int64_t kVocab = 32;
constexpr int64_t kDim = 16;

// (hidden, position embedding) -> (h + W2 gelu(W1 (h + p)), mean square of that
// new hidden state as an auxiliary loss term).
class MixBlock : public nn::Module {
 public:
  MixBlock()
      : up_(register_module("up", std::make_shared<nn::Linear>(kDim, 2 * kDim))),
        down_(register_module("down", std::make_shared<nn::Linear>(2 * kDim, kDim))) {}
  std::string type_name() const override { return "MixBlock"; }
  nn::Tensors forward_multi(const nn::Tensors& inputs) override {
    const Tensor& h = inputs.at(0);
    const Tensor& p = inputs.at(1);
    Tensor out = add(h, (*down_)(gelu((*up_)(add(h, p)))));
    return {out, mean(square(out))};
  }

 private:
  std::shared_ptr<nn::Linear> up_, down_;
};

// (tokens, positions) -> (logits, the blocks' aux terms summed).
class PositionsModel : public nn::Module {
 public:
  PositionsModel()
      : tokens_(register_module("tokens", std::make_shared<nn::Embedding>(kVocab, kDim))),
        positions_(register_module("positions", std::make_shared<nn::Embedding>(kSeq, kDim))),
        blocks_(register_module("blocks", std::make_shared<nn::ModuleList>())),
        head_(register_module("head", std::make_shared<nn::Linear>(kDim, kVocab))) {
    for (int i = 0; i < 2; ++i) blocks_->push_back(std::make_shared<MixBlock>());
  }
  std::string type_name() const override { return "PositionsModel"; }
  nn::ModuleList& blocks() { return *blocks_; }

  nn::Tensors forward_multi(const nn::Tensors& inputs) override {
    Tensor h = (*tokens_)(inputs.at(0));
    Tensor p = (*positions_)(inputs.at(1));
    Tensor aux;
    for (const nn::ModulePtr& block : *blocks_) {
      auto [next, block_aux] = to_pair((*block)(h, p));
      h = next;
      aux = aux.defined() ? add(aux, block_aux) : block_aux;
    }
    return {(*head_)(h), aux};
  }

 private:
  static std::pair<Tensor, Tensor> to_pair(const nn::Tensors& t) { return {t.at(0), t.at(1)}; }

  std::shared_ptr<nn::Embedding> tokens_, positions_;
  std::shared_ptr<nn::ModuleList> blocks_;
  std::shared_ptr<nn::Linear> head_;
};

std::shared_ptr<PositionsModel> make_positions_model(bool checkpoint_blocks) {
  manual_seed(11);
  auto model = std::make_shared<PositionsModel>();
  if (checkpoint_blocks) {
    nn::apply_activation_checkpointing(
        *model, [](const nn::Module& m) { return dynamic_cast<const MixBlock*>(&m) != nullptr; });
  }
  return model;
}

// Rows [begin, end) of step `step`'s batch: tokens, targets, and positions that
// start at a row-dependent offset (so the position embedding's rows differ by row).
Tensor loss_on_rows(nn::Module& model, int step, int64_t begin, int64_t end) {
  auto [tokens, targets] = testing::token_batch(step, begin, end, kSeq);
  std::vector<int64_t> positions;
  for (int64_t b = begin; b < end; ++b) {
    for (int64_t t = 0; t < kSeq; ++t) positions.push_back((t + b) % kSeq);
  }
  nn::Tensors out = model(tokens, from_vector(positions, {end - begin, kSeq}));
  REQUIRE(out.size() == 2);
  Tensor ce = cross_entropy(out[0].reshape({-1, kVocab}), targets.reshape({-1}));
  return add(ce, mul(out[1], Scalar(0.1)));
}

std::vector<double> train_positions_model(nn::Module& model, int steps, int64_t begin, int64_t end) {
  nn::optim::AdamW opt(model.parameters(), {.lr = 1e-2});
  std::vector<double> losses;
  for (int step = 0; step < steps; ++step) {
    Tensor loss = loss_on_rows(model, step, begin, end);
    loss.backward();
    opt.step();
    opt.zero_grad();
    losses.push_back(loss.item());
  }
  return losses;
}

void require_fsdp_matches_one_process(bool checkpoint_blocks) {
  constexpr int kSteps = 5;
  const int n = distributed::world_size(), me = distributed::rank();
  auto reference = make_positions_model(/*checkpoint_blocks=*/false);
  const std::vector<double> expected_losses = train_positions_model(*reference, kSteps, 0, kGlobalBatch);

  auto sharded = make_positions_model(checkpoint_blocks);
  for (const nn::ModulePtr& block : sharded->blocks()) fsdp::fully_shard(*block);
  fsdp::fully_shard(*sharded);
  const int64_t local = kGlobalBatch / n;
  std::vector<double> local_losses = train_positions_model(*sharded, kSteps, me * local, (me + 1) * local);
  for (int step = 0; step < kSteps; ++step) {
    Tensor global = full({1}, local_losses[step], {.dtype = DType::f64});
    distributed::world_group()->all_reduce(global, mesh::ReduceOp::avg())->wait();
    INFO("step " << step);
    REQUIRE(values_of(global)[0] == Approx(expected_losses[step]).epsilon(1e-5));
  }
  auto expected_params = reference->named_parameters();
  auto params = sharded->named_parameters();
  REQUIRE(params.size() == expected_params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    INFO(params[i].first);
    REQUIRE(params[i].first == expected_params[i].first);
    REQUIRE(params[i].second.is_sharded());
    REQUIRE(testing::error_relative_to_scale(params[i].second.as_dtensor().full_tensor(),
                                             expected_params[i].second) <= 3e-5);
  }
}

}  // namespace

TEST_CASE("FSDP trains a model taking (tokens, positions) and returning (logits, aux) as one process does") {
  require_fsdp_matches_one_process(/*checkpoint_blocks=*/false);
}

TEST_CASE("FSDP with activation-checkpointed two-input blocks matches one process") {
  require_fsdp_matches_one_process(/*checkpoint_blocks=*/true);
}
