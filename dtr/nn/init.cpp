#include "dtr/nn/init.h"

namespace dtr::nn::init {

const Tensor& uniform_(const Parameter& p, double lo, double hi, Generator* gen) {
  return dtr::uniform_(p.data(), lo, hi, gen, p.logical_slice());
}

const Tensor& normal_(const Parameter& p, double mean, double std, Generator* gen) {
  return dtr::normal_(p.data(), mean, std, gen, p.logical_slice());
}

const Tensor& trunc_normal_(const Parameter& p, double mean, double std, double a, double b, Generator* gen) {
  return dtr::trunc_normal_(p.data(), mean, std, a, b, gen, p.logical_slice());
}

}  // namespace dtr::nn::init
