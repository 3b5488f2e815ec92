#include "dtr/tensor/ops/softmax.h"

#include "dtr/kernels/cpu/softmax.h"
#include "dtr/tensor/autograd/grad_mode.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/op_checks.h"
#include "dtr/tensor/ops/softmax_backward.h"

#ifdef DTR_WITH_CUDA
#include "dtr/kernels/cuda/softmax.h"
#include "dtr/tensor/cuda/cuda_runtime.h"
#endif

#include <string>
#include <string_view>

namespace dtr {

namespace {

enum class SoftmaxKind { softmax, log_softmax };

// Runs the row kernel of `kind` on `device` (cuda: on its current stream).
template <class T>
void softmax_rows_on(const Device& device, SoftmaxKind kind, const T* in, int64_t rows,
                     int64_t cols, T* out) {
#ifdef DTR_WITH_CUDA
  if (device.is_cuda()) {
    cuda::DeviceGuard guard(device.index);
    cudaStream_t stream = cuda::current_stream(device.index);
    if (kind == SoftmaxKind::softmax) {
      kernels::cuda::softmax_rows<T>(in, rows, cols, out, stream);
    } else {
      kernels::cuda::log_softmax_rows<T>(in, rows, cols, out, stream);
    }
    return;
  }
#endif
  if (kind == SoftmaxKind::softmax) {
    kernels::cpu::softmax_rows<T>(in, rows, cols, out);
  } else {
    kernels::cpu::log_softmax_rows<T>(in, rows, cols, out);
  }
}

// Rows along `dim` are moved last (transpose + contiguous) for the kernel, and
// the result is transposed back into a contiguous tensor of the input's shape.
Tensor softmax_impl(SoftmaxKind kind, const Tensor& t, int64_t dim) {
  const std::string_view op = kind == SoftmaxKind::softmax ? "softmax" : "log_softmax";
  const Device device = ops::check_device(op, {&t}, ops::Kernels::cpu_and_cuda);
  DTR_CHECK(is_floating(t.dtype()),
            "{}: expected a floating dtype (f32, f64, bf16, f16), got {} (cast with .to(dtype) "
            "first)",
            op, t.dtype());
  if (t.dim() == 0) {  // one element along a virtual dim 0, like PyTorch
    DTR_CHECK(dim == 0 || dim == -1,
              "{}: dim {} is out of range for a 0-d tensor (expected 0 or -1)", op, dim);
    return softmax_impl(kind, t.reshape({1}), 0).reshape({});
  }
  const int64_t d = t.wrap_dim(dim, std::string(op).c_str());
  const int64_t last = t.dim() - 1;
  if (device.is_meta()) return empty(t.sizes(), {.dtype = t.dtype(), .device = device});

  const Tensor in = (d == last ? t : t.transpose(d, last)).contiguous();
  Tensor out = empty(in.sizes(), {.dtype = t.dtype(), .device = device});
  const int64_t cols = in.size(last);
  const int64_t rows = cols == 0 ? 0 : in.numel() / cols;
  dispatch_floating(t.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    softmax_rows_on<T>(device, kind, in.data<T>(), rows, cols, out.data<T>());
  });
  return d == last ? out : out.transpose(d, last).contiguous();
}

// Computes without recording (the transposes and copies above are bookkeeping),
// then records the op's own backward.
Tensor softmax_op(SoftmaxKind kind, const Tensor& t, int64_t dim) {
  Tensor out;
  {
    NoGradGuard no_grad;
    out = softmax_impl(kind, t, dim);
  }
  ops::record_softmax_backward(t, dim, kind == SoftmaxKind::log_softmax, out);
  return out;
}

}  // namespace

Tensor softmax(const Tensor& t, int64_t dim) { return softmax_op(SoftmaxKind::softmax, t, dim); }

Tensor log_softmax(const Tensor& t, int64_t dim) {
  return softmax_op(SoftmaxKind::log_softmax, t, dim);
}

}  // namespace dtr
