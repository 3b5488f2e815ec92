// Tensor parallelism (nn/tensor_parallel/) at world sizes 1-4: an MLP whose first
// Linear is ColwiseParallel and second RowwiseParallel gives the single-process
// outputs, input gradients and parameter gradients (hidden sizes that split
// unevenly, and with fewer features than ranks); other layouts; bad plans.
#include "dtr/dtensor/redistribute.h"
#include "tests/support/dtensor_op_check.h"
#include "dtr/nn/activation.h"
#include "dtr/nn/container.h"
#include "dtr/nn/linear.h"
#include "dtr/nn/optim/clip_grad.h"
#include "dtr/nn/tensor_parallel/parallelize_module.h"
#include "dtr/nn/transformer.h"
#include "dtr/tensor/autograd/grad_mode.h"
#include "dtr/tensor/factory.h"

using namespace dtr;
using namespace dtr::testing;
using dtr::mesh::init_device_mesh;
namespace tp = dtr::nn::tensor_parallel;

namespace {

std::shared_ptr<nn::Sequential> make_mlp(int64_t dim, int64_t hidden, bool bias = true) {
  nn::LinearOptions options{.bias = bias, .dtype = DType::f64};
  auto mlp = std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      std::make_shared<nn::Linear>(dim, hidden, options), std::make_shared<nn::GELU>(),
      std::make_shared<nn::Linear>(hidden, dim, options)});
  // The same values on every rank (module init draws from each rank's own RNG).
  NoGradGuard no_grad;
  uint64_t seed = 100;
  for (const auto& [name, p] : mlp->named_parameters()) p->copy_(random_full(p->sizes(), seed++));
  return mlp;
}

// One forward and backward of the TP model and of the reference on the same input
// [3, 2, dim] and output gradient: outputs and input gradients must agree.
void check_forward_backward(nn::Module& model, nn::Module& reference, int64_t dim) {
  const Tensor x_full = random_full({3, 2, dim}, 7);
  Tensor x = x_full.clone().requires_grad_();
  Tensor x_ref = x_full.clone().requires_grad_();
  Tensor y = model(x);
  Tensor y_ref = reference(x_ref);
  require_close(y, y_ref, 1e-10);
  const Tensor w = random_full(y_ref.sizes(), 8);
  sum(mul(y, w)).backward();
  sum(mul(y_ref, w)).backward();
  require_close(x.grad(), x_ref.grad(), 1e-10);
}

// The TP MLP against the same MLP in this process: output, input gradient and
// every parameter's gradient (as the full tensor of its DTensor gradient).
void check_mlp(int64_t dim, int64_t hidden, bool bias, const tp::ParallelizePlan& plan) {
  auto mesh = init_device_mesh(DeviceType::cpu, {distributed::world_size()}, {"tp"});
  auto reference = make_mlp(dim, hidden, bias);
  auto model = make_mlp(dim, hidden, bias);
  tp::parallelize_module(*model, mesh, plan);
  check_forward_backward(*model, *reference, dim);
  for (const auto& [name, p] : reference->named_parameters()) {
    INFO("parameter " << name);
    DTensor param = tp::parameter_dtensor(*model, name);
    REQUIRE(param.shape() == p->sizes());
    require_close(param.full_tensor(), p, 0);  // the shards are the full parameter's
    DTensor g = param.grad();
    REQUIRE(g.defined());
    require_close(g.full_tensor(), p->grad(), 1e-10);
  }
}

}  // namespace

TEST_CASE("tensor parallel: a Colwise then Rowwise MLP gives the single-process outputs and gradients") {
  const tp::ParallelizePlan plan = {{"0", tp::ColwiseParallel{}}, {"2", tp::RowwiseParallel{}}};
  check_mlp(6, 8, true, plan);
  check_mlp(6, 7, true, plan);   // uneven over 2, 3 and 4 ranks
  check_mlp(5, 2, true, plan);   // empty shards at 3 and 4 ranks
  check_mlp(6, 7, false, plan);  // no biases
}

TEST_CASE("tensor parallel: an attention block with Colwise q, k, v and Rowwise output matches one process") {
  // 12 heads of 2: whole heads on every rank at 1, 2, 3 and 4 ranks.
  nn::TransformerConfig config;
  config.dim = 24;
  config.n_heads = 12;
  config.max_seq_len = 8;
  config.dtype = DType::f64;
  auto make = [&] {
    auto attention = std::make_shared<nn::Attention>(config);
    NoGradGuard no_grad;
    uint64_t seed = 300;
    for (const auto& [name, p] : attention->named_parameters()) p->copy_(random_full(p->sizes(), seed++));
    return attention;
  };
  auto mesh = init_device_mesh(DeviceType::cpu, {distributed::world_size()}, {"tp"});
  auto reference = make();
  auto model = make();
  tp::parallelize_module(*model, mesh,
                         {{"wq", tp::ColwiseParallel{}}, {"wk", tp::ColwiseParallel{}},
                          {"wv", tp::ColwiseParallel{}}, {"wo", tp::RowwiseParallel{}}});
  const Tensor x_full = random_full({2, 5, 24}, 11);
  Tensor x = x_full.clone().requires_grad_();
  Tensor x_ref = x_full.clone().requires_grad_();
  Tensor y = (*model)(x);
  Tensor y_ref = (*reference)(x_ref);
  require_close(y, y_ref, 1e-10);
  const Tensor w = random_full(y_ref.sizes(), 12);
  sum(mul(y, w)).backward();
  sum(mul(y_ref, w)).backward();
  require_close(x.grad(), x_ref.grad(), 1e-10);
  for (const auto& [name, p] : reference->named_parameters()) {
    INFO("parameter " << name);
    DTensor g = tp::parameter_dtensor(*model, name).grad();
    REQUIRE(g.defined());
    require_close(g.full_tensor(), p->grad(), 1e-10);
  }
}

TEST_CASE("tensor parallel: the parameters hold local shards with Shard(0), Shard(1) and Replicate specs") {
  auto mesh = init_device_mesh(DeviceType::cpu, {distributed::world_size()}, {"tp"});
  auto model = make_mlp(6, 7);
  tp::parallelize_module(*model, mesh, {{"0", tp::ColwiseParallel{}}, {"2", tp::RowwiseParallel{}}});
  REQUIRE(tp::parameter_dtensor(*model, "0.weight").placements() == Placements{Shard(0)});
  REQUIRE(tp::parameter_dtensor(*model, "0.bias").placements() == Placements{Shard(0)});
  REQUIRE(tp::parameter_dtensor(*model, "2.weight").placements() == Placements{Shard(1)});
  REQUIRE(tp::parameter_dtensor(*model, "2.bias").placements() == Placements{Replicate()});
  const int64_t rows = shard_range(7, distributed::world_size(), distributed::rank()).length;
  REQUIRE(model->named_parameters()[0].second->sizes() == Shape{rows, 6});
  REQUIRE(model->named_parameters()[2].second->sizes() == Shape{6, rows});
  for (const auto& [name, p] : model->named_parameters()) {
    REQUIRE(p->is_leaf());
    REQUIRE(p->requires_grad());
  }
}

TEST_CASE("tensor parallel: Colwise with a Replicate output, Rowwise from a Replicate input to a Shard(0) output") {
  auto mesh = init_device_mesh(DeviceType::cpu, {distributed::world_size()}, {"tp"});
  const int n = distributed::world_size();
  for (int64_t out : {int64_t{5}, int64_t{2}}) {
    INFO("out features " << out);
    auto make = [&] {
      auto lin = std::make_shared<nn::Linear>(4, out, nn::LinearOptions{.dtype = DType::f64});
      NoGradGuard no_grad;
      lin->parameter("weight").copy_(random_full({out, 4}, 1));
      lin->parameter("bias").copy_(random_full({out}, 2));
      return lin;
    };
    const Tensor x_full = random_full({7, 4}, 3);
    const Tensor w = random_full({7, out}, 4);
    auto reference = make();
    Tensor x_ref = x_full.clone().requires_grad_();
    Tensor y_ref = (*reference)(x_ref);
    sum(mul(y_ref, w)).backward();

    // Colwise with the output gathered to Replicate.
    auto col = make();
    tp::parallelize_module(*col, mesh, {{"", tp::ColwiseParallel{.output_layout = Replicate()}}});
    Tensor x = x_full.clone().requires_grad_();
    Tensor y = (*col)(x);
    require_close(y, y_ref);
    sum(mul(y, w)).backward();
    require_close(x.grad(), x_ref.grad());
    require_close(tp::parameter_dtensor(*col, "weight").grad().full_tensor(),
                  reference->parameter("weight").grad());
    require_close(tp::parameter_dtensor(*col, "bias").grad().full_tensor(),
                  reference->parameter("bias").grad());

    // Rowwise from a Replicate input, reduce-scattered to rows (sequence parallel).
    auto row = make();
    tp::parallelize_module(*row, mesh,
                           {{"", tp::RowwiseParallel{.input_layout = Replicate(), .output_layout = Shard(0)}}});
    Tensor x2 = x_full.clone().requires_grad_();
    Tensor y_local = (*row)(x2);
    REQUIRE(y_local.size(0) == shard_range(7, n, distributed::rank()).length);
    DTensor y2 = DTensor::from_local(y_local, mesh, {Shard(0)}, {.shape = Shape{7, out}});
    Tensor y2_full = y2.full_tensor();
    require_close(y2_full, y_ref);
    sum(mul(y2_full, w)).backward();
    require_close(x2.grad(), x_ref.grad());
    require_close(tp::parameter_dtensor(*row, "weight").grad().full_tensor(),
                  reference->parameter("weight").grad());
    require_close(tp::parameter_dtensor(*row, "bias").grad().full_tensor(),
                  reference->parameter("bias").grad());
    REQUIRE(row->parameter("bias").defined());  // back in its slot after the forward
  }
}

TEST_CASE("tensor parallel: bad plans and bad inputs are clear errors") {
  auto mesh = init_device_mesh(DeviceType::cpu, {distributed::world_size()}, {"tp"});
  auto model = make_mlp(6, 8);
  REQUIRE_THROWS_WITH(tp::parallelize_module(*model, mesh, {{"5", tp::ColwiseParallel{}}}),
                      Catch::Contains("'5'") && Catch::Contains("not in the module"));
  REQUIRE_THROWS_WITH(tp::parallelize_module(*model, mesh, {{"1", tp::ColwiseParallel{}}}),
                      Catch::Contains("'1' is a GELU") && Catch::Contains("Linear layers only"));
  if (distributed::world_size() == 4) {
    auto mesh2 = init_device_mesh(DeviceType::cpu, {2, 2});
    REQUIRE_THROWS_WITH(tp::parallelize_module(*model, mesh2, {{"0", tp::ColwiseParallel{}}}),
                        Catch::Contains("1-D mesh"));
  }
  tp::parallelize_module(*model, mesh, {{"2", tp::RowwiseParallel{.input_layout = Replicate()}}});
  REQUIRE_THROWS_WITH((*model)[2](random_full({3, 5}, 1)), Catch::Contains("tensor parallel '2'"));
  REQUIRE((*model)[2].parameter("bias").defined());  // refused before the slot changed
}

TEST_CASE("tensor parallel: a Colwise Linear with a fused GELU matches one process, and Rowwise refuses it") {
  auto mesh = init_device_mesh(DeviceType::cpu, {distributed::world_size()}, {"tp"});
  const int64_t dim = 6, hidden = 10;
  auto reference = make_mlp(dim, hidden);  // Linear, GELU (erf), Linear
  nn::LinearOptions options{.dtype = DType::f64};
  nn::LinearOptions fused_options = options;
  fused_options.activation = LinearActivation::gelu_erf;
  auto model = std::make_shared<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      std::make_shared<nn::Linear>(dim, hidden, fused_options), std::make_shared<nn::Linear>(hidden, dim, options)});
  {
    NoGradGuard no_grad;
    (*model)[0].parameter("weight").copy_((*reference)[0].parameter("weight"));
    (*model)[0].parameter("bias").copy_((*reference)[0].parameter("bias"));
    (*model)[1].parameter("weight").copy_((*reference)[2].parameter("weight"));
    (*model)[1].parameter("bias").copy_((*reference)[2].parameter("bias"));
  }
  REQUIRE_THROWS_WITH(tp::parallelize_module(*model, mesh, {{"0", tp::RowwiseParallel{}}}),
                      Catch::Contains("RowwiseParallel on '0'") && Catch::Contains("fused activation"));
  tp::parallelize_module(*model, mesh, {{"0", tp::ColwiseParallel{}}, {"1", tp::RowwiseParallel{}}});
  check_forward_backward(*model, *reference, dim);
  DTensor g = tp::parameter_dtensor(*model, "0.weight").grad();
  REQUIRE(g.defined());
  require_close(g.full_tensor(), (*reference)[0].parameter("weight").grad(), 1e-10);
}

TEST_CASE("tensor parallel: clip_grad_norm_ over the sharded parameters clips as one process does") {
  auto mesh = init_device_mesh(DeviceType::cpu, {distributed::world_size()}, {"tp"});
  auto reference = make_mlp(6, 7);
  auto model = make_mlp(6, 7);
  tp::parallelize_module(*model, mesh, {{"0", tp::ColwiseParallel{}}, {"2", tp::RowwiseParallel{}}});
  check_forward_backward(*model, *reference, 6);
  // Sharded parameters add their shards' parts over the mesh; the replicated
  // rowwise bias counts once.
  const double want = nn::optim::clip_grad_norm_(reference->parameters(), 0.1);
  const double got = nn::optim::clip_grad_norm_(model->parameters(), 0.1);
  REQUIRE(want > 0.1);  // so both clip
  REQUIRE(got == Approx(want).epsilon(1e-12));
  for (const auto& [name, p] : reference->named_parameters()) {
    INFO("parameter " << name);
    require_close(tp::parameter_dtensor(*model, name).grad().full_tensor(), p.data().grad(), 1e-10);
  }
  // A sharded parameter keeps its layout: its tensor must stay a local shard.
  REQUIRE_THROWS_WITH((*model)[0].set_parameter("weight", zeros({3, 3}, {.dtype = DType::f64})),
                      Catch::Contains("parameter 'weight' is sharded") && Catch::Contains("got [3, 3]"));
}
