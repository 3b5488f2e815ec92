#include "dtr/nn/optim/fused_adamw.h"

#include <utility>

namespace dtr::nn::optim {

namespace {
AdamWOptions fused(AdamWOptions options) {
  options.fused = true;
  return options;
}
}  // namespace

FusedAdamW::FusedAdamW(OptimizerParams params, AdamWOptions options)
    : AdamW({ParamGroup{std::move(params)}}, fused(std::move(options)), "FusedAdamW") {}

FusedAdamW::FusedAdamW(std::vector<ParamGroup> groups, AdamWOptions options)
    : AdamW(std::move(groups), fused(std::move(options)), "FusedAdamW") {}

}  // namespace dtr::nn::optim
