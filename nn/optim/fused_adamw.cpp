#include "nn/optim/fused_adamw.h"

#include <utility>

namespace dtr::nn::optim {

namespace {
AdamWOptions fused(AdamWOptions options) {
  options.fused = true;
  return options;
}
}  // namespace

FusedAdamW::FusedAdamW(OptimizerParams params, AdamWOptions options)
    : AdamW(std::move(params), fused(std::move(options)), "FusedAdamW") {}

}  // namespace dtr::nn::optim
