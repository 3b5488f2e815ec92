#include "dtr/tensor/ops/rope.h"

#include "dtr/kernels/cpu/parallel.h"
#include "dtr/kernels/scalar_types.h"
#include "dtr/tensor/autograd/function.h"
#include "dtr/tensor/autograd/grad_mode.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/op_checks.h"

#ifdef DTR_WITH_CUDA
#include "dtr/kernels/cuda/rope.h"
#include "dtr/tensor/cuda/cuda_runtime.h"
#endif

#include <cmath>
#include <vector>

namespace dtr {

namespace {

// Rotates every pair of the contiguous [B, T, H, D] `in` by sign * a(t, i) into `out`.
template <class T>
void rotate_pairs(const T* in, T* out, int64_t batch, int64_t seq, int64_t heads, int64_t dim,
                  double theta, int64_t offset, double sign) {
  using Acc = acc_t<T>;
  const int64_t half = dim / 2;
  std::vector<Acc> cos_table(static_cast<size_t>(seq * half));
  std::vector<Acc> sin_table(cos_table.size());
  for (int64_t t = 0; t < seq; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      const double angle = sign * static_cast<double>(offset + t) *
                           std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(dim));
      cos_table[t * half + i] = static_cast<Acc>(std::cos(angle));
      sin_table[t * half + i] = static_cast<Acc>(std::sin(angle));
    }
  }
  const int64_t rows = batch * seq * heads;  // one row: D values of one (b, t, h)
  kernels::parallel_for(0, rows, 256, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t t = (r / heads) % seq;
      const Acc* c = cos_table.data() + t * half;
      const Acc* s = sin_table.data() + t * half;
      const T* x = in + r * dim;
      T* y = out + r * dim;
      for (int64_t i = 0; i < half; ++i) {
        const Acc x0 = convert<Acc>(x[2 * i]);
        const Acc x1 = convert<Acc>(x[2 * i + 1]);
        y[2 * i] = convert<T>(x0 * c[i] - x1 * s[i]);
        y[2 * i + 1] = convert<T>(x0 * s[i] + x1 * c[i]);
      }
    }
  });
}

// rope without recording; sign -1 is the inverse rotation (the backward).
Tensor rope_compute(const Tensor& x, double theta, int64_t offset, double sign) {
  Tensor out = empty(x.sizes(), {.dtype = x.dtype(), .device = x.device()});
  if (x.device().is_meta()) return out;
  const Tensor xc = x.contiguous();
  dispatch_floating(x.dtype(), "rope", [&](auto tag) {
    using T = typename decltype(tag)::type;
#ifdef DTR_WITH_CUDA
    if (x.device().is_cuda()) {
      const int index = x.device().index;
      cuda::DeviceGuard guard(index);
      // The [T, D / 2] cos and sin tables, built on the device.
      const int64_t table_elements = kernels::cuda::rope_table_elements(x.size(1), x.size(3));
      Tensor table;
      if (table_elements > 0) {
        table = empty({table_elements},
                      {.dtype = x.dtype() == DType::f64 ? DType::f64 : DType::f32,
                       .device = x.device()});
      }
      kernels::cuda::rope_rotate<T>(xc.data<T>(), out.data<T>(), x.size(0), x.size(1), x.size(2),
                                    x.size(3), theta, offset, sign,
                                    table.defined() ? table.data<acc_t<T>>() : nullptr,
                                    cuda::current_stream(index));
      return;
    }
#endif
    rotate_pairs<T>(xc.data<T>(), out.data<T>(), x.size(0), x.size(1), x.size(2), x.size(3), theta,
                    offset, sign);
  });
  return out;
}

}  // namespace

Tensor rope(const Tensor& x, double theta, int64_t position_offset) {
  ops::check_device("rope", {&x}, ops::Kernels::cpu_and_cuda);
  DTR_CHECK(is_floating(x.dtype()),
            "rope: expected x of a floating dtype (f32, f64, bf16, f16), got {} (cast with "
            ".to(dtype) first)",
            x.dtype());
  DTR_CHECK(x.dim() == 4, "rope: expected x of shape [B, T, H, D], got shape {}",
            shape_str(x.sizes()));
  DTR_CHECK(x.size(3) % 2 == 0, "rope: the head dim D must be even, got shape {} (D = {})",
            shape_str(x.sizes()), x.size(3));
  DTR_CHECK(theta > 0.0, "rope: theta must be positive, got {}", theta);
  DTR_CHECK(position_offset >= 0, "rope: position_offset must be >= 0, got {}", position_offset);
  Tensor out;
  {
    NoGradGuard no_grad;
    out = rope_compute(x, theta, position_offset, 1.0);
  }
  return autograd::record_unary(x, out, "RopeBackward", [theta, position_offset](const Tensor& g) {
    return rope_compute(g, theta, position_offset, -1.0);
  });
}

}  // namespace dtr
