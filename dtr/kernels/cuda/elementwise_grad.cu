// CUDA activation gradient kernels: g * f'(s) in one pass, one functor per op
// (the CPU kernels' functors, dtr/kernels/elementwise_functors.h), applied by detail::launch_map.
#include "dtr/kernels/cuda/elementwise.h"

#include "dtr/kernels/cuda/cuda_check.h"
#include "dtr/kernels/cuda/elementwise_functors.cuh"
#include "dtr/kernels/cuda/elementwise_loops.cuh"

#include <string>

namespace dtr::kernels::cuda {

template <class T>
void unary_grad(UnaryOp op, int ndim, const int64_t* sizes, const T* g, const int64_t* g_strides,
                const T* s, const int64_t* s_strides, T* out, const int64_t* out_strides,
                cudaStream_t stream) {
  if constexpr (is_floating_v<T>) {
    using S = detail::storage_t<T>;
    auto go = [&](auto f) {
      detail::launch_map(detail::OnStored<S, decltype(f)>{f}, ndim, sizes, detail::as_storage(out),
                         out_strides, stream, detail::Operand<S>{detail::as_storage(g), g_strides},
                         detail::Operand<S>{detail::as_storage(s), s_strides});
    };
    if (detail::with_grad_functor(op, go)) return;
  }
  DTR_CUDA_KERNEL_CHECK(false, "kernels::cuda::unary_grad: no gradient kernel for op " +
                                   std::string(unary_op_name(op)) + " on this element type");
}

#define DTR_INSTANTIATE_UNARY_GRAD(T)                                                          \
  template void unary_grad<T>(UnaryOp, int, const int64_t*, const T*, const int64_t*, const T*, \
                              const int64_t*, T*, const int64_t*, cudaStream_t);
DTR_FOR_EACH_SCALAR(DTR_INSTANTIATE_UNARY_GRAD)

}  // namespace dtr::kernels::cuda
