// Wrapping policies (dtr/fsdp/wrap_policy.h) at world sizes 1-4: apply_fully_shard
// with a type policy makes exactly the groups, placements and training of the
// manual bottom-up calls; the size policy picks the modules its sizes imply
// (computed here from the Transformer's shapes); combinations select as expected.
#include "dtr/fsdp/fully_shard.h"
#include "dtr/fsdp/wrap_policy.h"
#include "dtr/mesh/distributed.h"
#include "tests/support/mpi_test_util.h"
#include "dtr/nn/optim/adamw.h"
#include "dtr/nn/transformer.h"
#include "dtr/tensor/ops/nn.h"

#include "tests/support/tiny_transformer.h"

#include <catch2/catch.hpp>

using namespace dtr;
using dtr::testing::values_of;

namespace {

std::vector<std::string> paths_of(const std::vector<std::pair<std::string, nn::Module*>>& selected) {
  std::vector<std::string> out;
  for (auto& [path, m] : selected) out.push_back(path);
  return out;
}

std::vector<std::string> sharded_paths(nn::Module& model) {
  std::vector<std::string> out;
  for (auto& [path, m] : model.named_modules()) {
    if (fsdp::is_fully_sharded(*m)) out.push_back(path);
  }
  return out;
}

std::vector<double> train(nn::Transformer& model, int steps) {
  nn::optim::AdamW opt(model.parameters(), {.lr = 1e-2});
  const int64_t n = distributed::world_size(), me = distributed::rank(), global = 4, local = global / n;
  std::vector<double> losses;
  for (int step = 0; step < steps; ++step) {
    std::vector<int64_t> tokens;
    for (int64_t i = 0; i < global * 8; ++i) tokens.push_back((i * 7 + step * 3) % 32);
    Tensor all = from_vector(tokens, {global, 8});
    Tensor mine = all.narrow(0, me * local, local);  // 3 ranks: one row each, the last row unused
    Tensor loss = cross_entropy(model(mine).reshape({-1, 32}), mine.reshape({-1}));
    loss.backward();
    opt.step();
    opt.zero_grad();
    losses.push_back(loss.item());
  }
  return losses;
}

}  // namespace

TEST_CASE("apply_fully_shard with a TransformerBlock policy equals the manual bottom-up calls") {
  manual_seed(21);
  auto manual = std::make_shared<nn::Transformer>(testing::tiny_config(DType::f64));
  manual_seed(21);
  auto applied = std::make_shared<nn::Transformer>(testing::tiny_config(DType::f64));

  for (auto& layer : manual->layers()) fsdp::fully_shard(*layer);
  fsdp::fully_shard(*manual);
  auto handles = fsdp::apply_fully_shard(*applied, fsdp::module_type_policy<nn::TransformerBlock>());

  REQUIRE(handles.size() == 3);
  REQUIRE(&handles.back().module() == applied.get());
  REQUIRE(sharded_paths(*applied) == std::vector<std::string>{"", "layers.0", "layers.1"});
  REQUIRE(sharded_paths(*applied) == sharded_paths(*manual));
  for (const std::string& path : sharded_paths(*manual)) {
    INFO(path);
    nn::Module* m = nullptr;
    nn::Module* a = nullptr;
    for (auto& [p, mod] : manual->named_modules()) if (p == path) m = mod;
    for (auto& [p, mod] : applied->named_modules()) if (p == path) a = mod;
    auto mp = fsdp::fsdp_module(*m).sharded_parameters(), ap = fsdp::fsdp_module(*a).sharded_parameters();
    REQUIRE(fsdp::fsdp_module(*m).shard_numel_padded() == fsdp::fsdp_module(*a).shard_numel_padded());
    REQUIRE(mp.size() == ap.size());
    for (size_t i = 0; i < mp.size(); ++i) {
      REQUIRE(mp[i].first == ap[i].first);
      REQUIRE(mp[i].second.spec().placements == ap[i].second.spec().placements);
      REQUIRE(mp[i].second.shape() == ap[i].second.shape());
      REQUIRE(values_of(mp[i].second.to_local()) == values_of(ap[i].second.to_local()));
    }
  }
  const auto expected = train(*manual, 3), got = train(*applied, 3);
  for (size_t i = 0; i < expected.size(); ++i) REQUIRE(got[i] == expected[i]);  // bit for bit
}

TEST_CASE("size_based_policy picks modules by their unclaimed parameter counts, bottom-up") {
  // Per block: 4 attention projections of 16x16 = 1024 in Attention; up and gate
  // 64x16 and down 16x64, 1024 each = 3072 in FeedForward; two norms of 16.
  auto model = std::make_shared<nn::Transformer>(testing::tiny_config());
  // 1000: every FeedForward Linear (1024) and every Attention (its Linears of
  // 256 are below, the four together reach 1024); nothing above them is left
  // with 1000 unclaimed.
  REQUIRE(paths_of(fsdp::select_modules(*model, fsdp::size_based_policy(1000))) ==
          std::vector<std::string>{"layers.0.attn", "layers.0.ffn.up", "layers.0.ffn.gate", "layers.0.ffn.down",
                                   "layers.1.attn", "layers.1.ffn.up", "layers.1.ffn.gate", "layers.1.ffn.down"});
  // 2000: FeedForward (3072); a block keeps 1024 + 32 = 1056 < 2000, the list of
  // two blocks 2112 (but ModuleList is excluded by default: it is never called).
  REQUIRE(paths_of(fsdp::select_modules(*model, fsdp::size_based_policy(2000))) ==
          std::vector<std::string>{"layers.0.ffn", "layers.1.ffn"});
  REQUIRE(paths_of(fsdp::select_modules(*model, fsdp::size_based_policy(2000, {}))) ==
          std::vector<std::string>{"layers.0.ffn", "layers.1.ffn", "layers"});
  // 4000: a whole block (4128) and nothing inside it.
  REQUIRE(paths_of(fsdp::select_modules(*model, fsdp::size_based_policy(4000))) ==
          std::vector<std::string>{"layers.0", "layers.1"});

  auto handles = fsdp::apply_fully_shard(*model, fsdp::size_based_policy(1000));
  REQUIRE(handles.size() == 9);
  auto global_numel = [](const fsdp::FSDPModule& h) {
    int64_t n = 0;
    for (auto& [name, d] : h.sharded_parameters()) n += d.numel();
    return n;
  };
  REQUIRE(global_numel(handles[0]) == 1024);  // layers.0.attn
  REQUIRE(global_numel(handles[1]) == 1024);  // layers.0.ffn.up
  // The root keeps the embedding (32x16), the output head (32x16), 4 block norms and the final norm.
  REQUIRE(global_numel(handles.back()) == 512 + 512 + 5 * 16);
  const auto losses = train(*model, 2);
  REQUIRE(std::isfinite(losses.back()));
  REQUIRE(losses.back() < losses.front());
}

TEST_CASE("type-name, predicate, any_of and all_of policies select as their parts say") {
  auto model = std::make_shared<nn::Transformer>(testing::tiny_config());
  REQUIRE(paths_of(fsdp::select_modules(*model, fsdp::module_type_policy({"TransformerBlock"}))) ==
          std::vector<std::string>{"layers.0", "layers.1"});
  REQUIRE(paths_of(fsdp::select_modules(*model, fsdp::module_type_policy<nn::Attention>())) ==
          std::vector<std::string>{"layers.0.attn", "layers.1.attn"});
  auto is_output = fsdp::predicate_policy([](const nn::Module& m) {
    return m.type_name() == "Linear" && m.parameters().front()->size(0) == 32;  // the 32-row output head
  });
  REQUIRE(paths_of(fsdp::select_modules(*model, is_output)) == std::vector<std::string>{"output"});
  // any_of: blocks or the output head; inside a selected block nothing else is asked for.
  REQUIRE(paths_of(fsdp::select_modules(
              *model, fsdp::any_of({fsdp::module_type_policy<nn::TransformerBlock>(), is_output}))) ==
          std::vector<std::string>{"layers.0", "layers.1", "output"});
  // all_of: Linears with at least 1024 parameters: the FeedForward ones only.
  REQUIRE(paths_of(fsdp::select_modules(
              *model, fsdp::all_of({fsdp::module_type_policy({"Linear"}), fsdp::size_based_policy(1000)}))) ==
          std::vector<std::string>{"layers.0.ffn.up", "layers.0.ffn.gate", "layers.0.ffn.down", "layers.1.ffn.up",
                                   "layers.1.ffn.gate", "layers.1.ffn.down"});
  // Modules already sharded are not selected again; their parameters count as claimed.
  fsdp::fully_shard(*model->layers().named_children().front().second);
  REQUIRE(paths_of(fsdp::select_modules(*model, fsdp::size_based_policy(4000))) ==
          std::vector<std::string>{"layers.1"});
  auto handles = fsdp::apply_fully_shard(*model, fsdp::module_type_policy<nn::TransformerBlock>());
  REQUIRE(handles.size() == 2);  // layers.1 and the root
  REQUIRE(sharded_paths(*model) == std::vector<std::string>{"", "layers.0", "layers.1"});
}
