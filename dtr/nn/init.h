// Parameter initialisation, as torch.nn.init: the fills a module's constructor or
// reset_own_parameters() applies to its parameters. Each takes the nn::Parameter
// handle, writes what its slot holds (data(): for a sharded parameter, this rank's
// shard) and returns that tensor.
//
// As in PyTorch, every function runs under autograd::NoGradGuard, so it fills a
// parameter that requires grad without the caller turning grad mode off, and the
// parameter still requires grad afterwards.
//
// Random fills (uniform_, normal_, trunc_normal_, xavier_*, kaiming_*) are those of
// dtr/tensor/random.h applied at the parameter's slice of the global parameter
// (Parameter::logical_slice()). A shard of a sharded parameter (fully_shard on a
// meta model, then to_empty and reset_parameters) so gets exactly the values the
// unsharded parameter would, whatever the world size; every rank must make the same
// sequence of fills. The fans of xavier_* and kaiming_* (calculate_fan_in_and_fan_out)
// come from the parameter's global shape, never the local shard's, so a shard's
// bound and standard deviation are the unsharded parameter's. The constant fills
// (zeros_, ones_, constant_) draw nothing from the generator.
#pragma once

#include "dtr/nn/parameter.h"
#include "dtr/tensor/random.h"

#include <cstdint>
#include <optional>

namespace dtr::nn::init {

// Which fan kaiming_* scale by: fan_in keeps the variance of the forward pass's
// activations, fan_out that of the backward pass's gradients.
enum class FanMode { fan_in, fan_out };

// The nonlinearities calculate_gain knows (torch.nn.init.calculate_gain's names).
enum class Nonlinearity {
  linear,
  conv1d,
  conv2d,
  conv3d,
  conv_transpose1d,
  conv_transpose2d,
  conv_transpose3d,
  sigmoid,
  tanh,
  relu,
  leaky_relu,
  selu,
};

// The recommended gain for a nonlinearity, PyTorch's table: 1 for linear, the conv
// layers and sigmoid; 5/3 for tanh; sqrt(2) for relu; sqrt(2 / (1 + slope^2)) for
// leaky_relu, whose negative slope is `param` (0.01 when not given); 3/4 for selu.
// `param` is read only for leaky_relu.
double calculate_gain(Nonlinearity nonlinearity, std::optional<double> param = std::nullopt);

// torch.nn.init._calculate_fan_in_and_fan_out of the parameter's global shape:
// fan_in = size(1) * receptive field, fan_out = size(0) * receptive field, where the
// receptive field is the product of the dims after the first two (1 for a matrix).
// A parameter of fewer than 2 dims has no fans: an error naming its shape.
struct Fans {
  int64_t fan_in = 0;
  int64_t fan_out = 0;
};
Fans calculate_fan_in_and_fan_out(const Parameter& p);

// Constant fills.
const Tensor& zeros_(const Parameter& p);
const Tensor& ones_(const Parameter& p);
const Tensor& constant_(const Parameter& p, double value);

// Uniform on [lo, hi).
const Tensor& uniform_(const Parameter& p, double lo = 0, double hi = 1, Generator* gen = nullptr);
// Normal(mean, std).
const Tensor& normal_(const Parameter& p, double mean = 0, double std = 1, Generator* gen = nullptr);
// Normal(mean, std) truncated to [a, b].
const Tensor& trunc_normal_(const Parameter& p, double mean = 0, double std = 1, double a = -2, double b = 2,
                            Generator* gen = nullptr);

// Glorot initialisation: uniform on [-bound, bound) with
// bound = gain * sqrt(6 / (fan_in + fan_out)), or normal with mean 0 and
// std = gain * sqrt(2 / (fan_in + fan_out)). A parameter of fewer than 2 dims is
// an error, as in PyTorch; one of no elements is then left as it is (its fans may be 0).
const Tensor& xavier_uniform_(const Parameter& p, double gain = 1, Generator* gen = nullptr);
const Tensor& xavier_normal_(const Parameter& p, double gain = 1, Generator* gen = nullptr);

// He initialisation: std = calculate_gain(nonlinearity, a) / sqrt(fan), fan being
// fan_in or fan_out by `mode`; `a` is leaky_relu's negative slope. kaiming_uniform_
// draws uniform on [-bound, bound) with bound = sqrt(3) * std, kaiming_normal_
// normal with mean 0 and that std. A parameter of no elements is left as it is,
// whatever its dims (PyTorch warns and does nothing).
const Tensor& kaiming_uniform_(const Parameter& p, double a = 0, FanMode mode = FanMode::fan_in,
                               Nonlinearity nonlinearity = Nonlinearity::leaky_relu, Generator* gen = nullptr);
const Tensor& kaiming_normal_(const Parameter& p, double a = 0, FanMode mode = FanMode::fan_in,
                              Nonlinearity nonlinearity = Nonlinearity::leaky_relu, Generator* gen = nullptr);

}  // namespace dtr::nn::init
