// Activation modules (ReLU, GELU, SiLU) and Dropout: parameter-free wrappers of
// the ops in tensor/ops, so they can sit in a Sequential.
#pragma once

#include "dtr/nn/module.h"
#include "dtr/tensor/ops/elementwise.h"

namespace dtr::nn {

class ReLU : public Module {
 public:
  std::string type_name() const override { return "ReLU"; }
  Tensor forward(const Tensor& input) override { return relu(input); }
};

class GELU : public Module {
 public:
  explicit GELU(GeluApproximation approximate = GeluApproximation::none) : approximate_(approximate) {}
  std::string type_name() const override { return "GELU"; }
  Tensor forward(const Tensor& input) override { return gelu(input, approximate_); }

 private:
  GeluApproximation approximate_;
};

class SiLU : public Module {
 public:
  std::string type_name() const override { return "SiLU"; }
  Tensor forward(const Tensor& input) override { return silu(input); }
};

}  // namespace dtr::nn
