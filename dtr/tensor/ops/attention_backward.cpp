// The backward of scaled_dot_product_attention (declared in
// dtr/tensor/ops/attention_backward.h).
#include "dtr/tensor/ops/attention_backward.h"

#include "dtr/tensor/factory.h"

#ifdef DTR_WITH_CUDA
#include "dtr/kernels/cuda/attention.h"
#include "dtr/tensor/cuda/cuda_runtime.h"
#endif

#include <utility>

namespace dtr::ops {

#ifdef DTR_WITH_CUDA
Tensor cuda_attention_operand(const Tensor& t) {
  return t.size(3) <= 1 || t.stride(3) == 1 ? t : t.contiguous();
}

kernels::cuda::AttentionStrides cuda_attention_strides(const Tensor& t) {
  return {.batch = t.stride(0), .head = t.stride(1), .row = t.stride(2)};
}

Tensor cuda_attention_empty_like(const Tensor& like, DType dtype) {
  const TensorOptions options{.dtype = dtype, .device = like.device()};
  if (like.stride(1) < like.stride(2)) {
    return empty({like.size(0), like.size(2), like.size(1), like.size(3)}, options).transpose(1, 2);
  }
  return empty(like.sizes(), options);
}
#endif

AttentionBackward::AttentionBackward(const Tensor& q, const Tensor& k, const Tensor& v,
                                     const Tensor& out, const Tensor& lse,
                                     kernels::cpu::AttentionDims dims, DType dtype)
    : q_(q), k_(k), v_(v), out_(out), lse_(lse), dims_(dims), dtype_(dtype) {}

void AttentionBackward::release_saved() {
  q_.release();
  k_.release();
  v_.release();
  out_.release();
  lse_.release();
}

std::vector<Tensor> AttentionBackward::apply(std::vector<Tensor> grads) {
  const Tensor q = q_.unpack(*this);
  const Tensor k = k_.unpack(*this);
  const Tensor v = v_.unpack(*this);
  const Tensor out = out_.unpack(*this);
  const Tensor lse = lse_.unpack(*this);
  std::vector<Tensor> result(3);
  if (!grads[0].defined()) return result;
  const Device device = q.device();
#ifdef DTR_WITH_CUDA
  if (device.is_cuda()) {
    // The saved tensors are in dtype_, the gradients are written in it directly, each
    // in its input's order of dims: the backward of the layer's transpose view then
    // hands the projection a contiguous gradient. dout is read in place.
    Tensor dq = needs_input_grad(0) ? cuda_attention_empty_like(q, dtype_) : Tensor();
    Tensor dk = needs_input_grad(1) ? cuda_attention_empty_like(k, dtype_) : Tensor();
    Tensor dv = needs_input_grad(2) ? cuda_attention_empty_like(v, dtype_) : Tensor();
    const Tensor dout = cuda_attention_operand(grads[0].to(dtype_));
    Tensor delta = empty(lse.sizes(), {.dtype = lse.dtype(), .device = device});
    auto strides = [](const Tensor& t) {
      return t.defined() ? cuda_attention_strides(t) : kernels::cuda::AttentionStrides{};
    };
    const kernels::cuda::AttentionBackwardStrides layout{
        .q = strides(q), .k = strides(k), .v = strides(v), .out = strides(out), .dout = strides(dout),
        .dq = strides(dq), .dk = strides(dk), .dv = strides(dv)};
    dispatch_floating(dtype_, "scaled_dot_product_attention backward", [&](auto tag) {
      using T = typename decltype(tag)::type;
      auto ptr = [](const Tensor& t) { return t.defined() ? t.data<T>() : nullptr; };
      cuda::DeviceGuard guard(device.index);
      kernels::cuda::attention_backward<T>(q.data<T>(), k.data<T>(), v.data<T>(), out.data<T>(),
                                           lse.data<acc_t<T>>(), dout.data<T>(), dims_, layout,
                                           ptr(dq), ptr(dk), ptr(dv), delta.data<acc_t<T>>(),
                                           cuda::current_stream(device.index));
    });
    result[0] = dq;
    result[1] = dk;
    result[2] = dv;
    return result;
  }
#endif
  const DType acc = q.dtype();
  Tensor dq = needs_input_grad(0) ? empty(q.sizes(), {.dtype = acc, .device = device}) : Tensor();
  Tensor dk = needs_input_grad(1) ? empty(k.sizes(), {.dtype = acc, .device = device}) : Tensor();
  Tensor dv = needs_input_grad(2) ? empty(v.sizes(), {.dtype = acc, .device = device}) : Tensor();
  if (!device.is_meta()) {
    const Tensor dout = grads[0].to(acc).contiguous();
    auto run = [&](auto* tag) {
      using A = std::remove_pointer_t<decltype(tag)>;
      auto ptr = [](const Tensor& t) { return t.defined() ? t.data<A>() : nullptr; };
      kernels::cpu::attention_backward<A>(q.data<A>(), k.data<A>(), v.data<A>(), out.data<A>(),
                                          lse.data<A>(), dout.data<A>(), dims_, ptr(dq), ptr(dk),
                                          ptr(dv));
    };
    if (acc == DType::f64) {
      run(static_cast<double*>(nullptr));
    } else {
      run(static_cast<float*>(nullptr));
    }
  }
  Tensor* grads_out[3] = {&dq, &dk, &dv};
  for (size_t i = 0; i < 3; ++i) {
    if (grads_out[i]->defined()) result[i] = grads_out[i]->to(dtype_);
  }
  return result;
}

}  // namespace dtr::ops
