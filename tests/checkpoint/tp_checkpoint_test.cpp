// Checkpoints across parallel layouts at world sizes 1-4: a tensor-parallel
// model (dtr/nn/tensor_parallel/transformer_plan.h, with its vocabulary-parallel
// embedding) trained 2 steps and saved with its AdamW state loads into the same
// model under fully_shard and into a model with no sharding at all, and each
// continues with the losses of the tensor-parallel run; an FSDP checkpoint loads
// into the tensor-parallel model the same way; and a checkpoint of FSDP over
// tensor parallelism on a (dp, tp) mesh (2x2 at 4 ranks) loads under FSDP alone,
// unsharded, under tensor parallelism alone and on the mesh again; its full state
// dict is the unsharded model's, and loads back from rank 0; so do its Hugging
// Face export and its safetensors file, both ways. f64, so the losses agree to
// 1e-12.
#include "dtr/checkpoint/full_state_dict.h"
#include "dtr/checkpoint/hf_weights.h"
#include "dtr/checkpoint/model_checkpoint.h"
#include "dtr/checkpoint/safetensors.h"
#include "dtr/fsdp/fully_shard.h"
#include "dtr/mesh/device_mesh.h"
#include "dtr/mesh/distributed.h"
#include "dtr/nn/optim/adamw.h"
#include "dtr/nn/tensor_parallel/transformer_plan.h"
#include "dtr/nn/transformer.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/nn.h"
#include "dtr/tensor/random.h"

#include "tests/support/mpi_test_util.h"
#include "tests/support/parameter_check.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <utility>

using namespace dtr;
namespace ckpt = dtr::checkpoint;
namespace fs = std::filesystem;
namespace tp = dtr::nn::tensor_parallel;

namespace {

enum class Layout { tensor_parallel, fsdp, plain, fsdp_over_tp };

// (dp, tp) for fsdp_over_tp: tp 2 where the world divides, else the whole world.
std::vector<int64_t> two_d_shape() {
  const int64_t n = distributed::world_size(), t = n % 2 == 0 ? 2 : n;
  return {n / t, t};
}

// 12 heads: whole heads at 1-4 ranks; the seed gives each model other values, which a load replaces.
std::shared_ptr<nn::Transformer> layout_model(Layout layout, uint64_t seed) {
  manual_seed(seed);
  auto model = std::make_shared<nn::Transformer>(nn::TransformerConfig{
      .vocab_size = 30, .dim = 24, .n_layers = 2, .n_heads = 12, .n_kv_heads = 6 % distributed::world_size() == 0 ? 6 : 12,
      .ffn_hidden = 36, .max_seq_len = 8, .dtype = DType::f64});
  if (layout == Layout::tensor_parallel) {
    tp::parallelize_transformer(*model, mesh::init_device_mesh(DeviceType::cpu, {distributed::world_size()}, {"tp"}),
                                {.vocab_parallel_embedding = true});
  } else if (layout == Layout::fsdp) {
    for (auto& layer : model->layers()) fsdp::fully_shard(*layer);
    fsdp::fully_shard(*model);
  } else if (layout == Layout::fsdp_over_tp) {
    const auto mesh = mesh::init_device_mesh(DeviceType::cpu, two_d_shape(), {"dp", "tp"});
    tp::parallelize_transformer(*model, mesh["tp"], {.vocab_parallel_embedding = true});
    for (auto& layer : model->layers()) fsdp::fully_shard(*layer, {.mesh = mesh["dp"]});
    fsdp::fully_shard(*model, {.mesh = mesh["dp"]});
  }
  return model;
}

// The loss of batch `step`, the same whole batch on every rank (each layout then
// computes the same function), and with an optimizer one AdamW step on it.
double layout_step(nn::Module& model, nn::optim::Optimizer* opt, int step) {
  std::vector<int64_t> ids(2 * 9);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = (static_cast<int64_t>(i) * 11 + step * 7 + 1) % 30;
  const Tensor batch = from_vector(ids, {2, 9});
  Tensor logits = model(batch.narrow(1, 0, 8).contiguous());
  Tensor loss = cross_entropy(logits.reshape({-1, 30}), batch.narrow(1, 1, 8).contiguous().reshape({-1}));
  if (opt) {
    loss.backward();
    opt->step();
    opt->zero_grad();
  }
  return loss.item();
}

// Trains `from` 2 steps, saves it, trains 2 more; every model of `to` loaded from
// the save must repeat those 2 losses.
void check_layout_round_trip(Layout from, const std::vector<Layout>& to, const std::string& name) {
  const fs::path dir = dtr::testing::fresh_shared_dir("ckpt_layout_tests", name) / "ckpt";
  auto model = layout_model(from, 1);
  nn::optim::AdamW opt(model->parameters(), {.lr = 1e-2, .weight_decay = 0.1});
  for (int step = 0; step < 2; ++step) layout_step(*model, &opt, step);
  ckpt::save(dir, *model, opt, {{"step", 2}});
  std::vector<double> want;
  for (int step = 2; step < 4; ++step) want.push_back(layout_step(*model, &opt, step));
  for (const Layout layout : to) {
    INFO("loaded into layout " << static_cast<int>(layout));
    auto loaded = layout_model(layout, 2);
    // The checkpoint's lr replaces 1e-3; the other hyperparameters are the constructor's.
    nn::optim::AdamW loaded_opt(loaded->parameters(), {.lr = 1e-3, .weight_decay = 0.1});
    const nlohmann::json extra = ckpt::load(dir, *loaded, loaded_opt);
    REQUIRE(extra.at("step").get<int>() == 2);
    for (int step = 2; step < 4; ++step) {
      const double got = layout_step(*loaded, &loaded_opt, step);
      INFO("step " << step << ": " << got << " after the load, " << want[step - 2] << " continuing");
      CHECK(std::abs(got - want[step - 2]) <= 1e-12 * std::abs(want[step - 2]));
    }
  }
}

// The 2-D model and the unsharded one, each trained 2 steps from the same values.
std::pair<std::shared_ptr<nn::Transformer>, std::shared_ptr<nn::Transformer>> trained_2d_and_plain() {
  auto model = layout_model(Layout::fsdp_over_tp, 1), plain = layout_model(Layout::plain, 1);
  nn::optim::AdamW opt(model->parameters(), {.lr = 1e-2, .weight_decay = 0.1});
  nn::optim::AdamW plain_opt(plain->parameters(), {.lr = 1e-2, .weight_decay = 0.1});
  for (int step = 0; step < 2; ++step) {
    layout_step(*model, &opt, step);
    layout_step(*plain, &plain_opt, step);
  }
  return {model, plain};
}

}  // namespace

TEST_CASE("a tensor-parallel checkpoint loads under FSDP and unsharded", "[checkpoint][tensor_parallel]") {
  check_layout_round_trip(Layout::tensor_parallel, {Layout::fsdp, Layout::plain, Layout::tensor_parallel}, "from_tp");
}

TEST_CASE("an FSDP checkpoint loads into the tensor-parallel model", "[checkpoint][tensor_parallel]") {
  check_layout_round_trip(Layout::fsdp, {Layout::tensor_parallel}, "from_fsdp");
}

TEST_CASE("a checkpoint of FSDP over tensor parallelism loads at every other layout", "[checkpoint][tensor_parallel]") {
  check_layout_round_trip(Layout::fsdp_over_tp,
                          {Layout::fsdp, Layout::plain, Layout::tensor_parallel, Layout::fsdp_over_tp}, "from_2d");
  check_layout_round_trip(Layout::fsdp, {Layout::fsdp_over_tp}, "fsdp_to_2d");
}

TEST_CASE("the full state dict of FSDP over tensor parallelism is the unsharded model's", "[checkpoint][tensor_parallel]") {
  auto [model, plain] = trained_2d_and_plain();
  const nn::StateDict full = ckpt::get_model_state_dict(*model, {.full_state_dict = true});
  const nn::StateDict want = ckpt::get_model_state_dict(*plain, {.full_state_dict = true});
  REQUIRE(full.size() == want.size());
  for (const auto& [name, value] : want) {
    INFO("parameter " << name);
    REQUIRE(full.contains(name));
    const auto a = full.at(name).to_vector<double>(), b = value.to_vector<double>();
    REQUIRE(a.size() == b.size());
    double worst = 0;
    for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
    CHECK(worst <= 1e-12);
  }
  // Loaded from rank 0's dict alone into a model of other values: it computes the plain model's loss.
  auto loaded = layout_model(Layout::fsdp_over_tp, 2);
  ckpt::set_model_state_dict(*loaded, distributed::rank() == 0 ? want : nn::StateDict{},
                             {.full_state_dict = true, .broadcast_from_rank0 = true});
  const double got = layout_step(*loaded, nullptr, 2), expected = layout_step(*plain, nullptr, 2);
  CHECK(std::abs(got - expected) <= 1e-12 * std::abs(expected));
}

TEST_CASE("the Hugging Face export and safetensors of FSDP over tensor parallelism are the unsharded model's",
          "[checkpoint][tensor_parallel]") {
  auto [model, plain] = trained_2d_and_plain();
  const fs::path dir = dtr::testing::fresh_shared_dir("ckpt_layout_tests", "hf_2d");
  ckpt::save_hf_pretrained(*model, dir / "from_2d");
  ckpt::save_safetensors(*model, dir / "from_2d.safetensors");
  ckpt::save_hf_pretrained(*plain, dir / "from_plain");
  ckpt::save_safetensors(*plain, dir / "from_plain.safetensors");
  // The 2-D model's files, loaded into an unsharded model: the plain model's parameters.
  auto from_export = layout_model(Layout::plain, 2), from_file = layout_model(Layout::plain, 2);
  ckpt::load_hf_pretrained(*from_export, dir / "from_2d");
  ckpt::load_safetensors(*from_file, dir / "from_2d.safetensors");
  dtr::testing::require_same_parameters(*from_export, *plain, 1e-12);
  dtr::testing::require_same_parameters(*from_file, *plain, 1e-12);
  // The plain model's files, loaded into the 2-D model: the plain model's loss.
  const double expected = layout_step(*plain, nullptr, 2);
  auto export_2d = layout_model(Layout::fsdp_over_tp, 2), file_2d = layout_model(Layout::fsdp_over_tp, 2);
  ckpt::load_hf_pretrained(*export_2d, dir / "from_plain");
  ckpt::load_safetensors(*file_2d, dir / "from_plain.safetensors");
  for (nn::Module* loaded : {static_cast<nn::Module*>(export_2d.get()), static_cast<nn::Module*>(file_2d.get())}) {
    const double got = layout_step(*loaded, nullptr, 2);
    CHECK(std::abs(got - expected) <= 1e-12 * std::abs(expected));
  }
}
