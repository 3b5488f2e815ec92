// nn::init on parameters sharded by fully_shard, at 1-4 ranks: a model built on
// meta, fully_shard (an f64 child, then the f32 root), to_empty(cpu), then every
// parameter filled by one nn::init function, under grad mode (no NoGradGuard). On
// each rank, each shard must hold exactly, bit for bit, its rows of the same fill
// of the same model built unsharded in this process. The shards have other shapes
// than the global parameters (uneven rows, a 4-D weight, a shard of no rows at 4
// ranks), so a fan computed from the local shape, or a fill at the wrong slice,
// gives other values. A sharded 1-D parameter is refused by its global shape.
#include "dtr/fsdp/fully_shard.h"
#include "dtr/mesh/distributed.h"
#include "dtr/nn/init.h"
#include "dtr/nn/module.h"
#include "dtr/tensor/autograd/grad_mode.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/random.h"

#include "tests/support/mpi_test_util.h"

#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

using namespace dtr;

namespace {

enum class InitFill {
  zeros,
  ones,
  constant,
  uniform,
  normal,
  trunc_normal,
  xavier_uniform,
  xavier_normal,
  kaiming_uniform,
  kaiming_uniform_fan_out,
  kaiming_normal,
  kaiming_normal_fan_out,
};

const char* init_fill_name(InitFill f) {
  switch (f) {
    case InitFill::zeros: return "zeros_";
    case InitFill::ones: return "ones_";
    case InitFill::constant: return "constant_";
    case InitFill::uniform: return "uniform_";
    case InitFill::normal: return "normal_";
    case InitFill::trunc_normal: return "trunc_normal_";
    case InitFill::xavier_uniform: return "xavier_uniform_";
    case InitFill::xavier_normal: return "xavier_normal_";
    case InitFill::kaiming_uniform: return "kaiming_uniform_";
    case InitFill::kaiming_uniform_fan_out: return "kaiming_uniform_ (fan_out, relu)";
    case InitFill::kaiming_normal: return "kaiming_normal_";
    case InitFill::kaiming_normal_fan_out: return "kaiming_normal_ (fan_out, tanh)";
  }
  return "?";
}

// Whether the fill needs fans (2 or more dims).
bool needs_fans(InitFill f) {
  return f != InitFill::zeros && f != InitFill::ones && f != InitFill::constant && f != InitFill::uniform &&
         f != InitFill::normal && f != InitFill::trunc_normal;
}

// Fills `p` with `fill` (`gen`: null for the default generator). A parameter of 1
// dim, which the fills needing fans refuse, gets zeros_ instead (a bias's usual init).
void apply_init_fill(const nn::Parameter& p, InitFill fill, Generator* gen) {
  using nn::init::FanMode;
  using nn::init::Nonlinearity;
  if (p.global_shape().size() < 2 && needs_fans(fill)) fill = InitFill::zeros;
  switch (fill) {
    case InitFill::zeros: nn::init::zeros_(p); break;
    case InitFill::ones: nn::init::ones_(p); break;
    case InitFill::constant: nn::init::constant_(p, -0.375); break;
    case InitFill::uniform: nn::init::uniform_(p, -0.3, 0.7, gen); break;
    case InitFill::normal: nn::init::normal_(p, 0.1, 0.02, gen); break;
    case InitFill::trunc_normal: nn::init::trunc_normal_(p, 0.0, 1.0, -1.5, 2.0, gen); break;
    case InitFill::xavier_uniform: nn::init::xavier_uniform_(p, 1.5, gen); break;
    case InitFill::xavier_normal: nn::init::xavier_normal_(p, 1.0, gen); break;
    case InitFill::kaiming_uniform:  // nn.Linear's a = sqrt(5)
      nn::init::kaiming_uniform_(p, std::sqrt(5.0), FanMode::fan_in, Nonlinearity::leaky_relu, gen);
      break;
    case InitFill::kaiming_uniform_fan_out:
      nn::init::kaiming_uniform_(p, 0.0, FanMode::fan_out, Nonlinearity::relu, gen);
      break;
    case InitFill::kaiming_normal:
      nn::init::kaiming_normal_(p, 0.0, FanMode::fan_in, Nonlinearity::leaky_relu, gen);
      break;
    case InitFill::kaiming_normal_fan_out:
      nn::init::kaiming_normal_(p, 0.0, FanMode::fan_out, Nonlinearity::tanh, gen);
      break;
  }
}

// A module of parameters only, registered by InitShardModel.
class InitShardLayer : public nn::Module {
 public:
  std::string type_name() const override { return "InitShardLayer"; }
  using nn::Module::register_module;
  using nn::Module::register_parameter;
};

// f32 weights of several shapes and a bias in the root, and a child with an f64
// weight (a group of its own: one group all-gathers in one dtype), on `device`.
struct InitShardModel {
  std::shared_ptr<InitShardLayer> root = std::make_shared<InitShardLayer>();
  std::shared_ptr<InitShardLayer> f64_child = std::make_shared<InitShardLayer>();

  explicit InitShardModel(Device device) {
    const TensorOptions f32{.dtype = DType::f32, .device = device};
    root->register_parameter("rows7", empty({7, 5}, f32));       // uneven rows at 2-4 ranks
    root->register_parameter("conv", empty({6, 3, 3, 3}, f32));  // receptive field 9
    root->register_parameter("rows3", empty({3, 4}, f32));       // no rows on rank 3 of 4
    root->register_parameter("bias", empty({7}, f32));
    f64_child->register_parameter("weight", empty({9, 2, 4}, {.dtype = DType::f64, .device = device}));
    root->register_module("f64", f64_child);
  }
  // fully_shard bottom-up, then real memory on the cpu.
  void shard_and_materialise() {
    fsdp::fully_shard(*f64_child);
    fsdp::fully_shard(*root);
    root->to_empty(Device::cpu());
  }
  // Every parameter, in named_parameters() order, filled with `fill`, under grad
  // mode (no NoGradGuard, unlike reset_parameters()).
  void fill_every_parameter(InitFill fill, Generator* gen) {
    REQUIRE(autograd::is_grad_enabled());
    for (const auto& [name, p] : root->named_parameters()) apply_init_fill(p, fill, gen);
  }
};

const std::vector<InitFill> kEveryInitFill = {
    InitFill::zeros,          InitFill::ones,          InitFill::constant,
    InitFill::uniform,        InitFill::normal,        InitFill::trunc_normal,
    InitFill::xavier_uniform, InitFill::xavier_normal, InitFill::kaiming_uniform,
    InitFill::kaiming_uniform_fan_out, InitFill::kaiming_normal, InitFill::kaiming_normal_fan_out};

// On this rank, every shard of `sharded` equals bit for bit its rows of the
// matching parameter of `reference` (unsharded), and its fans are the global
// parameter's. Fails naming the rank, parameter, index and both values.
void require_shards_are_rows_of(nn::Module& sharded, nn::Module& reference) {
  const auto got = sharded.named_parameters();
  const auto want = reference.named_parameters();
  REQUIRE(got.size() == want.size());
  const int rank = distributed::rank();
  for (size_t i = 0; i < got.size(); ++i) {
    const auto& [name, shard] = got[i];
    const nn::Parameter& whole = want[i].second;
    INFO("rank " << rank << " of " << distributed::world_size() << ", parameter " << name);
    REQUIRE(name == want[i].first);
    REQUIRE(shard.is_sharded());
    REQUIRE(shard.data().device().is_cpu());
    CHECK(shard.data().requires_grad());
    REQUIRE(shard.global_shape() == whole.data().sizes());
    const LogicalSlice slice = shard.logical_slice();
    const int64_t first_row = slice.is_whole() ? 0 : slice.offset.at(0);
    const int64_t rows = shard.data().size(0);
    const Tensor expected = whole.data().narrow(0, first_row, rows);
    if (whole.data().dim() >= 2) {
      const auto local = nn::init::calculate_fan_in_and_fan_out(shard);
      const auto global = nn::init::calculate_fan_in_and_fan_out(whole);
      CHECK(local.fan_in == global.fan_in);
      CHECK(local.fan_out == global.fan_out);
    }
    if (dtr::testing::bytes_of(shard.data()) == dtr::testing::bytes_of(expected)) continue;
    const auto g = dtr::testing::values_of(shard.data());
    const auto e = dtr::testing::values_of(expected);
    REQUIRE(g.size() == e.size());
    for (size_t j = 0; j < g.size(); ++j) {
      INFO("rows from " << first_row << ", local index " << j << ": expected " << e[j] << ", got " << g[j]);
      REQUIRE(std::bit_cast<uint64_t>(g[j]) == std::bit_cast<uint64_t>(e[j]));
    }
    FAIL("the shard's bytes differ from the reference rows' though every value is equal");
  }
}

}  // namespace

TEST_CASE("nn::init on a fully_shard-ed meta model fills each shard with exactly the unsharded rows",
          "[fsdp][init]") {
  for (InitFill fill : kEveryInitFill) {
    INFO(init_fill_name(fill));
    Generator reference_gen(1234), gen(1234);
    InitShardModel reference(Device::cpu());
    reference.fill_every_parameter(fill, &reference_gen);

    InitShardModel model(Device::meta());
    model.shard_and_materialise();
    if (distributed::world_size() > 1) REQUIRE(model.root->parameter_handle("rows7").data().size(0) < 7);
    model.fill_every_parameter(fill, &gen);

    require_shards_are_rows_of(*model.root, *reference.root);
    CHECK(gen.offset() == reference_gen.offset());  // every rank drew for the whole parameters
  }
}

TEST_CASE("nn::init with the default generator: shards equal the unsharded fill after the same manual_seed",
          "[fsdp][init]") {
  for (InitFill fill : {InitFill::xavier_normal, InitFill::kaiming_uniform_fan_out}) {
    INFO(init_fill_name(fill));
    manual_seed(77);
    InitShardModel reference(Device::cpu());
    reference.fill_every_parameter(fill, nullptr);

    InitShardModel model(Device::meta());
    model.shard_and_materialise();
    manual_seed(77);
    model.fill_every_parameter(fill, nullptr);

    require_shards_are_rows_of(*model.root, *reference.root);
  }
}

TEST_CASE("nn::init refuses a sharded parameter of 1 dim, naming its global shape", "[fsdp][init]") {
  InitShardModel model(Device::meta());
  model.shard_and_materialise();
  const nn::Parameter bias = model.root->parameter_handle("bias");
  const std::vector<double> before = dtr::testing::values_of(nn::init::constant_(bias, 3.0));
  using Catch::Contains;
  CHECK_THROWS_WITH(nn::init::xavier_uniform_(bias), Contains("fewer than 2 dims") && Contains("[7]"));
  CHECK_THROWS_WITH(nn::init::kaiming_normal_(bias), Contains("fewer than 2 dims") && Contains("[7]"));
  CHECK(dtr::testing::values_of(bias.data()) == before);
}
