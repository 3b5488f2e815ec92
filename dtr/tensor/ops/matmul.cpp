// Matrix products: shape rules, operand layouts (read in place or copied) and
// dispatch into the GEMM of the operands' device: dtr/kernels/cpu/gemm.h, or in CUDA
// builds dtr/kernels/cuda/gemm.h on the device's current stream (f32, bf16, f16; there
// is no f64 CUDA GEMM). Each op computes without recording and then records its
// backward (dtr/tensor/ops/matmul_backward.cpp).
#include "dtr/tensor/ops/matmul.h"

#include "dtr/kernels/cpu/gemm.h"
#include "dtr/tensor/autograd/grad_mode.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/elementwise.h"
#include "dtr/tensor/ops/elementwise_backward.h"
#include "dtr/tensor/ops/gemm_aligned_rows.h"
#include "dtr/tensor/ops/matmul_backward.h"
#include "dtr/tensor/ops/op_checks.h"

#ifdef DTR_WITH_CUDA
#include "dtr/kernels/cuda/gemm.h"
#include "dtr/tensor/cuda/cuda_runtime.h"
#endif

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string_view>
#include <type_traits>
#include <utility>

namespace dtr {

namespace {

using kernels::cpu::Transpose;

// How the GEMM kernel reads the last two dims of an operand: as stored row-major
// (Transpose::no) or as the transpose of a stored row-major matrix, with row stride ld.
struct MatrixLayout {
  Transpose trans = Transpose::no;
  int64_t ld = 0;
};

// The layout that reads t's last two dims in place, if any: unit stride along one
// dim and a non-overlapping stride along the other. A size-1 dim's stride is free.
std::optional<MatrixLayout> in_place_layout(const Tensor& t) {
  const int64_t rows = t.size(-2), cols = t.size(-1);
  const int64_t row_stride = t.stride(-2), col_stride = t.stride(-1);
  if ((cols <= 1 || col_stride == 1) && (rows <= 1 || row_stride >= cols)) {
    return MatrixLayout{Transpose::no, rows <= 1 ? std::max<int64_t>(cols, 1) : row_stride};
  }
  if ((rows <= 1 || row_stride == 1) && (cols <= 1 || col_stride >= rows)) {
    return MatrixLayout{Transpose::yes, cols <= 1 ? std::max<int64_t>(rows, 1) : col_stride};
  }
  return std::nullopt;
}

// Whether a cuda operand read as `layout` is worth a copy with 16-byte aligned rows
// (the rule and its reason: dtr/tensor/ops/gemm_aligned_rows.h): large, 16-bit, and its
// pointer or row stride not aligned.
bool needs_aligned_rows(const Tensor& t, const MatrixLayout& layout) {
  if (!t.device().is_cuda() || !ops::gemm_wants_aligned_rows(t.dtype(), t.size(-2), t.size(-1))) {
    return false;
  }
  return layout.ld % 8 != 0 || reinterpret_cast<uintptr_t>(t.raw_data()) % 16 != 0;
}

// A copy of t whose stored rows (in the orientation `trans` reads them) start 16 bytes
// apart: the stored matrix's rows padded to gemm_row_stride, then viewed back.
Tensor with_aligned_rows(const Tensor& t, Transpose trans) {
  const Tensor stored = trans == Transpose::yes ? t.transpose(-1, -2) : t;  // row-major view
  Tensor view = ops::empty_with_gemm_aligned_rows(stored.sizes(), {.dtype = t.dtype(), .device = t.device()});
  view.copy_(stored);
  return trans == Transpose::yes ? view.transpose(-1, -2) : view;
}

// t itself when the kernel can read it in place, else a contiguous copy (or one with
// aligned rows, above); and how to read it.
std::pair<Tensor, MatrixLayout> kernel_operand(const Tensor& t) {
  Tensor in = t;
  std::optional<MatrixLayout> layout = in_place_layout(in);
  if (!layout) {
    in = t.contiguous();
    layout = in_place_layout(in);
  }
  if (needs_aligned_rows(in, *layout)) {
    in = with_aligned_rows(in, layout->trans);
    layout = in_place_layout(in);
  }
  return {in, *layout};
}

// The stride of dims [begin, end) of a layout merged into one dim, or nothing when
// they do not merge (0 when every one of them has size 1).
std::optional<int64_t> merged_stride(const Shape& sizes, const Shape& strides, size_t begin,
                                     size_t end) {
  std::optional<int64_t> inner;
  int64_t next_outer = 0;  // the stride the next non-size-1 dim outwards must have
  for (size_t d = end; d-- > begin;) {
    if (sizes[d] == 1) continue;
    if (inner && strides[d] != next_outer) return std::nullopt;
    if (!inner) inner = strides[d];
    next_outer = strides[d] * sizes[d];
  }
  return inner.value_or(0);
}

// The [rows, k] view of a tensor [..., k] (at least 2-D) whose leading dims merge into
// one row index and whose last dim is unit-stride, or nothing.
std::optional<Tensor> rows_view(const Tensor& x) {
  const int64_t k = x.size(-1);
  if (k > 1 && x.stride(-1) != 1) return std::nullopt;
  const auto row_stride = merged_stride(x.sizes(), x.strides(), 0, static_cast<size_t>(x.dim()) - 1);
  if (!row_stride) return std::nullopt;
  const int64_t rows = numel_of(Shape(x.sizes().begin(), x.sizes().end() - 1));
  return x.as_strided({rows, k}, {*row_stride, 1}, x.storage_offset());
}

// One batched GEMM (dtr/kernels/cpu/gemm.h's arguments) on `device`: the cpu, or a cuda
// device on its current stream.
template <class T>
void gemm_batched_on(Device device, int64_t batch, Transpose ta, Transpose tb, int64_t m, int64_t n,
                     int64_t k, Scalar alpha, const T* a, int64_t lda, int64_t stride_a, const T* b,
                     int64_t ldb, int64_t stride_b, Scalar beta, T* c, int64_t ldc, int64_t stride_c,
                     const kernels::GemmEpilogue<T>& epilogue = {}) {
#ifdef DTR_WITH_CUDA
  if (device.is_cuda()) {
    if constexpr (std::is_same_v<T, double>) {
      DTR_FAIL("gemm: no f64 GEMM on {}", device);  // refused earlier by check_operands
    } else {
      cuda::DeviceGuard guard(device.index);
      kernels::cuda::gemm_batched<T>(batch, ta, tb, m, n, k, alpha.to<float>(), a, lda, stride_a, b,
                                     ldb, stride_b, beta.to<float>(), c, ldc, stride_c,
                                     cuda::current_stream(device.index), epilogue);
    }
    return;
  }
#endif
  DTR_INTERNAL_ASSERT(device.is_cpu(), "GEMM on {}", device);
  kernels::cpu::gemm_batched<T>(batch, ta, tb, m, n, k, alpha.to<acc_t<T>>(), a, lda, stride_a, b,
                                ldb, stride_b, beta.to<acc_t<T>>(), c, ldc, stride_c, epilogue);
}

// out[batch..., m, n] = alpha * a[batch..., m, k] . b[batch..., k, n] + beta * out, where
// a and b are expanded to out's batch dims, read as la and lb, and out is contiguous.
// The longest run of trailing batch dims that merges for both operands goes to the
// kernel as one strided batch; the leading batch dims are looped over here.
void batched_product(std::string_view op, const Tensor& a, MatrixLayout la, const Tensor& b,
                     MatrixLayout lb, const Tensor& out, Scalar alpha, Scalar beta) {
  const size_t batch_dims = static_cast<size_t>(out.dim()) - 2;
  const Shape& batch = out.sizes();  // its first batch_dims entries
  size_t split = 0;                  // first batch dim handed to the kernel
  while (split < batch_dims && !(merged_stride(a.sizes(), a.strides(), split, batch_dims) &&
                                 merged_stride(b.sizes(), b.strides(), split, batch_dims))) {
    ++split;
  }
  int64_t outer = 1, inner = 1;
  for (size_t d = 0; d < batch_dims; ++d) (d < split ? outer : inner) *= batch[d];
  const int64_t stride_a = *merged_stride(a.sizes(), a.strides(), split, batch_dims);
  const int64_t stride_b = *merged_stride(b.sizes(), b.strides(), split, batch_dims);
  const int64_t stride_c = *merged_stride(out.sizes(), out.strides(), split, batch_dims);
  const int64_t m = out.size(-2), n = out.size(-1), k = a.size(-1);

  dispatch_floating(out.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* pa = a.data<T>();
    const T* pb = b.data<T>();
    T* pc = out.data<T>();
    for (int64_t o = 0; o < outer; ++o) {
      int64_t off_a = 0, off_b = 0, off_c = 0;
      int64_t rem = o;
      for (size_t d = split; d-- > 0;) {
        const int64_t index = rem % batch[d];
        rem /= batch[d];
        off_a += index * a.stride(static_cast<int64_t>(d));
        off_b += index * b.stride(static_cast<int64_t>(d));
        off_c += index * out.stride(static_cast<int64_t>(d));
      }
      gemm_batched_on<T>(out.device(), inner, la.trans, lb.trans, m, n, k, alpha, pa + off_a, la.ld,
                         stride_a, pb + off_b, lb.ld, stride_b, beta, pc + off_c, out.stride(-2),
                         stride_c);
    }
  });
}

// out = alpha * a . b + beta * out, with a [..., m, k] and b [..., k, n] whose batch
// dims broadcast to those of out [..., m, n] (contiguous, on the operands' device).
void product_into(std::string_view op, const Tensor& a, const Tensor& b, const Tensor& out,
                  Scalar alpha, Scalar beta) {
  const int64_t k = a.size(-1), n = b.size(-1);
  // [..., m, k] . [k, n] with a's leading dims mergeable into its rows: one [rows, k] GEMM.
  if (b.dim() == 2 && a.dim() > 2) {
    if (auto a_rows = rows_view(a)) {
      product_into(op, *a_rows, b, out.view({a_rows->size(0), n}), alpha, beta);
      return;
    }
  }
  Shape a_shape(out.sizes().begin(), out.sizes().end() - 2);
  Shape b_shape = a_shape;
  auto [a_in, la] = kernel_operand(a);
  auto [b_in, lb] = kernel_operand(b);
  a_shape.insert(a_shape.end(), {a.size(-2), k});
  b_shape.insert(b_shape.end(), {k, n});
  batched_product(op, a_in.expand(a_shape), la, b_in.expand(b_shape), lb, out, alpha, beta);
}

// The operands share one device and one floating dtype (f64 only off cuda).
void check_operands(std::string_view op, std::initializer_list<const Tensor*> operands) {
  const Device device = ops::check_device(op, operands, ops::Kernels::cpu_and_cuda);
  DType dtype = ops::check_same_dtype(op, operands);
  dispatch_floating(dtype, op, [](auto) {});
  DTR_CHECK(!(device.is_cuda() && dtype == DType::f64),
            "{}: f64 tensors on {} are not supported: there is no f64 CUDA GEMM (use f32, bf16 or "
            "f16 on cuda, or compute in f64 on the cpu)",
            op, device);
}

void check_inner_dims(std::string_view op, const Tensor& a, const Tensor& b, int64_t a_inner,
                      int64_t b_inner) {
  DTR_CHECK(a_inner == b_inner, "{}: inner dims differ: a is {}, b is {}", op, shape_str(a.sizes()),
            shape_str(b.sizes()));
}

TensorOptions result_options(const Tensor& like) {
  return {.dtype = like.dtype(), .device = like.device()};
}

// The ops without autograd: each public op below runs one under NoGradGuard (so
// the views and copies made of its operands record nothing) and then records its
// own backward node.

Tensor compute_matmul(const Tensor& a, const Tensor& b) {
  constexpr std::string_view op = "matmul";
  check_operands(op, {&a, &b});
  DTR_CHECK(a.dim() >= 1 && b.dim() >= 1,
            "matmul: both operands need at least 1 dim, got a of shape {} and b of shape {}",
            shape_str(a.sizes()), shape_str(b.sizes()));
  // 1-D operands become a row (a) or a column (b), removed from the result again.
  const Tensor a2 = a.dim() == 1 ? a.unsqueeze(0) : a;
  const Tensor b2 = b.dim() == 1 ? b.unsqueeze(1) : b;
  check_inner_dims(op, a, b, a2.size(-1), b2.size(-2));

  const Shape batch_a(a2.sizes().begin(), a2.sizes().end() - 2);
  const Shape batch_b(b2.sizes().begin(), b2.sizes().end() - 2);
  for (size_t i = 1; i <= std::min(batch_a.size(), batch_b.size()); ++i) {
    const int64_t da = batch_a[batch_a.size() - i], db = batch_b[batch_b.size() - i];
    DTR_CHECK(da == db || da == 1 || db == 1,
              "matmul: batch dims do not broadcast: a is {}, b is {}", shape_str(a.sizes()),
              shape_str(b.sizes()));
  }
  Shape shape = ops::broadcast_shapes(op, batch_a, batch_b);  // batch dims, then m and n
  Shape result_shape = shape;
  if (a.dim() > 1) result_shape.push_back(a2.size(-2));
  if (b.dim() > 1) result_shape.push_back(b2.size(-1));
  shape.insert(shape.end(), {a2.size(-2), b2.size(-1)});

  Tensor out = empty(shape, result_options(a));
  if (!out.device().is_meta()) product_into(op, a2, b2, out, 1, 0);
  return out.view(result_shape);
}

Tensor compute_mm(const Tensor& a, const Tensor& b) {
  constexpr std::string_view op = "mm";
  check_operands(op, {&a, &b});
  DTR_CHECK(a.dim() == 2 && b.dim() == 2,
            "mm: expected 2-D tensors, got a of shape {} and b of shape {}", shape_str(a.sizes()),
            shape_str(b.sizes()));
  check_inner_dims(op, a, b, a.size(1), b.size(0));
  Tensor out = empty({a.size(0), b.size(1)}, result_options(a));
  if (!out.device().is_meta()) product_into(op, a, b, out, 1, 0);
  return out;
}

Tensor compute_bmm(const Tensor& a, const Tensor& b) {
  constexpr std::string_view op = "bmm";
  check_operands(op, {&a, &b});
  DTR_CHECK(a.dim() == 3 && b.dim() == 3,
            "bmm: expected 3-D tensors, got a of shape {} and b of shape {}", shape_str(a.sizes()),
            shape_str(b.sizes()));
  DTR_CHECK(a.size(0) == b.size(0), "bmm: batch sizes differ: a is {}, b is {}",
            shape_str(a.sizes()), shape_str(b.sizes()));
  check_inner_dims(op, a, b, a.size(2), b.size(1));
  Tensor out = empty({a.size(0), a.size(1), b.size(2)}, result_options(a));
  if (!out.device().is_meta()) product_into(op, a, b, out, 1, 0);
  return out;
}

Tensor compute_addmm(const Tensor& c, const Tensor& a, const Tensor& b, Scalar beta, Scalar alpha) {
  constexpr std::string_view op = "addmm";
  check_operands(op, {&c, &a, &b});
  DTR_CHECK(a.dim() == 2 && b.dim() == 2,
            "addmm: expected 2-D a and b, got a of shape {} and b of shape {}",
            shape_str(a.sizes()), shape_str(b.sizes()));
  check_inner_dims(op, a, b, a.size(1), b.size(0));
  const Shape shape{a.size(0), b.size(1)};
  DTR_CHECK(ops::broadcast_shapes(op, c.sizes(), shape) == shape,
            "addmm: c of shape {} does not broadcast to the product's shape {}",
            shape_str(c.sizes()), shape_str(shape));
  Tensor out = empty(shape, result_options(a));
  if (out.device().is_meta()) return out;
  if (beta.to_double() != 0) out.copy_(c);  // beta == 0 leaves out unread by the kernel
  product_into(op, a, b, out, alpha, beta);
  return out;
}

// x's rows as one [rows, k] matrix: a view when x's leading dims merge and its last
// dim is unit-stride, else a contiguous copy.
Tensor rows_of(const Tensor& x) {
  if (x.dim() == 1) return x.unsqueeze(0);
  if (auto rows = rows_view(x)) return *rows;
  return x.contiguous().view({numel_of(Shape(x.sizes().begin(), x.sizes().end() - 1)), x.size(-1)});
}

kernels::GemmActivation gemm_activation(LinearActivation activation) {
  switch (activation) {
    case LinearActivation::gelu_tanh: return kernels::GemmActivation::gelu_tanh;
    case LinearActivation::gelu_erf: return kernels::GemmActivation::gelu_erf;
    default: return kernels::GemmActivation::none;
  }
}

struct LinearResult {
  Tensor out;  // [..., out_features]
  Tensor pre;  // the pre-activation, of out's shape; undefined without an activation
};

// act(x . weight^T + bias) in one GEMM with the bias and activation in its epilogue.
LinearResult compute_linear(const Tensor& x, const Tensor& weight, const Tensor& bias,
                            LinearActivation activation) {
  constexpr std::string_view op = "linear";
  DTR_CHECK(weight.defined() && weight.dim() == 2, "linear: weight must be 2-D [out, in], got {}",
            weight.defined() ? shape_str(weight.sizes()) : "undefined");
  DTR_CHECK(x.defined() && x.dim() >= 1 && x.size(-1) == weight.size(1),
            "linear: input's last dim must be in_features {}, got input {}", weight.size(1),
            x.defined() ? shape_str(x.sizes()) : "undefined");
  DTR_CHECK(!bias.defined() || bias.sizes() == Shape{weight.size(0)},
            "linear: bias must be [{}], got {}", weight.size(0), bias.defined() ? shape_str(bias.sizes()) : "");
  if (bias.defined()) {
    check_operands(op, {&x, &weight, &bias});
  } else {
    check_operands(op, {&x, &weight});
  }
  const int64_t out_features = weight.size(0), k = weight.size(1);
  Shape shape(x.sizes().begin(), x.sizes().end() - 1);
  shape.push_back(out_features);
  const TensorOptions options = result_options(x);
  LinearResult r{empty(shape, options), {}};
  if (activation != LinearActivation::none) r.pre = empty(shape, options);
  if (r.out.device().is_meta() || r.out.numel() == 0) return r;  // k == 0 still gives act(bias)
  const Tensor x_rows = rows_of(x);
  const int64_t rows = x_rows.size(0);
  // Plain variables, not structured bindings: the lambda below captures them,
  // which clang before 16 does not allow for bindings.
  const std::pair<Tensor, MatrixLayout> a_operand = kernel_operand(x_rows), b_operand = kernel_operand(weight.t());
  const Tensor& a = a_operand.first;
  const Tensor& b = b_operand.first;
  const MatrixLayout& la = a_operand.second;
  const MatrixLayout& lb = b_operand.second;
  const Tensor bias_c = bias.defined() ? bias.contiguous() : Tensor();
  dispatch_floating(x.dtype(), op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const kernels::GemmEpilogue<T> epilogue{.bias = bias_c.defined() ? bias_c.data<T>() : nullptr,
                                            .activation = gemm_activation(activation),
                                            .pre = r.pre.defined() ? r.pre.data<T>() : nullptr};
    gemm_batched_on<T>(x.device(), 1, la.trans, lb.trans, rows, out_features, k, 1, a.data<T>(), la.ld, 0,
                       b.data<T>(), lb.ld, 0, 0, r.out.data<T>(), out_features, 0, epilogue);
  });
  return r;
}

}  // namespace

namespace {

// Runs compute() without recording; each op then records one node for itself.
template <class Compute>
Tensor untracked(Compute&& compute) {
  NoGradGuard no_grad;
  return compute();
}

}  // namespace

namespace ops {

Tensor with_gemm_aligned_rows(const Tensor& g) {
  if (g.dim() < 2) return g;
  const std::optional<MatrixLayout> layout = in_place_layout(g);
  return layout && needs_aligned_rows(g, *layout) ? with_aligned_rows(g, layout->trans) : g;
}

}  // namespace ops

Tensor matmul(const Tensor& a, const Tensor& b) {
  Tensor out = untracked([&] { return compute_matmul(a, b); });
  ops::record_matmul_backward(a, b, out);
  return out;
}

Tensor mm(const Tensor& a, const Tensor& b) {
  Tensor out = untracked([&] { return compute_mm(a, b); });
  ops::record_mm_backward(a, b, out);
  return out;
}

Tensor bmm(const Tensor& a, const Tensor& b) {
  Tensor out = untracked([&] { return compute_bmm(a, b); });
  ops::record_bmm_backward(a, b, out);
  return out;
}

Tensor addmm(const Tensor& c, const Tensor& a, const Tensor& b, Scalar beta, Scalar alpha) {
  Tensor out = untracked([&] { return compute_addmm(c, a, b, beta, alpha); });
  ops::record_addmm_backward(c, a, b, beta, alpha, out);
  return out;
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias, LinearActivation activation) {
  LinearResult r;
  {
    NoGradGuard no_grad;
    r = compute_linear(x, weight, bias, activation);
  }
  if (activation == LinearActivation::none) {
    ops::record_linear_backward(x, weight, bias, r.out);
    return r.out;
  }
  // Two nodes: the product's, then the activation's on the saved pre-activation.
  ops::record_linear_backward(x, weight, bias, r.pre);
  ops::record_unary_grad(activation == LinearActivation::gelu_tanh ? kernels::UnaryOp::gelu_tanh
                                                                   : kernels::UnaryOp::gelu_erf,
                         r.pre, r.out);
  return r.out;
}

}  // namespace dtr
