// Random initialisation of parameters, as torch.nn.init: the fills of
// dtr/tensor/random.h applied to what a parameter's slot holds, at the slice of the
// global parameter it holds. A shard of a sharded parameter (fully_shard on a meta
// model, then to_empty and reset_parameters) so gets exactly the values the
// unsharded parameter would, whatever the world size; every rank must make the
// same sequence of fills.
#pragma once

#include "dtr/nn/parameter.h"
#include "dtr/tensor/random.h"

namespace dtr::nn::init {

const Tensor& uniform_(const Parameter& p, double lo = 0, double hi = 1, Generator* gen = nullptr);
const Tensor& normal_(const Parameter& p, double mean = 0, double std = 1, Generator* gen = nullptr);
const Tensor& trunc_normal_(const Parameter& p, double mean = 0, double std = 1, double a = -2, double b = 2,
                            Generator* gen = nullptr);

}  // namespace dtr::nn::init
