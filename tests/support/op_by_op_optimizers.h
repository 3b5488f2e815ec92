// AdamW and SGD op by op (.fused = false): the references that the fused
// multi-tensor kernels, which AdamW and SGD run by default, are checked against.
#pragma once

#include "dtr/nn/optim/adamw.h"
#include "dtr/nn/optim/sgd.h"

#include <utility>

namespace dtr::testing::optim {

struct OpByOpAdamW : nn::optim::AdamW {
  OpByOpAdamW(nn::optim::OptimizerParams params, nn::optim::AdamWOptions options)
      : AdamW(std::move(params), (options.fused = false, options)) {}
};

struct OpByOpSGD : nn::optim::SGD {
  OpByOpSGD(nn::optim::OptimizerParams params, nn::optim::SGDOptions options)
      : SGD(std::move(params), (options.fused = false, options)) {}
};

}  // namespace dtr::testing::optim
