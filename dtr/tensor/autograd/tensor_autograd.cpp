// The autograd methods of Tensor (declared in dtr/tensor/tensor.h).
#include "dtr/tensor/autograd/accumulate_grad.h"
#include "dtr/tensor/autograd/autograd_meta.h"
#include "dtr/tensor/autograd/engine.h"
#include "dtr/tensor/ops/elementwise.h"
#include "dtr/tensor/tensor.h"

namespace dtr {

using autograd::AutogradMeta;

bool Tensor::requires_grad() const {
  AutogradMeta* meta = autograd_meta();
  return meta != nullptr && meta->requires_grad;
}

const Tensor& Tensor::requires_grad_(bool on) const {
  AutogradMeta* meta = autograd_meta();
  DTR_CHECK(meta == nullptr || !meta->grad_fn,
            "requires_grad_: only leaf tensors can change requires_grad (this one was computed by "
            "{}); use detach() for a leaf copy",
            meta ? meta->grad_fn->name() : "");
  DTR_CHECK(!on || is_floating(dtype()),
            "requires_grad_: only floating tensors can require gradients, got dtype {}", dtype());
  if (on || meta != nullptr) ensure_autograd_meta().requires_grad = on;
  return *this;
}

bool Tensor::is_leaf() const {
  AutogradMeta* meta = autograd_meta();
  return meta == nullptr || !meta->grad_fn;
}

const Tensor& Tensor::grad() const {
  static const Tensor kUndefined;
  AutogradMeta* meta = autograd_meta();
  return meta ? meta->grad : kUndefined;
}

void Tensor::set_grad(const Tensor& grad) const {
  if (grad.defined()) {
    DTR_CHECK(grad.sizes() == sizes() && grad.dtype() == dtype() && grad.device() == device(),
              "set_grad: gradient of shape {} {} on {} for a tensor of shape {} {} on {}",
              shape_str(grad.sizes()), grad.dtype(), grad.device(), shape_str(sizes()), dtype(),
              device());
  }
  if (grad.defined() || autograd_meta() != nullptr) ensure_autograd_meta().grad = grad;
}

std::shared_ptr<autograd::Node> Tensor::grad_fn() const {
  AutogradMeta* meta = autograd_meta();
  return meta ? meta->grad_fn : nullptr;
}

uint32_t Tensor::output_nr() const {
  AutogradMeta* meta = autograd_meta();
  return meta ? meta->output_nr : 0;
}

void Tensor::backward(const Tensor& grad, bool retain_graph) const {
  autograd::backward({*this}, {grad}, retain_graph);
}

void Tensor::retain_grad() const {
  DTR_CHECK(requires_grad(), "retain_grad: the tensor (shape {}) does not require grad",
            shape_str(sizes()));
  AutogradMeta& meta = ensure_autograd_meta();
  if (!meta.grad_fn || meta.retains_grad) return;  // leaves keep their grad anyway
  meta.retains_grad = true;
  // The hook lives in grad_fn, which the tensor keeps alive: hold the tensor weakly.
  std::weak_ptr<Impl> weak = impl_;
  meta.grad_fn->add_pre_hook(meta.output_nr, [weak](const Tensor& g) {
    if (auto impl = weak.lock()) {
      Tensor self;
      self.impl_ = impl;
      AutogradMeta& m = self.ensure_autograd_meta();
      m.grad = m.grad.defined() ? m.grad + g : g.clone();
    }
    return Tensor();
  });
}

int Tensor::register_hook(std::function<Tensor(const Tensor&)> hook) const {
  DTR_CHECK(requires_grad(), "register_hook: the tensor (shape {}) does not require grad",
            shape_str(sizes()));
  AutogradMeta& meta = ensure_autograd_meta();
  if (meta.grad_fn) return meta.grad_fn->add_pre_hook(meta.output_nr, std::move(hook));
  int handle = meta.next_hook_handle++;
  meta.leaf_hooks.emplace_back(handle, std::move(hook));
  return handle;
}

void Tensor::remove_hook(int handle) const {
  AutogradMeta* meta = autograd_meta();
  if (meta == nullptr) return;
  if (meta->grad_fn) {
    meta->grad_fn->remove_pre_hook(handle);
  } else {
    std::erase_if(meta->leaf_hooks, [&](const auto& h) { return h.first == handle; });
  }
}

}  // namespace dtr
