#include "dtr/nn/init.h"

#include "dtr/base/error.h"
#include "dtr/tensor/autograd/grad_mode.h"

#include <cmath>
#include <string_view>

namespace dtr::nn::init {

namespace {

// The fans of p's global shape; `op` names the caller in the error.
Fans fans_of(std::string_view op, const Parameter& p) {
  const Shape shape = p.global_shape();
  DTR_CHECK(shape.size() >= 2,
            "{}: fan_in and fan_out can not be computed for a parameter of fewer than 2 dims, got "
            "global shape {}",
            op, shape_str(shape));
  int64_t receptive_field = 1;
  for (size_t d = 2; d < shape.size(); ++d) receptive_field *= shape[d];
  return {.fan_in = shape[1] * receptive_field, .fan_out = shape[0] * receptive_field};
}

// kaiming_*'s standard deviation: gain / sqrt(fan).
double kaiming_std(std::string_view op, const Parameter& p, double a, FanMode mode, Nonlinearity nonlinearity) {
  const Fans fans = fans_of(op, p);
  const int64_t fan = mode == FanMode::fan_in ? fans.fan_in : fans.fan_out;
  return calculate_gain(nonlinearity, a) / std::sqrt(static_cast<double>(fan));
}

}  // namespace

double calculate_gain(Nonlinearity nonlinearity, std::optional<double> param) {
  switch (nonlinearity) {
    case Nonlinearity::linear:
    case Nonlinearity::conv1d:
    case Nonlinearity::conv2d:
    case Nonlinearity::conv3d:
    case Nonlinearity::conv_transpose1d:
    case Nonlinearity::conv_transpose2d:
    case Nonlinearity::conv_transpose3d:
    case Nonlinearity::sigmoid:
      return 1.0;
    case Nonlinearity::tanh:
      return 5.0 / 3.0;
    case Nonlinearity::relu:
      return std::sqrt(2.0);
    case Nonlinearity::leaky_relu: {
      const double slope = param.value_or(0.01);
      return std::sqrt(2.0 / (1.0 + slope * slope));
    }
    case Nonlinearity::selu:
      return 3.0 / 4.0;
  }
  DTR_FAIL("calculate_gain: unknown nonlinearity {}", static_cast<int>(nonlinearity));
}

Fans calculate_fan_in_and_fan_out(const Parameter& p) { return fans_of("calculate_fan_in_and_fan_out", p); }

const Tensor& zeros_(const Parameter& p) {
  NoGradGuard no_grad;
  return p.data().zero_();
}

const Tensor& ones_(const Parameter& p) {
  NoGradGuard no_grad;
  return p.data().fill_(1.0);
}

const Tensor& constant_(const Parameter& p, double value) {
  NoGradGuard no_grad;
  return p.data().fill_(value);
}

const Tensor& uniform_(const Parameter& p, double lo, double hi, Generator* gen) {
  NoGradGuard no_grad;
  return dtr::uniform_(p.data(), lo, hi, gen, p.logical_slice());
}

const Tensor& normal_(const Parameter& p, double mean, double std, Generator* gen) {
  NoGradGuard no_grad;
  return dtr::normal_(p.data(), mean, std, gen, p.logical_slice());
}

const Tensor& trunc_normal_(const Parameter& p, double mean, double std, double a, double b, Generator* gen) {
  NoGradGuard no_grad;
  return dtr::trunc_normal_(p.data(), mean, std, a, b, gen, p.logical_slice());
}

const Tensor& xavier_uniform_(const Parameter& p, double gain, Generator* gen) {
  const Fans fans = fans_of("xavier_uniform_", p);
  if (p.global_numel() == 0) return p.data();
  // gain * sqrt(6 / (fan_in + fan_out)), computed as PyTorch does (sqrt(3) * std),
  // so the bound is PyTorch's to the last bit.
  const double std = gain * std::sqrt(2.0 / static_cast<double>(fans.fan_in + fans.fan_out));
  const double bound = std::sqrt(3.0) * std;
  return uniform_(p, -bound, bound, gen);
}

const Tensor& xavier_normal_(const Parameter& p, double gain, Generator* gen) {
  const Fans fans = fans_of("xavier_normal_", p);
  if (p.global_numel() == 0) return p.data();
  const double std = gain * std::sqrt(2.0 / static_cast<double>(fans.fan_in + fans.fan_out));
  return normal_(p, 0.0, std, gen);
}

const Tensor& kaiming_uniform_(const Parameter& p, double a, FanMode mode, Nonlinearity nonlinearity,
                               Generator* gen) {
  if (p.global_numel() == 0) return p.data();
  const double bound = std::sqrt(3.0) * kaiming_std("kaiming_uniform_", p, a, mode, nonlinearity);
  return uniform_(p, -bound, bound, gen);
}

const Tensor& kaiming_normal_(const Parameter& p, double a, FanMode mode, Nonlinearity nonlinearity,
                              Generator* gen) {
  if (p.global_numel() == 0) return p.data();
  const double std = kaiming_std("kaiming_normal_", p, a, mode, nonlinearity);
  return normal_(p, 0.0, std, gen);
}

}  // namespace dtr::nn::init
