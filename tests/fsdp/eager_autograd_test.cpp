// fully_shard gives the gradients of eager autograd at world sizes 1-4 in the
// patterns where a module's backward does not run exactly once per forward: the
// root module called twice in one forward, a sharded module called at two depths,
// two losses from one forward with a backward each, and one loss backpropagated
// twice (retain_graph). Each is checked against the same model without FSDP in the
// same process (every rank feeds the same input, so FSDP's averaged gradient is
// the single-process one), under each reshard_after_forward setting and with the
// blocks activation-checkpointed (the wrapper sharded, or the module inside it).
#include "dtr/fsdp/fully_shard.h"
#include "dtr/mesh/distributed.h"
#include "dtr/nn/activation_checkpoint.h"
#include "dtr/nn/linear.h"
#include "dtr/tensor/autograd/grad_mode.h"
#include "dtr/tensor/ops/elementwise.h"
#include "dtr/tensor/ops/nn.h"
#include "dtr/tensor/ops/reduce.h"
#include "dtr/tensor/random.h"

#include "tests/support/mpi_test_util.h"

#include <catch2/catch.hpp>

#include <functional>

using namespace dtr;
using dtr::testing::error_relative_to_scale;

namespace {

constexpr int64_t kWidth = 8;
constexpr int64_t kInputRows = 5;

// x + gelu(W x + b): one parameter group of its own.
class GeluBlock : public nn::Module {
 public:
  std::string type_name() const override { return "GeluBlock"; }
  Tensor forward(const Tensor& x) override { return add(x, gelu((*lin_)(x))); }

 private:
  std::shared_ptr<nn::Linear> lin_ = register_module("lin", std::make_shared<nn::Linear>(kWidth, kWidth));
};

enum class CheckpointMode { none, wrapper_sharded, inner_sharded };

// head(b(a(x))), or with `shared_twice` head(shared(b(shared(a(x))))): a module
// used at two depths. Blocks may be activation-checkpointed.
class ReusingNet : public nn::Module {
 public:
  ReusingNet(bool shared_twice, CheckpointMode checkpointing) : shared_twice_(shared_twice) {
    a_ = register_module("a", block(checkpointing));
    b_ = register_module("b", block(checkpointing));
    if (shared_twice) shared_ = register_module("shared", block(checkpointing));
  }
  std::string type_name() const override { return "ReusingNet"; }
  Tensor forward(const Tensor& x) override {
    Tensor h = (*a_)(x);
    if (shared_twice_) h = (*shared_)(h);
    h = (*b_)(h);
    if (shared_twice_) h = (*shared_)(h);
    return (*head_)(h);
  }
  // The blocks as fully_shard sees them: the wrapper, or the module inside it.
  std::vector<nn::Module*> blocks(CheckpointMode checkpointing) const {
    std::vector<nn::Module*> out;
    for (const auto& m : {a_, b_, shared_}) {
      if (!m) continue;
      auto* wrapper = dynamic_cast<nn::CheckpointWrapper*>(m.get());
      out.push_back(checkpointing == CheckpointMode::inner_sharded && wrapper ? &wrapper->wrapped() : m.get());
    }
    return out;
  }

 private:
  static nn::ModulePtr block(CheckpointMode checkpointing) {
    nn::ModulePtr b = std::make_shared<GeluBlock>();
    return checkpointing == CheckpointMode::none ? b : nn::checkpoint_wrapper(b);
  }

  bool shared_twice_;
  nn::ModulePtr a_, b_, shared_;
  std::shared_ptr<nn::Linear> head_ = register_module("head", std::make_shared<nn::Linear>(kWidth, kWidth));
};

struct ShardSetup {
  std::optional<std::variant<bool, int>> reshard_after_forward{};
  CheckpointMode checkpointing = CheckpointMode::none;
};

std::string describe_setup(const ShardSetup& s) {
  std::string raf = !s.reshard_after_forward ? "default"
                    : std::holds_alternative<bool>(*s.reshard_after_forward)
                        ? (std::get<bool>(*s.reshard_after_forward) ? "true" : "false")
                        : std::to_string(std::get<int>(*s.reshard_after_forward));
  const char* ac[] = {"none", "wrapper sharded", "inner sharded"};
  return "reshard_after_forward " + raf + ", checkpointing " + ac[static_cast<int>(s.checkpointing)];
}

// Every reshard_after_forward setting (an integer where the world size allows one
// between 1 and itself), and both ways of sharding a checkpointed block.
std::vector<ShardSetup> shard_setups() {
  std::vector<ShardSetup> out = {{}, {.reshard_after_forward = false}, {.reshard_after_forward = true}};
  if (distributed::world_size() == 4) out.push_back({.reshard_after_forward = 2});
  out.push_back({.checkpointing = CheckpointMode::wrapper_sharded});
  out.push_back({.checkpointing = CheckpointMode::inner_sharded});
  out.push_back({.reshard_after_forward = false, .checkpointing = CheckpointMode::inner_sharded});
  return out;
}

std::shared_ptr<ReusingNet> make_net(bool shared_twice, CheckpointMode checkpointing) {
  manual_seed(11);
  return std::make_shared<ReusingNet>(shared_twice, checkpointing);
}

Tensor shared_input() {
  manual_seed(12);
  return randn({kInputRows, kWidth});
}

using GradientPattern = std::function<void(nn::Module& model, const Tensor& x)>;

// Runs `pattern` on the plain model and on a sharded copy (blocks, then the root)
// and compares every parameter's gradient.
void require_eager_gradients(bool shared_twice, const GradientPattern& pattern) {
  for (const ShardSetup& setup : shard_setups()) {
    INFO(describe_setup(setup) << ", " << distributed::world_size() << " ranks");
    auto reference = make_net(shared_twice, CheckpointMode::none);
    pattern(*reference, shared_input());

    auto model = make_net(shared_twice, setup.checkpointing);
    fsdp::FullyShardOptions options{.reshard_after_forward = setup.reshard_after_forward};
    for (nn::Module* block : model->blocks(setup.checkpointing)) fsdp::fully_shard(*block, options);
    fsdp::fully_shard(*model, options);
    pattern(*model, shared_input());

    auto want = reference->named_parameters();
    auto got = model->named_parameters();
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      INFO(got[i].first);
      REQUIRE(got[i].first == want[i].first);
      REQUIRE(want[i].second->grad().defined());
      REQUIRE(got[i].second.data().grad().defined());
      CHECK(error_relative_to_scale(got[i].second.as_dtensor().grad().full_tensor(), want[i].second->grad()) <=
            1e-6);
    }
  }
}

Tensor mean_square_loss(const Tensor& out) { return mean(square(out)); }

}  // namespace

TEST_CASE("eager gradients: one forward and backward (the baseline of the patterns below)") {
  require_eager_gradients(false, [](nn::Module& model, const Tensor& x) { mean_square_loss(model(x)).backward(); });
}

TEST_CASE("eager gradients: the root module called twice in one forward") {
  require_eager_gradients(false, [](nn::Module& model, const Tensor& x) { mean_square_loss(model(model(x))).backward(); });
}

TEST_CASE("eager gradients: a sharded module used at two depths of one forward") {
  require_eager_gradients(true, [](nn::Module& model, const Tensor& x) { mean_square_loss(model(x)).backward(); });
}

TEST_CASE("eager gradients: two losses from one forward, one backward each (retain_graph on the first)") {
  require_eager_gradients(true, [](nn::Module& model, const Tensor& x) {
    Tensor out = model(x);
    mean_square_loss(out).backward({}, /*retain_graph=*/true);
    mul(sum(out), Scalar(0.25)).backward();
  });
}

TEST_CASE("eager gradients: one loss backpropagated twice accumulates (retain_graph)") {
  require_eager_gradients(false, [](nn::Module& model, const Tensor& x) {
    Tensor loss = mean_square_loss(model(x));
    loss.backward({}, /*retain_graph=*/true);
    loss.backward();
  });
}

TEST_CASE("eager gradients: a single Linear as the root, called twice (lin(lin(x))), and without gradients") {
  auto make = [] {
    manual_seed(13);
    return std::make_shared<nn::Linear>(kWidth, kWidth);
  };
  auto reference = make();
  mean_square_loss((*reference)((*reference)(shared_input()))).backward();
  auto lin = make();
  fsdp::fully_shard(*lin);
  {
    autograd::NoGradGuard no_grad;  // evaluation: each call of the root is a forward of its own
    CHECK(error_relative_to_scale((*lin)((*lin)(shared_input())), (*reference)((*reference)(shared_input()))) <=
          1e-6);
  }
  mean_square_loss((*lin)((*lin)(shared_input()))).backward();
  for (const char* name : {"weight", "bias"}) {
    INFO(name << " at " << distributed::world_size() << " ranks");
    const nn::Parameter got = lin->parameter_handle(name);
    CHECK(error_relative_to_scale(got.as_dtensor().grad().full_tensor(), reference->parameter(name).grad()) <= 1e-6);
  }
}
