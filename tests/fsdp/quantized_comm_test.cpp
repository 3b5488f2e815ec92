// Quantized communication between hosts (QuantizedCommPolicy: ZeRO++'s qwZ and
// qgZ) at 1-4 ranks. The hosts are emulated with host_size: 1 rank per host at 2
// and 3 ranks, 2 at 4 ranks; on the simulated 2 hosts x 2 ranks
// (cluster_fsdp_2hosts_np4) they are the job's own hosts. One rank is one host:
// nothing is quantized.
//
// The references are built here from the full tensors: each rank's per-rank flat
// buffer (each parameter's ceil(rows / ranks) rows, zero-padded, in parameter order:
// dtr/fsdp/flat_collectives.h), each parameter's segment quantized on its own with
// block_quantize, whose rounding block_quantize_test checks against a double
// reference.
#include "dtr/fsdp/fully_shard.h"
#include "dtr/fsdp/reshard_after_forward.h"
#include "dtr/mesh/device_mesh.h"
#include "dtr/mesh/distributed.h"
#include "dtr/nn/linear.h"
#include "dtr/tensor/autograd/grad_mode.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/elementwise.h"
#include "dtr/tensor/ops/quantize.h"
#include "dtr/tensor/ops/reduce.h"

#include "tests/support/tiny_transformer.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <vector>

using namespace dtr;

namespace {

constexpr int64_t kOut = 5, kIn = 3, kBlock = 4;

// The policy's host_size for these tests: the job's hosts where there are several,
// else emulated ones.
int policy_host_size() {
  if (distributed::num_hosts() > 1) return 0;
  return distributed::world_size() == 4 ? 2 : 1;
}

// The ranks per host that host_size means over `world`.
int ranks_per_host(const mesh::DeviceMesh& world) {
  const int k = policy_host_size();
  return k == 0 ? fsdp::reshard_to_host_size(world) : k;
}

// out x in weights and out biases of varied magnitudes, the same on every rank.
std::vector<float> weight_values() {
  std::vector<float> w;
  for (int64_t i = 0; i < kOut * kIn; ++i) w.push_back(static_cast<float>((1 + i % 4) * 0.37 * std::sin(1.0 + 3.1 * i)));
  return w;
}
std::vector<float> bias_values() {
  std::vector<float> b;
  for (int64_t i = 0; i < kOut; ++i) b.push_back(static_cast<float>(0.1 * std::cos(2.0 * i)));
  return b;
}

std::unique_ptr<nn::Linear> make_linear() {
  auto linear = std::make_unique<nn::Linear>(kIn, kOut);
  autograd::NoGradGuard no_grad;
  auto params = linear->named_parameters();
  REQUIRE(params.size() == 2);
  params[0].second.data().copy_(from_vector(weight_values(), {kOut, kIn}));
  params[1].second.data().copy_(from_vector(bias_values(), {kOut}));
  return linear;
}

// make_linear() sharded over `world` with `policy` on this test's hosts, in blocks of kBlock.
std::unique_ptr<nn::Linear> sharded_linear(const mesh::DeviceMesh& world, fsdp::QuantizedCommPolicy policy) {
  auto linear = make_linear();
  policy.host_size = policy_host_size();
  policy.block_size = kBlock;
  fsdp::fully_shard(*linear, {.mesh = world, .quantized_comm = policy});
  return linear;
}

// Rank r's per-rank flat buffer of a weight [kOut, kIn] and a bias [kOut] given flat.
std::vector<float> per_rank_buffer(const std::vector<float>& weight, const std::vector<float>& bias, int r, int n) {
  const int64_t chunk = (kOut + n - 1) / n;  // torch.chunk's rows per rank
  std::vector<float> buffer(static_cast<size_t>(chunk * kIn + chunk), 0.0f);
  for (int64_t i = 0; i < chunk; ++i) {
    const int64_t row = r * chunk + i;
    if (row >= kOut) break;
    for (int64_t j = 0; j < kIn; ++j) buffer[static_cast<size_t>(i * kIn + j)] = weight[static_cast<size_t>(row * kIn + j)];
    buffer[static_cast<size_t>(chunk * kIn + i)] = bias[static_cast<size_t>(row)];
  }
  return buffer;
}

// A per-rank buffer after block_quantize / block_dequantize with `bits`, the weight's
// segment and the bias's each in blocks of their own.
std::vector<float> quantized_once(const std::vector<float>& buffer, int bits) {
  const int64_t chunk = static_cast<int64_t>(buffer.size()) / (kIn + 1);
  std::vector<float> out;
  for (const auto& [begin, length] : {std::pair<int64_t, int64_t>{0, chunk * kIn}, {chunk * kIn, chunk}}) {
    const Tensor x = from_vector(std::vector<float>(buffer.begin() + begin, buffer.begin() + begin + length), {length});
    for (float v : block_dequantize(block_quantize(x, kBlock, bits), x.sizes(), DType::f32).to_vector<float>()) {
      out.push_back(v);
    }
  }
  return out;
}

std::vector<float> float_values(const Tensor& t) { return t.contiguous().to(DType::f32).to_vector<float>(); }

}  // namespace

TEST_CASE("quantized all-gather: other hosts' shards arrive quantized once, this host's exact",
          "[fsdp][quantized_comm]") {
  const int n = distributed::world_size(), me = distributed::rank();
  const auto world = mesh::init_device_mesh(DeviceType::cpu, {n}, {"dp"});
  const int k = ranks_per_host(world);
  auto linear = sharded_linear(world, {.weights = true});
  fsdp::fsdp_module(*linear).unshard();

  const std::vector<float> weight = weight_values(), bias = bias_values();
  const int64_t chunk = (kOut + n - 1) / n;
  std::vector<float> want_weight(weight.size()), want_bias(bias.size());
  for (int r = 0; r < n; ++r) {
    const std::vector<float> exact = per_rank_buffer(weight, bias, r, n);
    const std::vector<float> arrived = r / k == me / k ? exact : quantized_once(exact, 8);
    for (int64_t i = 0; i < chunk && r * chunk + i < kOut; ++i) {
      const int64_t row = r * chunk + i;
      for (int64_t j = 0; j < kIn; ++j) {
        want_weight[static_cast<size_t>(row * kIn + j)] = arrived[static_cast<size_t>(i * kIn + j)];
      }
      want_bias[static_cast<size_t>(row)] = arrived[static_cast<size_t>(chunk * kIn + i)];
    }
  }
  auto params = linear->named_parameters();
  CHECK(float_values(params[0].second.in_use()) == want_weight);
  CHECK(float_values(params[1].second.in_use()) == want_bias);
  // The quantization is real where there are other hosts: some value changed.
  const bool changed = want_weight != weight || want_bias != bias;
  CHECK(changed == (k < n));
  fsdp::fsdp_module(*linear).reshard();
  // The shards themselves are never quantized.
  CHECK(float_values(testing::full_of(params[0].second)) == weight);
}

namespace {

// Rank r's input x [2, kIn] and upstream gradient g [2, kOut] at `step`: small
// integers, so every gradient and every sum of them is exact in f32.
std::vector<float> input_of(int r, int step) {
  std::vector<float> x;
  for (int a = 0; a < 2; ++a) {
    for (int j = 0; j < kIn; ++j) x.push_back(static_cast<float>((a * 3 + j + r + 2 * step) % 5 - 2));
  }
  return x;
}
std::vector<float> upstream_of(int r, int step) {
  std::vector<float> g;
  for (int a = 0; a < 2; ++a) {
    for (int i = 0; i < kOut; ++i) g.push_back(static_cast<float>((a * 5 + i * 3 + r * 7 + step) % 9 - 4));
  }
  return g;
}

// Rank r's gradients of the weight (g^T x) and the bias (g's column sums), flat.
std::pair<std::vector<float>, std::vector<float>> gradients_of(int r, int step) {
  const std::vector<float> x = input_of(r, step), g = upstream_of(r, step);
  std::vector<float> gw(static_cast<size_t>(kOut * kIn), 0.0f), gb(static_cast<size_t>(kOut), 0.0f);
  for (int a = 0; a < 2; ++a) {
    for (int64_t i = 0; i < kOut; ++i) {
      const float gi = g[static_cast<size_t>(a * kOut + i)];
      gb[static_cast<size_t>(i)] += gi;
      for (int64_t j = 0; j < kIn; ++j) gw[static_cast<size_t>(i * kIn + j)] += gi * x[static_cast<size_t>(a * kIn + j)];
    }
  }
  return {gw, gb};
}

// One backward of sum(linear(x_r) * g_r) on this rank; returns this rank's reduced
// weight and bias shard gradients and clears them.
std::pair<std::vector<float>, std::vector<float>> reduced_gradients(nn::Linear& linear, int step = 0) {
  const int me = distributed::rank();
  Tensor y = linear(from_vector(input_of(me, step), {2, kIn}));
  sum(mul(y, from_vector(upstream_of(me, step), {2, kOut}))).backward();
  auto params = linear.named_parameters();
  std::pair<std::vector<float>, std::vector<float>> grads{float_values(params[0].second.data().grad()),
                                                          float_values(params[1].second.data().grad())};
  for (auto& [name, p] : params) p.data().set_grad({});
  return grads;
}

// This rank's rows (flat) of the per-rank `buffer`: the weight's, then the bias's.
std::pair<std::vector<float>, std::vector<float>> own_rows(const std::vector<float>& buffer, int n) {
  const int me = distributed::rank();
  const int64_t chunk = (kOut + n - 1) / n;
  const int64_t rows = std::clamp<int64_t>(kOut - me * chunk, 0, chunk);
  return {std::vector<float>(buffer.begin(), buffer.begin() + rows * kIn),
          std::vector<float>(buffer.begin() + chunk * kIn, buffer.begin() + chunk * kIn + rows)};
}

// The sum of ranks [first, end)'s gradients in this rank's per-rank buffer layout,
// in f32 (exact: small integers).
std::vector<float> gradient_buffer_sum(int first, int end, int n, int step = 0) {
  std::vector<float> sum;
  for (int r = first; r < end; ++r) {
    auto [gw, gb] = gradients_of(r, step);
    const std::vector<float> buffer = per_rank_buffer(gw, gb, distributed::rank(), n);
    if (sum.empty()) sum.assign(buffer.size(), 0.0f);
    for (size_t e = 0; e < buffer.size(); ++e) sum[e] += buffer[e];
  }
  return sum;
}

// The sum over ranks of this rank's per-rank buffers of the gradients, the way qgZ
// takes it: each host's exact partial sum, other hosts' quantized once with `bits`,
// summed in f32 in host order.
std::vector<float> qgz_sum(int n, int k, int bits) {
  const int me = distributed::rank();
  std::vector<float> total;
  for (int host = 0; host < n / k; ++host) {
    std::vector<float> partial = gradient_buffer_sum(host * k, (host + 1) * k, n);
    if (host != me / k) partial = quantized_once(partial, bits);
    if (total.empty()) {
      total = partial;
    } else {
      for (size_t e = 0; e < total.size(); ++e) total[e] += partial[e];
    }
  }
  return total;
}

}  // namespace

TEST_CASE("quantized reduce-scatter: hosts' partial sums cross quantized, the own host's exact",
          "[fsdp][quantized_comm]") {
  const int n = distributed::world_size();
  const auto world = mesh::init_device_mesh(DeviceType::cpu, {n}, {"dp"});
  const int k = ranks_per_host(world);
  for (const int bits : {8, 4}) {
    INFO("int" << bits);
    auto linear = sharded_linear(world, {.gradient_bits = bits});
    // Summed, not averaged: integer gradients keep every sum exact.
    fsdp::fsdp_module(*linear).set_gradient_divide_factor(1.0);
    const auto [got_weight, got_bias] = reduced_gradients(*linear);
    const auto [want_weight, want_bias] = own_rows(qgz_sum(n, k, bits), n);
    CHECK(got_weight == want_weight);
    CHECK(got_bias == want_bias);
    // One host quantizes nothing: the exact sum.
    const auto [exact_weight, exact_bias] = own_rows(gradient_buffer_sum(0, n, n), n);
    if (k == n) {
      CHECK(got_weight == exact_weight);
      CHECK(got_bias == exact_bias);
    }
  }
}

TEST_CASE("quantized reduce-scatter with error feedback sends what earlier codes left out", "[fsdp][quantized_comm]") {
  const int n = distributed::world_size(), me = distributed::rank();
  const auto world = mesh::init_device_mesh(DeviceType::cpu, {n}, {"dp"});
  const int k = ranks_per_host(world);
  for (const bool feedback : {true, false}) {
    INFO("error feedback " << feedback);
    auto linear = sharded_linear(world, {.gradient_bits = 4, .error_feedback = feedback});
    fsdp::fsdp_module(*linear).set_gradient_divide_factor(1.0);
    reduced_gradients(*linear, 0);
    const auto [got_weight, got_bias] = reduced_gradients(*linear, 1);
    // Step 2's sum: each other host sends the codes of its partial sum plus, with
    // feedback, what step 1's codes left out of its partial sum (all in f32).
    std::vector<float> total;
    for (int host = 0; host < n / k; ++host) {
      std::vector<float> sent = gradient_buffer_sum(host * k, (host + 1) * k, n, 1);
      if (host != me / k) {
        if (feedback) {
          const std::vector<float> first = gradient_buffer_sum(host * k, (host + 1) * k, n, 0);
          const std::vector<float> first_arrived = quantized_once(first, 4);
          for (size_t e = 0; e < sent.size(); ++e) sent[e] = (first[e] - first_arrived[e]) + sent[e];
        }
        sent = quantized_once(sent, 4);
      }
      if (total.empty()) {
        total = sent;
      } else {
        for (size_t e = 0; e < total.size(); ++e) total[e] += sent[e];
      }
    }
    const auto [want_weight, want_bias] = own_rows(total, n);
    CHECK(got_weight == want_weight);
    CHECK(got_bias == want_bias);
  }
}

TEST_CASE("quantized reduce-scatter averages within the bound of the quantization steps", "[fsdp][quantized_comm]") {
  const int n = distributed::world_size(), me = distributed::rank();
  const auto world = mesh::init_device_mesh(DeviceType::cpu, {n}, {"dp"});
  const int k = ranks_per_host(world);
  auto linear = sharded_linear(world, {.gradient_bits = 4});
  const auto [got_weight, got_bias] = reduced_gradients(*linear);
  // The average, and the bound: half an int4 step (absmax / 7) of each other host's
  // partial average, taken here at the largest magnitude of that partial.
  std::vector<double> average, bound;
  for (int host = 0; host < n / k; ++host) {
    std::vector<double> partial;
    for (float sum : gradient_buffer_sum(host * k, (host + 1) * k, n)) partial.push_back(sum / static_cast<double>(n));
    if (average.empty()) {
      average.assign(partial.size(), 0.0);
      bound.assign(partial.size(), 1e-6);  // f32 rounding
    }
    double largest = 0;
    for (double v : partial) largest = std::max(largest, std::abs(v));
    for (size_t e = 0; e < partial.size(); ++e) {
      average[e] += partial[e];
      if (host != me / k) bound[e] += largest / 7 / 2;
    }
  }
  for (size_t e = 0; e < got_weight.size(); ++e) {
    INFO("weight element " << e);
    CHECK(std::abs(got_weight[e] - average[e]) <= bound[e]);
  }
  const size_t bias_at = static_cast<size_t>((kOut + n - 1) / n * kIn);
  for (size_t e = 0; e < got_bias.size(); ++e) {
    INFO("bias element " << e);
    CHECK(std::abs(got_bias[e] - average[bias_at + e]) <= bound[bias_at + e]);
  }
}

namespace {

std::vector<double> train_tiny(const fsdp::QuantizedCommPolicy& quantized,
                               std::optional<std::variant<bool, int>> reshard_after_forward, int steps) {
  const int n = distributed::world_size(), me = distributed::rank();
  auto model = testing::make_model(7);
  for (auto& layer : model->layers()) {
    fsdp::fully_shard(*layer, {.reshard_after_forward = reshard_after_forward, .quantized_comm = quantized});
  }
  fsdp::fully_shard(*model, {.quantized_comm = quantized});
  auto opt = testing::make_optimizer(*model);
  const int64_t local = testing::kGlobalBatch / n;
  std::vector<double> losses;
  for (int step = 0; step < steps; ++step) {
    auto [tokens, targets] = testing::token_batch(step, me * local, (me + 1) * local, testing::kSeq);
    Tensor loss = testing::lm_loss(*model, tokens, targets);
    loss.backward();
    opt->step();
    opt->zero_grad();
    Tensor global = full({1}, loss.item(), {.dtype = DType::f64});
    distributed::world_group()->all_reduce(global, mesh::ReduceOp::avg())->wait();
    losses.push_back(global.to_vector<double>()[0]);
  }
  return losses;
}

}  // namespace

TEST_CASE("quantized communication trains a tiny Transformer like exact communication", "[fsdp][quantized_comm]") {
  const int n = distributed::world_size();
  const auto world = mesh::init_device_mesh(DeviceType::cpu, {n}, {"dp"});
  const int k = ranks_per_host(world);
  const int steps = 10;
  const std::vector<double> exact = train_tiny({}, std::nullopt, steps);
  const fsdp::QuantizedCommPolicy all{.weights = true, .gradient_bits = 8, .host_size = policy_host_size()};
  const std::vector<double> quantized = train_tiny(all, std::nullopt, steps);
  // With hpZ too: backward's all-gathers stay within the host.
  const std::vector<double> zeropp = train_tiny(all, k, steps);
  const fsdp::QuantizedCommPolicy int4 = {.weights = true, .gradient_bits = 4, .host_size = policy_host_size()};
  const std::vector<double> grads_int4 = train_tiny(int4, std::nullopt, steps);
  for (int s = 0; s < steps; ++s) {
    INFO("step " << s << ": exact " << exact[s] << ", quantized " << quantized[s] << ", with hpZ " << zeropp[s]
                 << ", int4 gradients " << grads_int4[s]);
    CHECK(std::abs(quantized[s] - exact[s]) <= 5e-3 * exact[s]);
    CHECK(std::abs(zeropp[s] - exact[s]) <= 5e-3 * exact[s]);
    CHECK(std::abs(grads_int4[s] - exact[s]) <= 2e-2 * exact[s]);
  }
  CHECK(exact.back() < 0.8 * exact.front());
  // One host quantizes nothing: bit for bit; several: the losses move.
  CHECK((quantized == exact) == (k == n));
}

TEST_CASE("quantized communication refuses what it cannot do", "[fsdp][quantized_comm]") {
  const int n = distributed::world_size();
  const auto world = mesh::init_device_mesh(DeviceType::cpu, {n}, {"dp"});
  auto a = make_linear();
  CHECK_THROWS_WITH(fsdp::fully_shard(*a, {.mesh = world, .quantized_comm = {.gradient_bits = 5}}),
                    Catch::Contains("gradient_bits must be 0 (off), 8 or 4, got 5"));
  auto b = make_linear();
  CHECK_THROWS_WITH(fsdp::fully_shard(*b, {.mesh = world, .quantized_comm = {.weights = true, .block_size = 3}}),
                    Catch::Contains("block_size must be even and positive, got 3"));
  if (n >= 2) {
    auto c = make_linear();
    CHECK_THROWS_WITH(fsdp::fully_shard(*c, {.mesh = world, .quantized_comm = {.weights = true, .host_size = n + 1}}),
                      Catch::Contains("host_size " + std::to_string(n + 1) + " must divide the shard dim's"));
    // f64 has no quantized form: refused once there is more than one host.
    auto d = std::make_unique<nn::Linear>(kIn, kOut, nn::LinearOptions{.dtype = DType::f64});
    CHECK_THROWS_WITH(fsdp::fully_shard(*d, {.mesh = world, .quantized_comm = {.weights = true, .host_size = 1}}),
                      Catch::Contains("quantizes the all-gather of f32 or bf16 values"));
  }
}
