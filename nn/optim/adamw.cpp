#include "nn/optim/adamw.h"

#include <utility>

namespace dtr::nn::optim {

AdamW::AdamW(OptimizerParams params, const AdamWOptions& options)
    : Adam(std::move(params),
           AdamOptions{.lr = options.lr,
                       .beta1 = options.beta1,
                       .beta2 = options.beta2,
                       .eps = options.eps,
                       .weight_decay = options.weight_decay},
           "AdamW", true) {}

}  // namespace dtr::nn::optim
