// nn::init in one process, the habits PyTorch users bring: the fills called in a
// module's constructor on parameters that require grad (no NoGradGuard: they run
// under no-grad themselves), the constant fills' exact values, calculate_gain
// against hand-computed numbers, and xavier_* / kaiming_* on large parameters,
// whose sample bounds and standard deviations are checked against the formulas,
// worked out here by hand from the shapes (fan_in = size(1) * receptive field,
// fan_out = size(0) * receptive field). Exactness on shards is checked at 1-4
// ranks in tests/fsdp/init_shard_exact_test.cpp.
#include "dtr/nn/init.h"
#include "dtr/nn/module.h"
#include "dtr/nn/parameter.h"
#include "dtr/tensor/autograd/grad_mode.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/random.h"

#include "tests/support/values.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

using namespace dtr;
using dtr::testing::values_of;

namespace {

// A module whose constructor fills each of its parameters with another nn::init
// function, the way a PyTorch module's __init__ does: no NoGradGuard anywhere.
class EveryInit : public nn::Module {
 public:
  EveryInit() {
    nn::init::zeros_(zeros);
    nn::init::ones_(ones);
    nn::init::constant_(constant, 0.25);
    nn::init::uniform_(uniform, -0.5, 0.5);
    nn::init::normal_(normal, 0.0, 0.02);
    nn::init::trunc_normal_(trunc_normal, 0.0, 0.02, -0.04, 0.04);
    nn::init::xavier_uniform_(xavier_uniform);
    nn::init::xavier_normal_(xavier_normal);
    nn::init::kaiming_uniform_(kaiming_uniform, std::sqrt(5.0));
    nn::init::kaiming_normal_(kaiming_normal, 0.0, nn::init::FanMode::fan_out, nn::init::Nonlinearity::relu);
    grad_mode_in_constructor = autograd::is_grad_enabled();
  }
  std::string type_name() const override { return "EveryInit"; }

  nn::Parameter zeros = register_parameter("zeros", empty({4, 3}));
  nn::Parameter ones = register_parameter("ones", empty({4, 3}));
  nn::Parameter constant = register_parameter("constant", empty({5}));
  nn::Parameter uniform = register_parameter("uniform", empty({8, 6}));
  nn::Parameter normal = register_parameter("normal", empty({8, 6}));
  nn::Parameter trunc_normal = register_parameter("trunc_normal", empty({8, 6}));
  nn::Parameter xavier_uniform = register_parameter("xavier_uniform", empty({8, 6}));
  nn::Parameter xavier_normal = register_parameter("xavier_normal", empty({8, 6}));
  nn::Parameter kaiming_uniform = register_parameter("kaiming_uniform", empty({8, 6}));
  nn::Parameter kaiming_normal = register_parameter("kaiming_normal", empty({8, 2, 3}));
  bool grad_mode_in_constructor = false;
};

// Sample statistics of a tensor's values, in double.
struct SampleStats {
  double mean = 0, std = 0, max_abs = 0;
};

SampleStats sample_stats_of(const Tensor& t) {
  const std::vector<double> v = values_of(t);
  SampleStats s;
  for (double x : v) s.mean += x;
  s.mean /= static_cast<double>(v.size());
  double square_sum = 0;
  for (double x : v) {
    square_sum += (x - s.mean) * (x - s.mean);
    s.max_abs = std::max(s.max_abs, std::abs(x));
  }
  s.std = std::sqrt(square_sum / static_cast<double>(v.size() - 1));
  return s;
}

// Uniform on [-bound, bound): every value within the bound (f32 rounding allowed),
// the largest magnitude close to it, the sample std that of the uniform
// distribution, bound / sqrt(3), within 3%, the mean near 0.
void check_uniform_sample(const Tensor& t, double bound) {
  INFO("bound " << bound);
  const SampleStats s = sample_stats_of(t);
  CHECK(s.max_abs <= bound * (1 + 1e-6));
  CHECK(s.max_abs >= 0.99 * bound);
  CHECK(s.std == Approx(bound / std::sqrt(3.0)).epsilon(0.03));
  CHECK(std::abs(s.mean) < 0.05 * bound);
}

// Normal with mean 0: the sample std within 3% of `std`, the mean near 0.
void check_normal_sample(const Tensor& t, double std) {
  INFO("std " << std);
  const SampleStats s = sample_stats_of(t);
  CHECK(s.std == Approx(std).epsilon(0.03));
  CHECK(std::abs(s.mean) < 0.05 * std);
}

// A standalone parameter of `shape` in f32, values 7 (so an unfilled one shows).
nn::Parameter parameter_of_sevens(const Shape& shape) { return nn::Parameter(full(shape, 7.0)); }

}  // namespace

TEST_CASE("nn::init fills parameters that require grad in a module's constructor without NoGradGuard",
          "[nn][init]") {
  REQUIRE(autograd::is_grad_enabled());
  manual_seed(5);
  EveryInit module;  // throws if any fill writes in place under grad mode
  CHECK(module.grad_mode_in_constructor);  // each fill put grad mode back
  CHECK(autograd::is_grad_enabled());
  const auto params = module.named_parameters();
  REQUIRE(params.size() == 10);
  for (const auto& [name, p] : params) {
    INFO(name);
    CHECK(p.data().requires_grad());
    CHECK(p.data().is_leaf());
    if (name == "zeros" || name == "ones" || name == "constant") continue;
    const std::vector<double> v = values_of(p.data());
    CHECK(std::any_of(v.begin(), v.end(), [](double x) { return x != 0; }));  // filled
  }
  CHECK(values_of(module.zeros.data()) == std::vector<double>(12, 0.0));
  CHECK(values_of(module.ones.data()) == std::vector<double>(12, 1.0));
  CHECK(values_of(module.constant.data()) == std::vector<double>(5, 0.25));

  // The independent reference for "without NoGradGuard": the raw fill of
  // dtr/tensor/random.h on the same parameter, outside nn::init, is refused.
  CHECK_THROWS_WITH(uniform_(module.uniform.data(), -1.0, 1.0),
                    Catch::Contains("in-place write to a tensor that requires grad"));
}

TEST_CASE("nn::init under the caller's NoGradGuard leaves grad mode off", "[nn][init]") {
  NoGradGuard no_grad;
  nn::Parameter p = parameter_of_sevens({3, 4});
  nn::init::xavier_uniform_(p);
  nn::init::zeros_(p);
  CHECK_FALSE(autograd::is_grad_enabled());
}

TEST_CASE("zeros_, ones_ and constant_ write exactly the value in every dtype, drawing nothing", "[nn][init]") {
  const uint64_t offset = default_generator().offset();
  for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    INFO(std::string(dtype_name(dtype)));
    nn::Parameter p(full({3, 5}, 7.0, {.dtype = dtype}).requires_grad_());
    nn::init::zeros_(p);
    CHECK(values_of(p.data()) == std::vector<double>(15, 0.0));
    nn::init::ones_(p);
    CHECK(values_of(p.data()) == std::vector<double>(15, 1.0));
    nn::init::constant_(p, -2.5);  // exact in every floating dtype
    CHECK(values_of(p.data()) == std::vector<double>(15, -2.5));
    CHECK(p.data().dtype() == dtype);
    CHECK(p.data().requires_grad());
  }
  // 0.1 is not exact in f32: the f32 nearest to it, as a float assignment would give.
  nn::Parameter p(full({2, 2}, 7.0));
  const Tensor& same = nn::init::constant_(p, 0.1);
  CHECK(values_of(p.data()) == std::vector<double>(4, static_cast<double>(0.1f)));
  CHECK(same.raw_data() == p.data().raw_data());  // returns the parameter's own tensor
  // On a strided view (every other column of a 3x4 matrix) only the view's elements change.
  Tensor base = full({3, 4}, 7.0);
  nn::Parameter strided(base.slice(1, 0, 4, 2));
  nn::init::ones_(strided);
  CHECK(values_of(base) == std::vector<double>{1, 7, 1, 7, 1, 7, 1, 7, 1, 7, 1, 7});
  CHECK(default_generator().offset() == offset);
}

TEST_CASE("calculate_gain follows PyTorch's table", "[nn][init]") {
  using nn::init::calculate_gain;
  using NL = nn::init::Nonlinearity;
  for (NL n : {NL::linear, NL::conv1d, NL::conv2d, NL::conv3d, NL::conv_transpose1d, NL::conv_transpose2d,
               NL::conv_transpose3d, NL::sigmoid}) {
    CHECK(calculate_gain(n) == 1.0);
    CHECK(calculate_gain(n, 0.7) == 1.0);  // param is read only for leaky_relu
  }
  // Hand-computed: 5/3; sqrt(2); sqrt(2 / (1 + 0.01^2)) = sqrt(2 / 1.0001);
  // sqrt(2 / (1 + 0.2^2)) = sqrt(2 / 1.04); sqrt(2 / (1 + 5)) = sqrt(1/3); 3/4.
  CHECK(calculate_gain(NL::tanh) == Approx(1.6666666666666667).epsilon(1e-15));
  CHECK(calculate_gain(NL::relu) == Approx(1.4142135623730951).epsilon(1e-15));
  CHECK(calculate_gain(NL::leaky_relu) == Approx(1.4141428569978354).epsilon(1e-15));
  CHECK(calculate_gain(NL::leaky_relu, 0.2) == Approx(1.3867504905630728).epsilon(1e-15));
  CHECK(calculate_gain(NL::leaky_relu, 0.0) == Approx(1.4142135623730951).epsilon(1e-15));
  CHECK(calculate_gain(NL::leaky_relu, std::sqrt(5.0)) == Approx(0.5773502691896258).epsilon(1e-15));
  CHECK(calculate_gain(NL::selu) == 0.75);
}

TEST_CASE("calculate_fan_in_and_fan_out: size(1) and size(0) times the receptive field", "[nn][init]") {
  auto fans = nn::init::calculate_fan_in_and_fan_out(parameter_of_sevens({256, 512}));
  CHECK(fans.fan_in == 512);
  CHECK(fans.fan_out == 256);
  fans = nn::init::calculate_fan_in_and_fan_out(parameter_of_sevens({64, 32, 3, 3}));
  CHECK(fans.fan_in == 32 * 9);
  CHECK(fans.fan_out == 64 * 9);
  fans = nn::init::calculate_fan_in_and_fan_out(parameter_of_sevens({4, 6, 5}));
  CHECK(fans.fan_in == 30);
  CHECK(fans.fan_out == 20);
}

TEST_CASE("xavier_uniform_ and xavier_normal_ sample the Glorot bound and std of a 2-D and a 4-D weight",
          "[nn][init]") {
  manual_seed(21);
  // 256x512: fan_in 512, fan_out 256.
  nn::Parameter w = parameter_of_sevens({256, 512});
  nn::init::xavier_uniform_(w);
  check_uniform_sample(w.data(), std::sqrt(6.0 / (512 + 256)));
  nn::init::xavier_uniform_(w, 2.0);
  check_uniform_sample(w.data(), 2.0 * std::sqrt(6.0 / (512 + 256)));
  nn::init::xavier_normal_(w);
  check_normal_sample(w.data(), std::sqrt(2.0 / (512 + 256)));
  nn::init::xavier_normal_(w, 5.0 / 3.0);
  check_normal_sample(w.data(), 5.0 / 3.0 * std::sqrt(2.0 / (512 + 256)));

  // 64x32x3x3: fan_in 32 * 9 = 288, fan_out 64 * 9 = 576.
  nn::Parameter conv = parameter_of_sevens({64, 32, 3, 3});
  nn::init::xavier_uniform_(conv);
  check_uniform_sample(conv.data(), std::sqrt(6.0 / (288 + 576)));
  nn::init::xavier_normal_(conv);
  check_normal_sample(conv.data(), std::sqrt(2.0 / (288 + 576)));
}

TEST_CASE("kaiming_uniform_ and kaiming_normal_ sample the He bound and std, by fan_in or fan_out",
          "[nn][init]") {
  using nn::init::FanMode;
  using NL = nn::init::Nonlinearity;
  manual_seed(22);
  nn::Parameter w = parameter_of_sevens({256, 512});  // fan_in 512, fan_out 256
  // Defaults: a = 0, fan_in, leaky_relu: gain sqrt(2), std sqrt(2 / 512) = 1/16.
  nn::init::kaiming_uniform_(w);
  check_uniform_sample(w.data(), std::sqrt(3.0) / 16.0);
  nn::init::kaiming_normal_(w);
  check_normal_sample(w.data(), 1.0 / 16.0);
  // a = sqrt(5) (nn.Linear's): gain sqrt(1/3), so the bound is 1 / sqrt(fan_in).
  nn::init::kaiming_uniform_(w, std::sqrt(5.0));
  check_uniform_sample(w.data(), 1.0 / std::sqrt(512.0));
  // fan_out: size(0) = 256, relu's gain sqrt(2): std sqrt(2 / 256).
  nn::init::kaiming_normal_(w, 0.0, FanMode::fan_out, NL::relu);
  check_normal_sample(w.data(), std::sqrt(2.0 / 256));
  nn::init::kaiming_uniform_(w, 0.0, FanMode::fan_out, NL::relu);
  check_uniform_sample(w.data(), std::sqrt(3.0) * std::sqrt(2.0 / 256));
  // tanh, fan_in: std (5/3) / sqrt(512).
  nn::init::kaiming_normal_(w, 0.0, FanMode::fan_in, NL::tanh);
  check_normal_sample(w.data(), 5.0 / 3.0 / std::sqrt(512.0));

  nn::Parameter conv = parameter_of_sevens({64, 32, 3, 3});  // fan_in 288, fan_out 576
  nn::init::kaiming_normal_(conv);
  check_normal_sample(conv.data(), std::sqrt(2.0 / 288));
  nn::init::kaiming_normal_(conv, 0.0, FanMode::fan_out);
  check_normal_sample(conv.data(), std::sqrt(2.0 / 576));
  nn::init::kaiming_uniform_(conv, 0.0, FanMode::fan_out, NL::relu);
  check_uniform_sample(conv.data(), std::sqrt(3.0) * std::sqrt(2.0 / 576));
  // leaky_relu with a = 0.2: gain sqrt(2 / 1.04).
  nn::init::kaiming_uniform_(conv, 0.2);
  check_uniform_sample(conv.data(), std::sqrt(3.0) * std::sqrt(2.0 / 1.04) / std::sqrt(288.0));
}

TEST_CASE("the xavier and kaiming fills refuse a parameter of fewer than 2 dims, naming its shape", "[nn][init]") {
  nn::Parameter bias = parameter_of_sevens({512});
  using Catch::Contains;
  CHECK_THROWS_WITH(nn::init::xavier_uniform_(bias),
                    Contains("xavier_uniform_") && Contains("fewer than 2 dims") && Contains("[512]"));
  CHECK_THROWS_WITH(nn::init::xavier_normal_(bias), Contains("xavier_normal_") && Contains("[512]"));
  CHECK_THROWS_WITH(nn::init::kaiming_uniform_(bias), Contains("kaiming_uniform_") && Contains("[512]"));
  CHECK_THROWS_WITH(nn::init::kaiming_normal_(bias, 0.0, nn::init::FanMode::fan_out),
                    Contains("kaiming_normal_") && Contains("[512]"));
  CHECK_THROWS_WITH(nn::init::calculate_fan_in_and_fan_out(bias),
                    Contains("fewer than 2 dims") && Contains("[512]"));
  CHECK_THROWS_WITH(nn::init::xavier_uniform_(nn::Parameter(scalar_tensor(1.0, DType::f32))),
                    Contains("fewer than 2 dims") && Contains("[]"));
  CHECK(values_of(bias.data()) == std::vector<double>(512, 7.0));  // untouched
  CHECK(autograd::is_grad_enabled());
}

TEST_CASE("the xavier and kaiming fills leave a parameter of no elements as it is", "[nn][init]") {
  const uint64_t offset = default_generator().offset();
  nn::Parameter empty_rows = parameter_of_sevens({0, 8});
  nn::init::xavier_uniform_(empty_rows);
  nn::init::kaiming_normal_(empty_rows, 0.0, nn::init::FanMode::fan_out);  // fan_out 0
  nn::init::kaiming_uniform_(parameter_of_sevens({0}));  // as PyTorch: no elements, no error
  CHECK(default_generator().offset() == offset);
}
