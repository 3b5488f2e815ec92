// Recording ops in the autograd graph. An op computes its result, then, when
// any input needs a gradient (and grad mode is on), creates its backward Node
// and connects it:
//
//   Tensor out = ...compute...;
//   if (autograd::needs_grad({&a, &b})) {
//     auto node = std::make_shared<MulBackward>(SavedTensor(a), SavedTensor(b));
//     autograd::set_history(node, {&a, &b}, {&out});
//   }
//
// For one-input ops whose backward needs no saved tensors (views, casts),
// record_unary() does both steps with a lambda.
#pragma once

#include "dtr/tensor/autograd/node.h"

#include <functional>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>

namespace dtr::autograd {

// Grad mode is on and some input requires grad.
bool needs_grad(std::initializer_list<const Tensor*> inputs);

// The edge a gradient for `t` must flow along: its grad_fn output, or its leaf
// accumulator when t is a leaf that requires grad; invalid otherwise.
Edge gradient_edge(const Tensor& t);

// Some tensor of `tensors` is defined and requires grad.
bool any_requires_grad(std::span<const Tensor> tensors);

// Points node's next edges at `inputs` (in order) and makes node the grad_fn of
// `outputs` (which then require grad).
void set_history(const std::shared_ptr<Node>& node, std::initializer_list<const Tensor*> inputs,
                 std::initializer_list<const Tensor*> outputs);
void set_history(const std::shared_ptr<Node>& node, std::span<const Tensor* const> inputs,
                 std::span<const Tensor* const> outputs);

// A one-input, one-output op whose backward is `backward(grad_output)`.
// Returns `output`, recorded when `input` needs a gradient.
Tensor record_unary(const Tensor& input, Tensor output, std::string name,
                    std::function<Tensor(const Tensor& grad)> backward);

// Returns a view of x (same values) whose backward calls `fn` before passing the
// gradient on. Everything computed from the returned tensor contributes to that
// gradient, so `fn` runs once the backward of all of it is done: a module's
// post-backward hook (FSDP reduce-scatters its gradients there). x must require
// grad; when no input of a module does, use queue_callback instead.
Tensor call_after_backward(const Tensor& x, std::function<void()> fn);
// The same over several tensors (a module's inputs), through one node, so `fn`
// runs once, after the backward of everything computed from any of them. Tensors
// that do not require grad come back as they are; at least one must require it.
// Like any node with several outputs, it passes zeros to an input whose result got
// no gradient (where a plain backward would leave that input's .grad undefined).
std::vector<Tensor> call_after_backward(const std::vector<Tensor>& xs, std::function<void()> fn);

// Before an in-place write to `self`: refuses tensors that require grad while grad
// mode is on (autograd does not record in-place ops), then bumps self's version so
// that a backward which saved it reports the modification.
void check_inplace(std::string_view op, const Tensor& self);

// Sums `grad` down to `shape` (the adjoint of broadcasting `shape` up to grad's shape).
Tensor sum_to(const Tensor& grad, const Shape& shape);

}  // namespace dtr::autograd
