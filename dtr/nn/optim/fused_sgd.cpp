#include "dtr/nn/optim/fused_sgd.h"

#include <utility>

namespace dtr::nn::optim {

namespace {
SGDOptions fused(SGDOptions options) {
  options.fused = true;
  return options;
}
}  // namespace

FusedSGD::FusedSGD(OptimizerParams params, SGDOptions options)
    : SGD({ParamGroup{std::move(params)}}, fused(std::move(options)), "FusedSGD") {}

FusedSGD::FusedSGD(std::vector<ParamGroup> groups, SGDOptions options)
    : SGD(std::move(groups), fused(std::move(options)), "FusedSGD") {}

}  // namespace dtr::nn::optim
