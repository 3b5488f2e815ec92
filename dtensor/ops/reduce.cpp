#include "dtensor/ops/reduce.h"

#include "dtensor/factory.h"
#include "dtensor/ops/op_checks.h"
#include "kernels/cpu/reduce.h"

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

// Runs the row kernel for `kind` on a contiguous [rows, cols] input into `out`.
void run_kernel(ReduceKind kind, const Tensor& in, int64_t rows, int64_t cols, const Tensor& out) {
  namespace k = kernels::cpu;
  if (kind == ReduceKind::mean) {
    dispatch_floating(in.dtype(), "mean", [&](auto tag) {
      using T = typename decltype(tag)::type;
      k::mean_rows<T>(in.data<T>(), rows, cols, out.data<T>());
    });
    return;
  }
  dispatch_dtype(in.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    switch (kind) {
      case ReduceKind::sum:
        k::sum_rows<T>(in.data<T>(), rows, cols, out.data<k::sum_out_t<T>>());
        break;
      case ReduceKind::max: k::max_rows<T>(in.data<T>(), rows, cols, out.data<T>()); break;
      case ReduceKind::min: k::min_rows<T>(in.data<T>(), rows, cols, out.data<T>()); break;
      case ReduceKind::argmax:
        k::argmax_rows<T>(in.data<T>(), rows, cols, out.data<int64_t>());
        break;
      case ReduceKind::mean: break;  // handled above
    }
  });
}

// Reduces `t` over `dims` (every dim when empty). The kept dims are moved first
// and the reduced dims last, so the kernels see contiguous [rows, cols] rows.
Tensor reduce(ReduceKind kind, const Tensor& t, const std::vector<int64_t>& dims, bool keepdim) {
  const std::string_view op = op_name(kind);
  const Device device = ops::check_device(op, {&t});
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
  if (device.is_meta() || rows == 0) return out;
  run_kernel(kind, t.permute(perm).contiguous(), rows, cols, out);
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
