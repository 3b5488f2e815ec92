#include "dtr/tensor/ops/reduce.h"

#include "dtr/kernels/cpu/reduce.h"
#include "dtr/tensor/autograd/grad_mode.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/op_checks.h"
#include "dtr/tensor/ops/reduce_backward.h"

#ifdef DTR_WITH_CUDA
#include "dtr/kernels/cuda/reduce.h"
#include "dtr/tensor/cuda/cuda_runtime.h"
#endif

#include <string>
#include <string_view>

namespace dtr {

namespace {

enum class ReduceKind { sum, mean, max, min, argmax };

std::string_view op_name(ReduceKind kind) {
  switch (kind) {
    case ReduceKind::sum: return "sum";
    case ReduceKind::mean: return "mean";
    case ReduceKind::max: return "max";
    case ReduceKind::min: return "min";
    case ReduceKind::argmax: return "argmax";
  }
  return "reduce";
}

// Which dims of `t` a reduction over `dims` covers (every dim when `dims` is empty).
std::vector<bool> reduced_dims(std::string_view op, const Tensor& t,
                               const std::vector<int64_t>& dims) {
  const int64_t nd = t.dim();
  std::vector<bool> reduced(nd, dims.empty());
  for (int64_t d : dims) {
    if (nd == 0) {  // a 0-d tensor takes dim 0 or -1, like PyTorch, and reduces nothing
      DTR_CHECK(d == 0 || d == -1, "{}: dim {} is out of range for a 0-d tensor (expected 0 or -1)",
                op, d);
      continue;
    }
    const int64_t w = t.wrap_dim(d, std::string(op).c_str());
    DTR_CHECK(!reduced[w], "{}: dim {} appears more than once in dims [{}] (shape {})", op, w,
              fmt::join(dims, ", "), shape_str(t.sizes()));
    reduced[w] = true;
  }
  return reduced;
}

DType result_dtype(ReduceKind kind, DType input) {
  if (kind == ReduceKind::argmax) return DType::i64;
  if (kind == ReduceKind::sum && !is_floating(input)) return DType::i64;
  return input;
}

// The row kernels of one device behind one interface, so run_kernel() names each op once.
struct CpuRowKernels {
  template <class T>
  void sum(const T* in, int64_t rows, int64_t cols, kernels::cpu::sum_out_t<T>* out) const {
    kernels::cpu::sum_rows<T>(in, rows, cols, out);
  }
  template <class T>
  void mean(const T* in, int64_t rows, int64_t cols, T* out) const {
    kernels::cpu::mean_rows<T>(in, rows, cols, out);
  }
  template <class T>
  void max(const T* in, int64_t rows, int64_t cols, T* out) const {
    kernels::cpu::max_rows<T>(in, rows, cols, out);
  }
  template <class T>
  void min(const T* in, int64_t rows, int64_t cols, T* out) const {
    kernels::cpu::min_rows<T>(in, rows, cols, out);
  }
  template <class T>
  void argmax(const T* in, int64_t rows, int64_t cols, int64_t* out) const {
    kernels::cpu::argmax_rows<T>(in, rows, cols, out);
  }
};

#ifdef DTR_WITH_CUDA
// CUDA launches: on `stream` (the device's current one), with scratch for long rows.
struct CudaRowKernels {
  cudaStream_t stream;
  void* workspace;
  template <class T>
  void sum(const T* in, int64_t rows, int64_t cols, kernels::cpu::sum_out_t<T>* out) const {
    kernels::cuda::sum_rows<T>(in, rows, cols, out, workspace, stream);
  }
  template <class T>
  void mean(const T* in, int64_t rows, int64_t cols, T* out) const {
    kernels::cuda::mean_rows<T>(in, rows, cols, out, workspace, stream);
  }
  template <class T>
  void max(const T* in, int64_t rows, int64_t cols, T* out) const {
    kernels::cuda::max_rows<T>(in, rows, cols, out, workspace, stream);
  }
  template <class T>
  void min(const T* in, int64_t rows, int64_t cols, T* out) const {
    kernels::cuda::min_rows<T>(in, rows, cols, out, workspace, stream);
  }
  template <class T>
  void argmax(const T* in, int64_t rows, int64_t cols, int64_t* out) const {
    kernels::cuda::argmax_rows<T>(in, rows, cols, out, workspace, stream);
  }
};

// The column kernels behind the same interface: a contiguous [outer, inner]
// input reduced over outer (see reduce() for when).
struct CudaColKernels {
  cudaStream_t stream;
  void* workspace;
  template <class T>
  void sum(const T* in, int64_t outer, int64_t inner, kernels::cpu::sum_out_t<T>* out) const {
    kernels::cuda::sum_cols<T>(in, outer, inner, out, workspace, stream);
  }
  template <class T>
  void mean(const T* in, int64_t outer, int64_t inner, T* out) const {
    kernels::cuda::mean_cols<T>(in, outer, inner, out, workspace, stream);
  }
  template <class T>
  void max(const T* in, int64_t outer, int64_t inner, T* out) const {
    kernels::cuda::max_cols<T>(in, outer, inner, out, workspace, stream);
  }
  template <class T>
  void min(const T* in, int64_t outer, int64_t inner, T* out) const {
    kernels::cuda::min_cols<T>(in, outer, inner, out, workspace, stream);
  }
  template <class T>
  void argmax(const T* in, int64_t outer, int64_t inner, int64_t* out) const {
    kernels::cuda::argmax_cols<T>(in, outer, inner, out, workspace, stream);
  }
};
#endif

// Runs the kernel for `kind` on a contiguous [m, n] input into `out`: the row
// kernels reduce over n ([rows, cols]), the column kernels over m ([outer, inner]).
template <class Kernels>
void run_kernel(const Kernels& k, ReduceKind kind, const Tensor& in, int64_t m, int64_t n,
                const Tensor& out) {
  if (kind == ReduceKind::mean) {
    dispatch_floating(in.dtype(), "mean", [&](auto tag) {
      using T = typename decltype(tag)::type;
      k.template mean<T>(in.data<T>(), m, n, out.data<T>());
    });
    return;
  }
  dispatch_dtype(in.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    switch (kind) {
      case ReduceKind::sum:
        k.template sum<T>(in.data<T>(), m, n, out.data<kernels::cpu::sum_out_t<T>>());
        break;
      case ReduceKind::max: k.template max<T>(in.data<T>(), m, n, out.data<T>()); break;
      case ReduceKind::min: k.template min<T>(in.data<T>(), m, n, out.data<T>()); break;
      case ReduceKind::argmax: k.template argmax<T>(in.data<T>(), m, n, out.data<int64_t>()); break;
      case ReduceKind::mean: break;  // handled above
    }
  });
}

// How the kernels see a contiguous input: [rows, cols] reduced over cols (the
// row kernels, every device), or [outer, inner] reduced over outer (the column kernels, CUDA).
enum class Layout { rows, columns };

// Runs the reduction of a contiguous [m, n] input with the kernels of the
// device that holds `in` and `out`.
void run_on_device(ReduceKind kind, Layout layout, const Tensor& in, int64_t m, int64_t n,
                   const Tensor& out) {
#ifdef DTR_WITH_CUDA
  if (in.device().is_cuda()) {
    const int index = in.device().index;
    cuda::DeviceGuard guard(index);
    const bool columns = layout == Layout::columns;
    const int64_t bytes = static_cast<int64_t>(
        columns ? kernels::cuda::reduce_cols_workspace_bytes(m, n)
                : kernels::cuda::reduce_workspace_bytes(m, n));
    const Tensor workspace =
        bytes > 0 ? empty({bytes}, {.dtype = DType::u8, .device = in.device()}) : Tensor();
    void* scratch = workspace.defined() ? workspace.raw_data() : nullptr;
    const cudaStream_t stream = cuda::current_stream(index);
    if (columns) {
      run_kernel(CudaColKernels{stream, scratch}, kind, in, m, n, out);
    } else {
      run_kernel(CudaRowKernels{stream, scratch}, kind, in, m, n, out);
    }
    return;
  }
#endif
  DTR_INTERNAL_ASSERT(layout == Layout::rows, "reduce: the column kernels are CUDA-only");
  run_kernel(CpuRowKernels{}, kind, in, m, n, out);
}

// A sum or mean of a contiguous [outer, inner] CPU input over outer, read in place
// by the CPU column kernels (which have no max, min or argmax).
void run_cpu_columns(ReduceKind kind, const Tensor& in, int64_t outer, int64_t inner, const Tensor& out) {
  if (kind == ReduceKind::mean) {
    dispatch_floating(in.dtype(), "mean", [&](auto tag) {
      using T = typename decltype(tag)::type;
      kernels::cpu::mean_cols<T>(in.data<T>(), outer, inner, out.data<T>());
    });
    return;
  }
  DTR_INTERNAL_ASSERT(kind == ReduceKind::sum, "reduce: the CPU column kernels sum or average only");
  dispatch_dtype(in.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    kernels::cpu::sum_cols<T>(in.data<T>(), outer, inner, out.data<kernels::cpu::sum_out_t<T>>());
  });
}

// Whether every reduced dim of size > 1 comes before every kept dim of size > 1.
bool reduced_dims_lead(const Tensor& t, const std::vector<bool>& reduced) {
  bool kept_seen = false;
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.size(d) == 1) continue;
    if (!reduced[d]) {
      kept_seen = true;
    } else if (kept_seen) {
      return false;
    }
  }
  return true;
}

// Records out's backward (dtr/tensor/ops/reduce_backward.cpp) when t needs a gradient.
// max and min called without dims reduce the whole tensor; argmax has none.
void record_backward(ReduceKind kind, const Tensor& t, const std::vector<int64_t>& dims,
                     const std::vector<bool>& reduced, bool keepdim, const Tensor& out) {
  switch (kind) {
    case ReduceKind::sum:
    case ReduceKind::mean:
      ops::record_sum_backward(t, reduced, kind == ReduceKind::mean, out);
      return;
    case ReduceKind::max:
    case ReduceKind::min:
      if (dims.empty()) {
        ops::record_extremum_all_backward(t, kind == ReduceKind::max, out);
      } else {
        ops::record_extremum_dim_backward(t, dims[0], keepdim, kind == ReduceKind::max, out);
      }
      return;
    case ReduceKind::argmax: return;  // integer indices have no gradient
  }
}

// Reduces `t` over `dims` (every dim when empty). The kept dims are moved first
// and the reduced dims last, so the row kernels see contiguous [rows, cols]
// rows; reduced dims that already lead go to the column kernels instead (on the
// CPU for sum and mean only).
Tensor reduce(ReduceKind kind, const Tensor& t, const std::vector<int64_t>& dims, bool keepdim) {
  const std::string_view op = op_name(kind);
  const Device device = ops::check_device(op, {&t}, ops::Kernels::cpu_and_cuda);
  DTR_CHECK(kind != ReduceKind::mean || is_floating(t.dtype()),
            "mean: expected a floating dtype (f32, f64, bf16, f16), got {} (cast with .to(dtype) "
            "first)",
            t.dtype());
  const std::vector<bool> reduced = reduced_dims(op, t, dims);

  Shape out_shape;
  std::vector<int64_t> perm, reduced_order;
  int64_t rows = 1, cols = 1;
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (reduced[d]) {
      reduced_order.push_back(d);
      cols *= t.size(d);
      if (keepdim) out_shape.push_back(1);
      const bool empty_is_error = kind != ReduceKind::sum && kind != ReduceKind::mean;
      DTR_CHECK(!empty_is_error || t.size(d) != 0,
                "{}: cannot reduce over dim {} of size 0 (shape {}): the {} of no elements is "
                "undefined",
                op, d, shape_str(t.sizes()), op);
    } else {
      perm.push_back(d);
      rows *= t.size(d);
      out_shape.push_back(t.size(d));
    }
  }
  perm.insert(perm.end(), reduced_order.begin(), reduced_order.end());

  Tensor out = empty(out_shape, {.dtype = result_dtype(kind, t.dtype()), .device = device});
  if (!device.is_meta() && rows != 0) {
    // Reduced dims leading a contiguous tensor (a bias gradient: [B, T, C]
    // over {0, 1}): t already is [cols, rows] in memory, and the column kernels
    // read it in place where permute().contiguous() would be a full transposed
    // copy. A single kept element (rows == 1) is one row, which the row kernels split.
    const bool columns = rows > 1 && t.is_contiguous() && reduced_dims_lead(t, reduced);
    const bool cpu_columns = kind == ReduceKind::sum || kind == ReduceKind::mean;
    if (columns && device.is_cuda()) {
      run_on_device(kind, Layout::columns, t, cols, rows, out);
    } else if (columns && device.is_cpu() && cpu_columns) {
      run_cpu_columns(kind, t, cols, rows, out);
    } else {
      NoGradGuard no_grad;  // the permuted copy is bookkeeping; the op records its own backward
      run_on_device(kind, Layout::rows, t.permute(perm).contiguous(), rows, cols, out);
    }
  }
  record_backward(kind, t, dims, reduced, keepdim, out);
  return out;
}

}  // namespace

Tensor sum(const Tensor& t) { return reduce(ReduceKind::sum, t, {}, false); }
Tensor sum(const Tensor& t, const std::vector<int64_t>& dims, bool keepdim) {
  return reduce(ReduceKind::sum, t, dims, keepdim);
}

Tensor mean(const Tensor& t) { return reduce(ReduceKind::mean, t, {}, false); }
Tensor mean(const Tensor& t, const std::vector<int64_t>& dims, bool keepdim) {
  return reduce(ReduceKind::mean, t, dims, keepdim);
}

Tensor max(const Tensor& t) { return reduce(ReduceKind::max, t, {}, false); }
Tensor max(const Tensor& t, int64_t dim, bool keepdim) {
  return reduce(ReduceKind::max, t, {dim}, keepdim);
}

Tensor min(const Tensor& t) { return reduce(ReduceKind::min, t, {}, false); }
Tensor min(const Tensor& t, int64_t dim, bool keepdim) {
  return reduce(ReduceKind::min, t, {dim}, keepdim);
}

Tensor argmax(const Tensor& t) { return reduce(ReduceKind::argmax, t, {}, false); }
Tensor argmax(const Tensor& t, int64_t dim, bool keepdim) {
  return reduce(ReduceKind::argmax, t, {dim}, keepdim);
}

}  // namespace dtr
