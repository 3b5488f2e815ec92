#include "dtr/tensor/ops/attention.h"

#include "dtr/kernels/cpu/attention.h"
#include "dtr/tensor/autograd/function.h"
#include "dtr/tensor/autograd/grad_mode.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/attention_backward.h"
#include "dtr/tensor/ops/op_checks.h"

#ifdef DTR_WITH_CUDA
#include "dtr/kernels/cuda/attention.h"
#include "dtr/tensor/cuda/cuda_runtime.h"
#endif

#include <cmath>
#include <memory>
#include <string_view>

namespace dtr {

namespace {

kernels::cpu::AttentionDims check_attention_inputs(const Tensor& q, const Tensor& k,
                                                   const Tensor& v, bool causal,
                                                   std::optional<double> scale) {
  constexpr std::string_view op = "scaled_dot_product_attention";
  ops::check_device(op, {&q, &k, &v}, ops::Kernels::cpu_and_cuda);
  DTR_CHECK(is_floating(q.dtype()),
            "{}: expected q of a floating dtype (f32, f64, bf16, f16), got {} (cast with "
            ".to(dtype) first)",
            op, q.dtype());
  DTR_CHECK(k.dtype() == q.dtype() && v.dtype() == q.dtype(),
            "{}: q, k and v must share one dtype, got q {}, k {}, v {}", op, q.dtype(), k.dtype(),
            v.dtype());
  DTR_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4,
            "{}: expected 4-D q [B, Hq, T, D], k and v [B, Hkv, S, D], got q {}, k {}, v {}", op,
            shape_str(q.sizes()), shape_str(k.sizes()), shape_str(v.sizes()));
  DTR_CHECK(k.sizes() == v.sizes(), "{}: k and v must have the same shape, got k {} and v {}", op,
            shape_str(k.sizes()), shape_str(v.sizes()));
  DTR_CHECK(k.size(0) == q.size(0),
            "{}: batch sizes differ: q {} has B = {}, k {} has B = {}", op, shape_str(q.sizes()),
            q.size(0), shape_str(k.sizes()), k.size(0));
  DTR_CHECK(k.size(3) == q.size(3),
            "{}: head dims differ: q {} has D = {}, k {} has D = {}", op, shape_str(q.sizes()),
            q.size(3), shape_str(k.sizes()), k.size(3));
  DTR_CHECK(k.size(1) > 0 && q.size(1) % k.size(1) == 0,
            "{}: the number of query heads Hq = {} must be a multiple of the number of kv heads "
            "Hkv = {} (q {}, k {})",
            op, q.size(1), k.size(1), shape_str(q.sizes()), shape_str(k.sizes()));
  const double s = scale.value_or(1.0 / std::sqrt(static_cast<double>(q.size(3))));
  DTR_CHECK(std::isfinite(s), "{}: scale must be finite, got {}", op, s);
  return {.batch = q.size(0),
          .q_heads = q.size(1),
          .kv_heads = k.size(1),
          .q_len = q.size(2),
          .kv_len = k.size(2),
          .head_dim = q.size(3),
          .causal = causal,
          .scale = s};
}

#ifdef DTR_WITH_CUDA
// The CUDA path: the kernels read q, k, v in their own dtype and strides (a copy only
// for a non-unit-stride head dim) and write out in that dtype, in q's order of dims
// (so a [B, T, H, D] projection seen as [B, H, T, D] gets an output whose transpose
// back is a view), and lse in f32 (f64 for f64); the node saves exactly those.
Tensor attention_cuda(const Tensor& q, const Tensor& k, const Tensor& v,
                      const kernels::cpu::AttentionDims& dims) {
  const Device device = q.device();
  const DType acc = q.dtype() == DType::f64 ? DType::f64 : DType::f32;
  Tensor qi, ki, vi, out_saved;
  Tensor lse = empty({dims.batch, dims.q_heads, dims.q_len}, {.dtype = acc, .device = device});
  {
    NoGradGuard no_grad;  // the operands' handles (or copies) are bookkeeping
    qi = ops::cuda_attention_operand(q);
    ki = ops::cuda_attention_operand(k);
    vi = ops::cuda_attention_operand(v);
    out_saved = ops::cuda_attention_empty_like(q, q.dtype());
    const kernels::cuda::AttentionForwardStrides layout{.q = ops::cuda_attention_strides(qi),
                                                        .k = ops::cuda_attention_strides(ki),
                                                        .v = ops::cuda_attention_strides(vi),
                                                        .out = ops::cuda_attention_strides(out_saved)};
    dispatch_floating(q.dtype(), "scaled_dot_product_attention", [&](auto tag) {
      using T = typename decltype(tag)::type;
      cuda::DeviceGuard guard(device.index);
      kernels::cuda::attention_forward<T>(qi.data<T>(), ki.data<T>(), vi.data<T>(), dims, layout,
                                          out_saved.data<T>(), lse.data<acc_t<T>>(),
                                          cuda::current_stream(device.index));
    });
  }
  Tensor out = out_saved.detach();  // the saved tensor stays unrecorded
  if (autograd::needs_grad({&q, &k, &v})) {
    auto node = std::make_shared<ops::AttentionBackward>(qi.detach(), ki.detach(), vi.detach(),
                                                         out_saved, lse, dims, q.dtype());
    autograd::set_history(node, {&q, &k, &v}, {&out});
  }
  return out;
}
#endif

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    bool causal, std::optional<double> scale) {
  const kernels::cpu::AttentionDims dims = check_attention_inputs(q, k, v, causal, scale);
  const Device device = q.device();
#ifdef DTR_WITH_CUDA
  if (device.is_cuda()) return attention_cuda(q, k, v, dims);
#endif
  const DType acc = q.dtype() == DType::f64 ? DType::f64 : DType::f32;
  Tensor qa, ka, va, out_acc, out;
  Tensor lse = empty({dims.batch, dims.q_heads, dims.q_len}, {.dtype = acc, .device = device});
  {
    NoGradGuard no_grad;  // conversions and copies are bookkeeping
    if (device.is_meta()) {
      qa = q, ka = k, va = v;
      out_acc = empty(q.sizes(), {.dtype = acc, .device = device});
    } else {
      qa = q.to(acc).contiguous();
      ka = k.to(acc).contiguous();
      va = v.to(acc).contiguous();
      out_acc = empty(q.sizes(), {.dtype = acc, .device = device});
      if (acc == DType::f64) {
        kernels::cpu::attention_forward<double>(qa.data<double>(), ka.data<double>(),
                                                va.data<double>(), dims, out_acc.data<double>(),
                                                lse.data<double>());
      } else {
        kernels::cpu::attention_forward<float>(qa.data<float>(), ka.data<float>(),
                                               va.data<float>(), dims, out_acc.data<float>(),
                                               lse.data<float>());
      }
    }
    out = out_acc.to(q.dtype());
    if (out.is_same(out_acc)) out = out_acc.detach();  // the saved copy stays unrecorded
  }
  if (autograd::needs_grad({&q, &k, &v})) {
    auto node = std::make_shared<ops::AttentionBackward>(qa.detach(), ka.detach(), va.detach(),
                                                         out_acc, lse, dims, q.dtype());
    autograd::set_history(node, {&q, &k, &v}, {&out});
  }
  return out;
}

}  // namespace dtr
