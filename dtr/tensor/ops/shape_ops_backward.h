// The backward node of cat (dtr/tensor/ops/shape_ops.h), internal to tensor/ops:
// it narrows the output gradient back into one slice per operand.
#pragma once

#include "dtr/tensor/autograd/node.h"

#include <cstdint>
#include <string>
#include <vector>

namespace dtr::ops {

// Inputs (edges): the operands of cat, in order.
class CatBackward final : public autograd::Node {
 public:
  // sizes: each operand's size along `dim`.
  CatBackward(int64_t dim, std::vector<int64_t> sizes) : dim_(dim), sizes_(std::move(sizes)) {}
  std::string name() const override { return "CatBackward"; }
  std::vector<Tensor> apply(std::vector<Tensor> grads) override;

 private:
  int64_t dim_;
  std::vector<int64_t> sizes_;
};

}  // namespace dtr::ops
