#include "nn/optim/fused_sgd.h"

#include <utility>

namespace dtr::nn::optim {

namespace {
SGDOptions fused(SGDOptions options) {
  options.fused = true;
  return options;
}
}  // namespace

FusedSGD::FusedSGD(OptimizerParams params, SGDOptions options)
    : SGD(std::move(params), fused(std::move(options)), "FusedSGD") {}

}  // namespace dtr::nn::optim
