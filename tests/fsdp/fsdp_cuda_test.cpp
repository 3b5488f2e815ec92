// fully_shard on CUDA at whatever world size mpirun gives: each rank trains its
// slice of the global batch on the GPU (over NCCL when every rank has a GPU of
// its own, else over MPI staging through host memory, so 2 ranks can share one
// GPU), against single-process training of the same model on the whole batch on
// the CPU (Eigen kernels: an independent implementation of every op). Same
// losses, same final full parameters, and each rank's CUDA memory holds its
// 1/N of the parameters.
#include "tests/support/mpi_test_util.h"
#include "dtr/dtensor/dtensor.h"
#include "dtr/dtensor/dtensor_spec.h"
#include "dtr/fsdp/fully_shard.h"
#include "dtr/mesh/distributed.h"
#include "dtr/nn/optim/adamw.h"
#include "dtr/nn/simple_model.h"
#include "dtr/tensor/allocator.h"
#include "dtr/tensor/cuda/cuda_runtime.h"
#include "dtr/tensor/ops/elementwise.h"
#include "dtr/tensor/ops/reduce.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <functional>

using namespace dtr;
using dtr::testing::values_of;

namespace {

constexpr int64_t kGlobalBatch = 24;  // divisible by 1-4 ranks
constexpr int64_t kIn = 32, kHidden = 50, kClasses = 7;  // 50 and 7 rows shard unevenly

bool have_gpu() {
  if (cuda::device_count() > 0) return true;
  WARN("skipped: no GPU");
  return false;
}

std::shared_ptr<nn::SimpleModel> make_model(Device device, DType dtype = DType::f32) {
  manual_seed(11);
  auto model = std::make_shared<nn::SimpleModel>(kIn, kHidden, kClasses, nn::LinearOptions{.dtype = dtype});
  model->to(device);
  return model;
}

// Rows [begin, end) of step `step`'s global batch: inputs and regression targets.
std::pair<Tensor, Tensor> batch(int step, int64_t begin, int64_t end, Device device, DType dtype) {
  std::vector<double> x, y;
  for (int64_t b = begin; b < end; ++b) {
    for (int64_t i = 0; i < kIn; ++i) x.push_back(std::sin(0.37 * b + 0.11 * i + 0.5 * step));
    for (int64_t c = 0; c < kClasses; ++c) y.push_back(std::cos(0.23 * b - 0.7 * c + 0.3 * step));
  }
  return {from_vector(x, {end - begin, kIn}).to(dtype).to(device), from_vector(y, {end - begin, kClasses}).to(dtype).to(device)};
}

Tensor mse(const Tensor& out, const Tensor& target) {
  Tensor diff = sub(out, target);
  return mean(mul(diff, diff));
}

std::vector<double> train_reference(nn::Module& model, int steps) {
  nn::optim::AdamW opt(model.parameters(), {.lr = 1e-2});
  std::vector<double> losses;
  for (int step = 0; step < steps; ++step) {
    auto [x, y] = batch(step, 0, kGlobalBatch, Device::cpu(), DType::f32);
    Tensor loss = mse(model(x), y);
    loss.backward();
    opt.step();
    opt.zero_grad();
    losses.push_back(loss.item());
  }
  return losses;
}

// fully_shard on every module with parameters of its own, then on the root.
void shard(nn::Module& model, const fsdp::FullyShardOptions& options) {
  for (auto& [path, m] : model.named_modules()) {
    if (!path.empty() && !m->named_parameters(/*recurse=*/false).empty()) fsdp::fully_shard(*m, options);
  }
  fsdp::fully_shard(model, options);
}

// Trains a sharded model; `after_backward` (if given) looks at it between
// backward and the optimizer step.
std::vector<double> train_sharded(nn::Module& model, int steps, const fsdp::FullyShardOptions& options,
                                  const std::function<void(nn::Module&)>& after_backward = {}) {
  const int n = distributed::world_size(), me = distributed::rank();
  nn::optim::AdamW opt(model.parameters(), {.lr = 1e-2});
  const int64_t local = kGlobalBatch / n;
  const Device gpu = Device::cuda(cuda::current_device());
  const DType input_dtype = options.mp_policy.param_dtype.value_or(DType::f32);
  std::vector<double> losses;
  for (int step = 0; step < steps; ++step) {
    auto [x, y] = batch(step, me * local, (me + 1) * local, gpu, input_dtype);
    Tensor out = model(x);
    Tensor loss = mse(out.to(DType::f32), y.to(DType::f32));
    loss.backward();
    if (after_backward) after_backward(model);
    opt.step();
    opt.zero_grad();
    // The mean over ranks of per-rank means is the global mean (equal slices).
    Tensor global = full({1}, loss.item(), {.dtype = DType::f64});
    distributed::world_group()->all_reduce(global, mesh::ReduceOp::avg())->wait();
    losses.push_back(values_of(global)[0]);
  }
  return losses;
}

std::vector<double> train_fsdp(nn::Module& model, int steps, const fsdp::FullyShardOptions& options) {
  shard(model, options);
  return train_sharded(model, steps, options);
}

// Largest |got - want| relative to the largest |want| of each parameter.
void require_same_parameters(nn::Module& sharded, nn::Module& reference, double rtol) {
  auto params = sharded.named_parameters();
  auto expected = reference.named_parameters();
  REQUIRE(params.size() == expected.size());
  for (size_t i = 0; i < params.size(); ++i) {
    INFO(params[i].first);
    REQUIRE(params[i].second.is_sharded());
    REQUIRE(params[i].second->device().is_cuda());
    Tensor full_param = params[i].second.as_dtensor().full_tensor();
    auto got = values_of(full_param.to(Device::cpu())), want = values_of(expected[i].second);
    REQUIRE(got.size() == want.size());
    double scale = 0, error = 0;
    for (size_t j = 0; j < got.size(); ++j) {
      scale = std::max(scale, std::abs(want[j]));
      error = std::max(error, std::abs(got[j] - want[j]));
    }
    CHECK(error <= rtol * scale);
  }
}

}  // namespace

TEST_CASE("FSDP on CUDA trains like single-process CPU training: losses, parameters and 1/N memory") {
  if (!have_gpu()) return;
  constexpr int kSteps = 8;
  auto reference = make_model(Device::cpu());
  auto expected = train_reference(*reference, kSteps);

  const Device gpu = Device::cuda(cuda::current_device());
  auto model = make_model(gpu);
  const int64_t param_bytes_before = memory_stats(gpu)[MemoryTag::param].current_bytes;
  auto losses = train_fsdp(*model, kSteps, {});
  REQUIRE(losses.size() == expected.size());
  for (size_t i = 0; i < losses.size(); ++i) {
    INFO("step " << i);
    // GPU and CPU GEMMs sum in different orders: f32 rounding, amplified a
    // little by Adam's normalised steps.
    CHECK(losses[i] == Approx(expected[i]).epsilon(1e-4));
  }
  require_same_parameters(*model, *reference, 1e-4);

  // Parameter memory on this GPU is this rank's shards: the full model's rows
  // split over the ranks (50 and 7 rows shard unevenly; count this rank's rows).
  const int n = distributed::world_size(), me = distributed::rank();
  int64_t expected_bytes = 0;
  for (auto& [name, p] : reference->named_parameters()) {
    const int64_t rows = p->size(0), row_numel = p->numel() / rows;
    expected_bytes += shard_range(rows, n, me).length * row_numel * 4;
  }
  const int64_t param_bytes = memory_stats(gpu)[MemoryTag::param].current_bytes;
  INFO("param bytes on the GPU before sharding " << param_bytes_before << ", after " << param_bytes);
  // Other tests of this process may hold CUDA parameters too: compare the change.
  CHECK(param_bytes_before - param_bytes == (reference->num_parameters() * 4 - expected_bytes));
}

TEST_CASE("FSDP on CUDA with bf16 mixed precision tracks f32 training") {
  if (!have_gpu()) return;
  constexpr int kSteps = 8;
  auto reference = make_model(Device::cpu());
  auto expected = train_reference(*reference, kSteps);
  auto model = make_model(Device::cuda(cuda::current_device()));
  fsdp::FullyShardOptions options;
  options.mp_policy.param_dtype = DType::bf16;
  options.mp_policy.reduce_dtype = DType::f32;
  auto losses = train_fsdp(*model, kSteps, options);
  for (size_t i = 0; i < losses.size(); ++i) {
    INFO("step " << i << ": bf16 " << losses[i] << ", f32 reference " << expected[i]);
    // bf16 keeps 8 bits of mantissa: a few parts in a thousand per op.
    CHECK(std::abs(losses[i] - expected[i]) <= 0.03 * std::abs(expected[i]));
  }
  // Master weights stay f32 on the GPU.
  for (auto& [name, p] : model->named_parameters()) {
    INFO(name);
    CHECK(p->dtype() == DType::f32);
    CHECK(p->device().is_cuda());
  }
}

namespace {

// Trained shards of an offloaded model against this rank's rows of the reference.
void require_offloaded_like(nn::Module& model, nn::Module& reference, bool pinned) {
  auto params = model.named_parameters();
  auto want = reference.named_parameters();
  REQUIRE(params.size() == want.size());
  for (size_t i = 0; i < params.size(); ++i) {
    INFO(params[i].first);
    const Tensor& shard = params[i].second;
    CHECK(shard.device().is_cpu());
    CHECK(shard.is_pinned() == pinned);
    REQUIRE(params[i].second.is_sharded());
    // This rank's rows of the reference parameter.
    const ShardRange range = shard_range(want[i].second->size(0), distributed::world_size(), distributed::rank());
    auto got = values_of(shard), expected_rows = values_of(want[i].second->narrow(0, range.offset, range.length));
    REQUIRE(got.size() == expected_rows.size());
    double scale = 1e-30, error = 0;
    for (size_t j = 0; j < got.size(); ++j) {
      scale = std::max(scale, std::abs(expected_rows[j]));
      error = std::max(error, std::abs(got[j] - expected_rows[j]));
    }
    CHECK(error <= 1e-4 * scale);
  }
}

// Between backward and the step: every shard and its gradient in host memory, pinned or not.
std::function<void(nn::Module&)> check_host_memory(bool pinned) {
  return [pinned](nn::Module& model) {
    for (auto& [name, p] : model.named_parameters()) {
      INFO(name);
      REQUIRE(p->device().is_cpu());
      CHECK(p->is_pinned() == pinned);
      REQUIRE(p->grad().defined());
      CHECK(p->grad().device().is_cpu());
      CHECK(p->grad().is_pinned() == pinned);
    }
  };
}

}  // namespace

TEST_CASE("FSDP on CUDA with CPU offload, pinned (default) or pageable: host shards and gradients, same training") {
  if (!have_gpu()) return;
  constexpr int kSteps = 8;
  auto reference = make_model(Device::cpu());
  auto expected = train_reference(*reference, kSteps);

  const Device gpu = Device::cuda(cuda::current_device());
  for (bool pinned : {true, false}) {
    INFO("pin_memory " << pinned);
    auto model = make_model(gpu);
    const int64_t gpu_param_bytes_before = memory_stats(gpu)[MemoryTag::param].current_bytes;
    fsdp::FullyShardOptions options;
    options.offload_policy.offload_params = true;
    if (!pinned) options.offload_policy.pin_memory = false;
    shard(*model, options);
    auto losses = train_sharded(*model, kSteps, options, check_host_memory(pinned));
    for (size_t i = 0; i < losses.size(); ++i) {
      INFO("step " << i);
      CHECK(losses[i] == Approx(expected[i]).epsilon(1e-4));
    }
    // Between steps the GPU holds none of this model's parameters.
    CHECK(gpu_param_bytes_before - memory_stats(gpu)[MemoryTag::param].current_bytes ==
          reference->num_parameters() * 4);
    require_offloaded_like(*model, *reference, pinned);
  }
}

TEST_CASE("FSDP CPU offload of a meta model: shards made on the CPU are pinned in place at the first all-gather") {
  if (!have_gpu()) return;
  constexpr int kSteps = 4;
  auto reference = make_model(Device::cpu());
  manual_seed(11);
  reference->reset_parameters();
  auto expected = train_reference(*reference, kSteps);

  auto model = std::make_shared<nn::SimpleModel>(kIn, kHidden, kClasses, nn::LinearOptions{.device = Device::meta()});
  fsdp::FullyShardOptions options;
  options.offload_policy.offload_params = true;
  shard(*model, options);
  model->to_empty(Device::cpu());  // pageable shards, held by the optimizer below
  manual_seed(11);
  model->reset_parameters();
  for (auto& [name, p] : model->named_parameters()) CHECK_FALSE(p->is_pinned());
  auto losses = train_sharded(*model, kSteps, options, check_host_memory(true));
  for (size_t i = 0; i < losses.size(); ++i) {
    INFO("step " << i);
    CHECK(losses[i] == Approx(expected[i]).epsilon(1e-4));
  }
  require_offloaded_like(*model, *reference, true);
}

TEST_CASE("FSDP CPU offload with bf16 compute and f16 reduction: pinned and pageable train identically") {
  // Pinned, the shards are cast on the device after an asynchronous copy, and the
  // reduced gradients are cast and scaled there (at 2+ ranks f16 splits the
  // division around the reduction); pageable, on the host. Same values either way.
  if (!have_gpu()) return;
  constexpr int kSteps = 4;
  auto reference = make_model(Device::cpu());
  auto expected = train_reference(*reference, kSteps);
  const Device gpu = Device::cuda(cuda::current_device());
  std::vector<std::vector<double>> runs;
  for (bool pinned : {true, false}) {
    INFO("pin_memory " << pinned);
    auto model = make_model(gpu);
    fsdp::FullyShardOptions options;
    options.mp_policy.param_dtype = DType::bf16;
    options.mp_policy.reduce_dtype = DType::f16;
    options.offload_policy.offload_params = true;
    options.offload_policy.pin_memory = pinned;
    shard(*model, options);
    runs.push_back(train_sharded(*model, kSteps, options, check_host_memory(pinned)));
    for (size_t i = 0; i < runs.back().size(); ++i) {
      INFO("step " << i << ": " << runs.back()[i] << ", f32 reference " << expected[i]);
      CHECK(std::abs(runs.back()[i] - expected[i]) <= 0.03 * std::abs(expected[i]));
    }
  }
  CHECK(runs[0] == runs[1]);
}
