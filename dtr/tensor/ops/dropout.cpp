#include "dtr/tensor/ops/dropout.h"

#include "dtr/tensor/autograd/function.h"
#include "dtr/tensor/autograd/grad_mode.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/elementwise.h"
#include "dtr/tensor/ops/op_checks.h"

#ifdef DTR_WITH_CUDA
#include "dtr/kernels/cuda/dropout.h"
#include "dtr/tensor/cuda/cuda_runtime.h"
#endif

namespace dtr {

Tensor dropout(const Tensor& x, double p, bool training, Generator* gen) {
  const Device device = ops::check_device("dropout", {&x}, ops::Kernels::cpu_and_cuda);
  DTR_CHECK(is_floating(x.dtype()),
            "dropout: expected x of a floating dtype (f32, f64, bf16, f16), got {} (cast with "
            ".to(dtype) first)",
            x.dtype());
  DTR_CHECK(p >= 0.0 && p <= 1.0, "dropout: p must be in [0, 1], got {}", p);
  if (!training || p == 0.0) return x;
  if (p == 1.0) return mul(x, 0.0);  // zeros, with a zero gradient

  Tensor scale;
  Tensor out;
#ifdef DTR_WITH_CUDA
  if (device.is_cuda()) {
    // One fused kernel draws the mask uniform_() would draw (the same counters:
    // one fill of x.numel() elements) and writes the scale and the output.
    Generator& g = gen != nullptr ? *gen : default_generator();
    const GeneratorState s = g.next_fill(x.numel());
    NoGradGuard no_grad;
    const Tensor xc = x.contiguous();
    scale = empty(x.sizes(), {.dtype = x.dtype(), .device = device});
    out = empty(x.sizes(), {.dtype = x.dtype(), .device = device});
    cuda::DeviceGuard guard(device.index);
    dispatch_floating(x.dtype(), "dropout", [&](auto tag) {
      using T = typename decltype(tag)::type;
      kernels::cuda::dropout_forward<T>(xc.data<T>(), x.numel(),
                                        kernels::PhiloxStream{.seed = s.seed, .offset = s.offset},
                                        p, out.data<T>(), scale.data<T>(),
                                        cuda::current_stream(device.index));
    });
  } else
#endif
  {
    {
      NoGradGuard no_grad;
      Tensor u = empty(x.sizes(), {.dtype = DType::f32, .device = device});
      uniform_(u, 0.0, 1.0, gen);
      // keep where u >= p: scale 1 / (1 - p), else 0, in x's dtype.
      Tensor kept = ge(u, p);
      scale = where(kept, full({}, 1.0 / (1.0 - p), {.dtype = x.dtype(), .device = device}),
                    zeros({}, {.dtype = x.dtype(), .device = device}));
    }
    {
      NoGradGuard no_grad;
      out = mul(x, scale);
    }
  }
  return autograd::record_unary(x, out, "DropoutBackward",
                                [scale](const Tensor& grad) { return mul(grad, scale); });
}

}  // namespace dtr
