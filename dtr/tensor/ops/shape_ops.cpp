#include "dtr/tensor/ops/shape_ops.h"

#include "dtr/tensor/autograd/function.h"
#include "dtr/tensor/autograd/grad_mode.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/op_checks.h"
#include "dtr/tensor/ops/shape_ops_backward.h"

#include <algorithm>
#include <memory>
#include <string_view>

namespace dtr {

namespace {

// Every operand is defined, with the first one's dtype, device and rank.
void check_operands(std::string_view op, const std::vector<Tensor>& tensors) {
  DTR_CHECK(!tensors.empty(), "{}: expected a non-empty list of tensors", op);
  for (size_t i = 0; i < tensors.size(); ++i) {
    DTR_CHECK(tensors[i].defined(), "{}: tensor {} is undefined", op, i);
  }
  const Tensor& first = tensors[0];
  ops::check_device(op, {&first}, ops::Kernels::cpu_and_cuda);  // copies: Tensor::copy_
  for (size_t i = 1; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    DTR_CHECK(t.dtype() == first.dtype(), "{}: tensor {} has dtype {}, but tensor 0 has dtype {}",
              op, i, t.dtype(), first.dtype());
    DTR_CHECK(t.device() == first.device(), "{}: tensor {} is on {}, but tensor 0 is on {}", op, i,
              t.device(), first.device());
    DTR_CHECK(t.dim() == first.dim(),
              "{}: tensor {} has {} dims (shape {}), but tensor 0 has {} (shape {})", op, i,
              t.dim(), shape_str(t.sizes()), first.dim(), shape_str(first.sizes()));
  }
}

}  // namespace

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  check_operands("cat", tensors);
  const Tensor& first = tensors[0];
  DTR_CHECK(first.dim() >= 1, "cat: cannot concatenate 0-d tensors (unsqueeze them, or use stack)");
  const int64_t d = first.wrap_dim(dim, "cat");
  Shape out_shape = first.sizes();
  out_shape[d] = 0;
  std::vector<int64_t> sizes;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    for (int64_t k = 0; k < t.dim(); ++k) {
      DTR_CHECK(k == d || t.size(k) == first.size(k),
                "cat: tensor {} has shape {}, but tensor 0 has shape {}: they must match in "
                "every dim except dim {}",
                i, shape_str(t.sizes()), shape_str(first.sizes()), d);
    }
    sizes.push_back(t.size(d));
    out_shape[d] += t.size(d);
  }
  Tensor out = empty(out_shape, {.dtype = first.dtype(), .device = first.device()});
  if (!first.device().is_meta()) {
    NoGradGuard no_grad;  // the copies are bookkeeping; CatBackward is the op's backward
    int64_t start = 0;
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (sizes[i] > 0) out.narrow(d, start, sizes[i]).copy_(tensors[i]);
      start += sizes[i];
    }
  }
  bool record = false;
  if (autograd::is_grad_enabled() && is_floating(first.dtype())) {
    for (const Tensor& t : tensors) record = record || t.requires_grad();
  }
  if (record) {
    auto node = std::make_shared<ops::CatBackward>(d, std::move(sizes));
    for (const Tensor& t : tensors) node->next_edges().push_back(autograd::gradient_edge(t));
    autograd::set_history(node, {}, {&out});
  }
  return out;
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  check_operands("stack", tensors);
  const Tensor& first = tensors[0];
  const int64_t n = first.dim();
  DTR_CHECK(dim >= -(n + 1) && dim <= n,
            "stack: dim {} is out of range for {}-D tensors (expected -{} <= dim <= {})", dim, n,
            n + 1, n);
  const int64_t d = dim < 0 ? dim + n + 1 : dim;
  std::vector<Tensor> pieces;
  pieces.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    DTR_CHECK(tensors[i].sizes() == first.sizes(),
              "stack: tensor {} has shape {}, but tensor 0 has shape {}: all must be equal", i,
              shape_str(tensors[i].sizes()), shape_str(first.sizes()));
    pieces.push_back(tensors[i].unsqueeze(d));
  }
  return cat(pieces, d);
}

std::vector<Tensor> split(const Tensor& t, int64_t split_size, int64_t dim) {
  DTR_CHECK(t.defined(), "split: tensor is undefined");
  DTR_CHECK(t.dim() >= 1, "split: cannot split a 0-d tensor");
  DTR_CHECK(split_size > 0, "split: split_size must be positive, got {}", split_size);
  const int64_t d = t.wrap_dim(dim, "split");
  const int64_t size = t.size(d);
  std::vector<Tensor> pieces;
  if (size == 0) {
    pieces.push_back(t.narrow(d, 0, 0));
    return pieces;
  }
  for (int64_t start = 0; start < size; start += split_size) {
    pieces.push_back(t.narrow(d, start, std::min(split_size, size - start)));
  }
  return pieces;
}

}  // namespace dtr
