// Hugging Face checkpoints under fully_shard at world sizes 1-4 (dtr/checkpoint/hf_weights.h):
// a model built on the meta device from a transformers directory's config,
// sharded, materialised and loaded (each rank reading its rows) gives
// transformers' recorded logits; exported from the sharded model, the file is bit
// for bit the one transformers wrote; and training it from there matches training
// the same model loaded in one process.
#include "dtr/checkpoint/hf_config.h"
#include "dtr/checkpoint/hf_weights.h"
#include "dtr/checkpoint/safetensors.h"
#include "dtr/fsdp/fully_shard.h"
#include "dtr/mesh/distributed.h"
#include "dtr/nn/optim/adamw.h"
#include "dtr/nn/transformer.h"
#include "dtr/tensor/autograd/grad_mode.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/nn.h"

#include "tests/support/mpi_test_util.h"
#include "tests/support/hf_fixture.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

using namespace dtr;
namespace ckpt = dtr::checkpoint;
namespace fs = std::filesystem;
using dtr::testing::bytes_of;
using dtr::testing::world;

namespace {

const fs::path kFixtures = DTR_HF_FIXTURES;

std::shared_ptr<nn::Transformer> sharded_from(const fs::path& dir) {
  nn::TransformerConfig config = ckpt::read_hf_config(dir);
  config.device = Device::meta();
  auto model = std::make_shared<nn::Transformer>(config);
  for (auto& block : model->layers()) fsdp::fully_shard(*block);
  fsdp::fully_shard(*model);
  model->to_empty(Device::cpu());
  ckpt::load_hf_pretrained(*model, dir);
  return model;
}

std::shared_ptr<nn::Transformer> plain_from(const fs::path& dir) {
  auto model = std::make_shared<nn::Transformer>(ckpt::read_hf_config(dir));
  ckpt::load_hf_pretrained(*model, dir);
  return model;
}

const char* const kFixtureNames[] = {"gpt2_tied", "llama_gqa", "llama_tied_sharded"};

}  // namespace

TEST_CASE("a sharded model loaded from HF checkpoints gives transformers' logits") {
  for (const char* fixture : kFixtureNames) {
    INFO(fixture);
    auto model = sharded_from(kFixtures / fixture);
    const auto want = testing::recorded_logits(fixture);
    autograd::NoGradGuard no_grad;
    CHECK(testing::relative_logits_error((*model)(want.tokens), want) <= 1e-5);
  }
}

TEST_CASE("a sharded model exports transformers' files bit for bit") {
  for (const char* fixture : kFixtureNames) {
    INFO(fixture);
    auto model = sharded_from(kFixtures / fixture);
    const fs::path out =
        fs::current_path() / "hf_sharded_tests" / fmt::format("{}_np{}", fixture, distributed::world_size());
    ckpt::save_hf_pretrained(*model, out);
    if (distributed::rank() == 0) {
      const fs::path exported = out / "model.safetensors";
      const auto header = ckpt::read_safetensors_header(exported);
      // Every exported tensor is transformers' own, wherever it sits among the fixture's files.
      for (const auto& file : fs::directory_iterator(kFixtures / fixture)) {
        if (file.path().extension() != ".safetensors") continue;
        const auto theirs = ckpt::read_safetensors_header(file.path());
        for (const auto& [name, entry] : theirs.tensors) {
          if (name == "lm_head.weight" && !header.tensors.contains(name)) continue;  // tied
          INFO(name);
          CHECK(header.tensors.contains(name));  // CHECK: the other ranks wait in the barrier below
          if (header.tensors.contains(name)) CHECK(bytes_of(ckpt::read_safetensors_tensor(exported, header, name)) ==
                bytes_of(ckpt::read_safetensors_tensor(file.path(), theirs, name)));
        }
      }
    }
    world()->barrier()->wait();
  }
}

TEST_CASE("fine-tuning a sharded HF model matches fine-tuning it in one process") {
  const fs::path dir = kFixtures / "llama_gqa";
  auto reference = plain_from(dir);
  auto sharded = sharded_from(dir);
  const int n = distributed::world_size(), me = distributed::rank();
  constexpr int64_t kRows = 12, kSeq = 8;  // 12 rows split evenly over 1-4 ranks
  auto batch = [&](int step, int64_t begin, int64_t end) {
    std::vector<int64_t> tokens, targets;
    for (int64_t b = begin; b < end; ++b) {
      for (int64_t t = 0; t < kSeq; ++t) {
        tokens.push_back((b * 5 + t * 3 + step) % 53);
        targets.push_back((b * 5 + t * 3 + step + 1) % 53);
      }
    }
    return std::pair{from_vector(tokens, {end - begin, kSeq}), from_vector(targets, {end - begin, kSeq})};
  };
  auto loss_of = [](nn::Module& model, const std::pair<Tensor, Tensor>& b) {
    Tensor logits = model(b.first);
    return cross_entropy(logits.reshape({-1, logits.size(-1)}), b.second.reshape({-1}));
  };
  nn::optim::AdamW ref_opt(reference->parameters(), {.lr = 1e-2});
  nn::optim::AdamW opt(sharded->parameters(), {.lr = 1e-2});
  const int64_t local = kRows / n;
  for (int step = 0; step < 3; ++step) {
    Tensor ref_loss = loss_of(*reference, batch(step, 0, kRows));
    ref_loss.backward();
    ref_opt.step();
    ref_opt.zero_grad();
    Tensor loss = loss_of(*sharded, batch(step, me * local, (me + 1) * local));
    loss.backward();
    opt.step();
    opt.zero_grad();
    Tensor global = full({1}, loss.item(), {.dtype = DType::f64});
    world()->all_reduce(global, mesh::ReduceOp::avg())->wait();
    INFO("step " << step);
    CHECK(testing::values_of(global)[0] == Approx(ref_loss.item()).epsilon(1e-5));
  }
  // The parameters after the last step, relative to each tensor's scale.
  auto want = reference->named_parameters();
  auto got = sharded->named_parameters();
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO(got[i].first);
    CHECK(testing::error_relative_to_scale(got[i].second.as_dtensor().full_tensor(), want[i].second) <= 3e-5);
  }
}
