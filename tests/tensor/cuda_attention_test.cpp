// scaled_dot_product_attention (dtr/tensor/ops/attention.h) on cuda tensors against the
// same op on the cpu: the output and the gradients of q, k and v (autograd backward
// with one random dout), over B in {1, 2}, (Hq, Hkv) in {(1,1), (4,4), (8,2), (6,1)},
// T and S in {1, 2, 17, 64, 129, 256} (T == S and T != S), D in {16, 32, 64, 80, 128},
// causal or not, for f32, bf16 and f16 (bf16/f16 on both the tensor-core and the
// CUDA-core kernels), plus f64, D = 256, non-contiguous inputs, the kernels' lse
// (dtr/kernels/cuda/attention.h against dtr/kernels/cpu/attention.h), rows that see no key,
// empty sizes, run-to-run determinism and errors. Strided operands, read and written
// in place: q, k, v stored [B, L, H, D] as an attention layer passes them (out and the
// gradients must come back in that order), slices of one fused qkv buffer, and rows
// padded to an odd stride (CUDA-core kernels only); and the strided kernel overloads
// against the contiguous ones on contiguous copies, bitwise. Inputs are fresh random
// numbers each run (the seed is printed on failure): q, k uniform in [-2, 2) (a peaked
// softmax), v and dout in [-1, 1).
//
// Tolerances. Both devices compute in f32 (f64 for f64) from the same rounded inputs,
// in different orders. The output is compared element by element,
// |gpu - cpu| <= atol + rtol |cpu| (|out| <= max|v| = 1):
//   f32 atol 2e-5, rtol 1e-5; f64 1e-12, 1e-12;
//   bf16 atol 2^-8, rtol 2^-6 (each side rounds its f32 result once, <= 2^-8 |x| each,
//   and the tensor-core kernels round P to bf16 before P.V: <= 2^-9 sum_s p_s |v_s|);
//   f16 atol 2^-10, rtol 2^-9 (the same with f16's 3 more bits).
// Gradients are compared as ||gpu - cpu|| / ||cpu|| (over the whole tensor), within
//   f32 1e-4, f64 1e-10, bf16 2e-2, f16 4e-3: bf16/f16 gradients are rounded once, the
// cuda backward sees out rounded to the dtype (the cpu one keeps it in f32), and the
// tensor-core kernels round P and dS to the dtype before their products.
#include "dtr/base/error.h"
#include "tests/support/gpu_test_support.h"
#include "dtr/kernels/cpu/attention.h"
#include "dtr/kernels/cuda/attention.h"
#include "dtr/tensor/cuda/cuda_runtime.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/attention.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

using namespace dtr;
using namespace dtr::testing::gpu;

namespace {

// Elements of [B, H, T, D] `got` off `want` by more than atol + rtol |want|; describes the first.
struct Mismatches {
  int64_t count = 0;
  std::string first;
};

Mismatches compare(const Tensor& got, const Tensor& want, double atol, double rtol) {
  const std::vector<double> g = values_of(got), w = values_of(want);
  Mismatches m;
  if (g.size() != w.size()) {
    m.count = 1;
    m.first = "sizes differ";
    return m;
  }
  const Shape shape = want.sizes();
  for (size_t i = 0; i < w.size(); ++i) {
    const bool ok = std::isfinite(g[i]) && std::fabs(g[i] - w[i]) <= atol + rtol * std::fabs(w[i]);
    if (!ok && m.count++ == 0) {
      std::ostringstream os;
      os.precision(9);
      os << "flat index " << i;
      if (shape.size() == 4) {
        const int64_t D = shape[3], T = shape[2], H = shape[1];
        const auto j = static_cast<int64_t>(i);
        os << " = [b " << j / (D * T * H) << ", h " << j / (D * T) % H << ", t " << j / D % T << ", d "
           << j % D << "]";
      }
      os << ": gpu " << g[i] << ", cpu " << w[i];
      m.first = os.str();
    }
  }
  return m;
}

#define CHECK_CLOSE(got, want, atol, rtol)                                                  \
  do {                                                                                      \
    const Mismatches mm_ = compare((got), (want), (atol), (rtol));                          \
    INFO(#got << ": " << mm_.count << " elements off; first at " << mm_.first);             \
    CHECK(mm_.count == 0);                                                                  \
  } while (0)

struct Tolerance {
  double atol, rtol, grad;
};

Tolerance tolerance(DType dtype) {
  switch (dtype) {
    case DType::f64: return {1e-12, 1e-12, 1e-10};
    case DType::bf16: return {1.0 / 256, 1.0 / 64, 2e-2};
    case DType::f16: return {1.0 / 1024, 1.0 / 512, 4e-3};
    default: return {2e-5, 1e-5, 1e-4};
  }
}

struct Case {
  int64_t B, Hq, Hkv, T, S, D;
  bool causal;
  DType dtype;
};

std::string describe(const Case& c) {
  std::ostringstream os;
  os << name_of(c.dtype) << " B " << c.B << " Hq " << c.Hq << " Hkv " << c.Hkv << " T " << c.T << " S "
     << c.S << " D " << c.D << (c.causal ? " causal" : " full");
  return os.str();
}

// Inputs of a case, on the cpu, in the case's dtype.
struct Inputs {
  Tensor q, k, v, dout;
};

Inputs make_inputs(const Case& c, std::mt19937& gen) {
  return {random_cpu({c.B, c.Hq, c.T, c.D}, c.dtype, gen, -2, 2),
          random_cpu({c.B, c.Hkv, c.S, c.D}, c.dtype, gen, -2, 2),
          random_cpu({c.B, c.Hkv, c.S, c.D}, c.dtype, gen, -1, 1),
          random_cpu({c.B, c.Hq, c.T, c.D}, c.dtype, gen, -1, 1)};
}

struct Outputs {
  Tensor out, dq, dk, dv;
};

// Forward and backward of the op on `device` (copies of the cpu inputs as leaves).
Outputs run_op(const Inputs& in, bool causal, const Device& device, std::optional<double> scale = std::nullopt) {
  const Tensor q = (device.is_cpu() ? in.q.detach() : in.q.to(device)).requires_grad_();
  const Tensor k = (device.is_cpu() ? in.k.detach() : in.k.to(device)).requires_grad_();
  const Tensor v = (device.is_cpu() ? in.v.detach() : in.v.to(device)).requires_grad_();
  Tensor out = scaled_dot_product_attention(q, k, v, causal, scale);
  out.backward(in.dout.to(device));
  return {out, q.grad(), k.grad(), v.grad()};
}

// Allows or forbids the tensor-core kernels for a scope (allowed again at its end).
struct TensorCores {
  explicit TensorCores(bool on) { kernels::cuda::attention_enable_tensor_cores(on); }
  ~TensorCores() { kernels::cuda::attention_enable_tensor_cores(true); }
  TensorCores(const TensorCores&) = delete;
  TensorCores& operator=(const TensorCores&) = delete;
};

// ||got - want|| relative to the larger of ||want|| and the norm a tensor of want's size
// has at the root-mean-square of `typical` (the cpu's dv). With a single key (S == 1
// unmasked) softmax's gradient cancels: the exact dq and dk are 0, and each device returns
// its own rounding noise, which a plain relative error would divide by the cpu's noise.
double score_gradient_error(const Tensor& got, const Tensor& want, const Tensor& typical) {
  const std::vector<double> g = values_of(got), w = values_of(want), t = values_of(typical);
  REQUIRE(g.size() == w.size());
  double diff = 0, norm = 0, typical_sq = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    diff += (g[i] - w[i]) * (g[i] - w[i]);
    norm += w[i] * w[i];
  }
  for (const double x : t) typical_sq += x * x;
  const double floor = t.empty() ? 0 : typical_sq / static_cast<double>(t.size()) * static_cast<double>(w.size());
  const double scale = std::max(norm, floor);
  return scale == 0 ? std::sqrt(diff) : std::sqrt(diff / scale);
}

// The cuda op's output and gradients against the cpu op's: out within the value
// tolerance of the dtype, dq, dk and dv within its gradient tolerance.
void check_outputs(const Outputs& got, const Outputs& want, DType dtype) {
  const Tolerance tol = tolerance(dtype);
  REQUIRE(got.out.device() == kGpu);
  REQUIRE(got.out.dtype() == dtype);
  REQUIRE(got.out.sizes() == want.out.sizes());
  CHECK_CLOSE(got.out, want.out, tol.atol, tol.rtol);
  REQUIRE(got.dq.defined());
  REQUIRE(got.dk.defined());
  REQUIRE(got.dv.defined());
  CHECK(got.dq.dtype() == dtype);
  CHECK(got.dk.sizes() == want.dk.sizes());
  CHECK(score_gradient_error(got.dq, want.dq, want.dv) <= tol.grad);
  CHECK(score_gradient_error(got.dk, want.dk, want.dv) <= tol.grad);
  CHECK(relative_error(got.dv, want.dv) <= tol.grad);
}

// check(tensor_cores, half) with the tensor-core kernels allowed, and for bf16/f16
// also forbidden (the CUDA-core kernels); half says whether the dtype is 16-bit.
template <class Check>
void for_each_kernel_family(DType dtype, Check&& check) {
  const bool half = dtype == DType::bf16 || dtype == DType::f16;
  for (const bool tensor_cores : {true, false}) {
    if (!tensor_cores && !half) continue;
    CAPTURE(tensor_cores);
    const TensorCores scope(tensor_cores);
    check(tensor_cores, half);
  }
}

// The op on cuda against the op on the cpu for one case; bf16/f16 on both the
// tensor-core and the CUDA-core kernels.
void check_case(const Case& c, std::mt19937& gen) {
  CAPTURE(describe(c));
  const Inputs in = make_inputs(c, gen);
  const Outputs want = run_op(in, c.causal, kCpu);
  for_each_kernel_family(c.dtype, [&](bool tensor_cores, bool half) {
    const Outputs got = run_op(in, c.causal, kGpu);
    // The backward ran last (autograd runs on this thread): it took the tensor cores
    // exactly when they were allowed and take the case.
    const bool tc_case = tensor_cores && half && (c.D == 64 || c.D == 128);
    CHECK((kernels::cuda::attention_last_path() == kernels::cuda::AttentionPath::tensor_core) == tc_case);
    check_outputs(got, want, c.dtype);
  });
}

// How a test lays out q, k, v (or out, dq, dk, dv) in memory; the op sees [B, H, L, D].
enum class Layout {
  bthd,    // each stored [B, L, H, D], seen through transpose(1, 2), as an attention layer passes them
  fused,   // slices of one [B, L, Hq + 2 Hkv, D] buffer (a fused qkv projection; needs T == S)
  padded,  // each stored [B, H, L, D + 3], narrowed to D: rows D + 3 apart, so no 16-byte vectors
};

std::string name_of(Layout layout) {
  switch (layout) {
    case Layout::bthd: return "bthd";
    case Layout::fused: return "fused";
    default: return "padded";
  }
}

// The [B, H, L, D] q, k, v (head counts Hq, Hkv) seen in `storage`, the buffers of
// `layout` (or their gradients, which have the same shapes).
std::array<Tensor, 3> views_of(Layout layout, const std::vector<Tensor>& storage, int64_t Hq, int64_t Hkv,
                               int64_t D) {
  switch (layout) {
    case Layout::bthd:
      return {storage[0].transpose(1, 2), storage[1].transpose(1, 2), storage[2].transpose(1, 2)};
    case Layout::fused:
      return {storage[0].narrow(2, 0, Hq).transpose(1, 2), storage[0].narrow(2, Hq, Hkv).transpose(1, 2),
              storage[0].narrow(2, Hq + Hkv, Hkv).transpose(1, 2)};
    default:
      return {storage[0].narrow(3, 0, D), storage[1].narrow(3, 0, D), storage[2].narrow(3, 0, D)};
  }
}

// Gpu buffers of `layout` holding the values of the cpu [B, H, L, D] tensors q, k, v
// (padding zero), optionally requiring grad; see them through views_of.
std::vector<Tensor> gpu_storage(Layout layout, const Tensor& q, const Tensor& k, const Tensor& v,
                                bool requires_grad) {
  const int64_t B = q.size(0), Hq = q.size(1), T = q.size(2), D = q.size(3), Hkv = k.size(1);
  const TensorOptions cpu{.dtype = q.dtype()};
  std::vector<Tensor> storage;
  switch (layout) {
    case Layout::bthd:
      for (const Tensor* x : {&q, &k, &v}) storage.push_back(x->transpose(1, 2).contiguous().to(kGpu));
      break;
    case Layout::fused: {
      REQUIRE(k.size(2) == T);
      const Tensor buffer = empty({B, T, Hq + 2 * Hkv, D}, cpu);
      buffer.narrow(2, 0, Hq).copy_(q.transpose(1, 2));
      buffer.narrow(2, Hq, Hkv).copy_(k.transpose(1, 2));
      buffer.narrow(2, Hq + Hkv, Hkv).copy_(v.transpose(1, 2));
      storage.push_back(buffer.to(kGpu));
      break;
    }
    case Layout::padded:
      for (const Tensor* x : {&q, &k, &v}) {
        const Tensor buffer = zeros({x->size(0), x->size(1), x->size(2), D + 3}, cpu);
        buffer.narrow(3, 0, D).copy_(*x);
        storage.push_back(buffer.to(kGpu));
      }
      break;
  }
  if (requires_grad) {
    for (const Tensor& x : storage) x.requires_grad_();
  }
  return storage;
}

// Whether `t` ([B, H, L, D]) is stored with its rows outside its heads, [B, L, H, D].
bool rows_outside_heads(const Tensor& t) { return t.stride(1) < t.stride(2); }

// The dout of a case stored [B, T, H, D] on the gpu, as the backward of an attention
// layer's transpose(1, 2) hands it over.
Tensor bthd_dout(const Inputs& in) { return in.dout.transpose(1, 2).contiguous().to(kGpu).transpose(1, 2); }

struct StridedOutputs {
  Outputs got;                   // out and the gradients of q, k, v as [B, H, L, D] views
  bool out_in_q_order = false;   // out's storage order of dims is q's
  int grads_in_input_order = 0;  // of q, k, v: those whose gradient came stored in their order of dims
};

// Forward and backward of the op on q, k, v in `layout` on the gpu, with a [B, T, H, D]
// stored dout.
StridedOutputs run_op_strided(const Inputs& in, bool causal, Layout layout) {
  const int64_t Hq = in.q.size(1), Hkv = in.k.size(1), D = in.q.size(3);
  const std::vector<Tensor> storage = gpu_storage(layout, in.q, in.k, in.v, /*requires_grad=*/true);
  const std::array<Tensor, 3> x = views_of(layout, storage, Hq, Hkv, D);
  StridedOutputs r;
  for (const Tensor& t : x) {
    t.register_hook([&r, order = rows_outside_heads(t)](const Tensor& g) {
      if (g.stride(3) == 1 && rows_outside_heads(g) == order) ++r.grads_in_input_order;
      return Tensor();
    });
  }
  const Tensor out = scaled_dot_product_attention(x[0], x[1], x[2], causal);
  r.out_in_q_order = out.stride(3) == 1 && rows_outside_heads(out) == rows_outside_heads(x[0]);
  out.backward(bthd_dout(in));
  std::vector<Tensor> grads;
  for (const Tensor& t : storage) grads.push_back(t.grad());
  const std::array<Tensor, 3> g = views_of(layout, grads, Hq, Hkv, D);
  r.got = {out, g[0], g[1], g[2]};
  return r;
}

// The op on q, k, v in `layout` against the op on contiguous cpu tensors; bf16/f16 on
// both kernel families where the case and the layout allow tensor cores.
void check_strided_case(const Case& c, Layout layout, std::mt19937& gen) {
  CAPTURE(describe(c), name_of(layout));
  const Inputs in = make_inputs(c, gen);
  const Outputs want = run_op(in, c.causal, kCpu);
  for_each_kernel_family(c.dtype, [&](bool tensor_cores, bool half) {
    const StridedOutputs got = run_op_strided(in, c.causal, layout);
    // Padded rows (D + 3 apart) cannot take 16-byte copies: the CUDA-core kernels run.
    const bool tc_case = tensor_cores && half && (c.D == 64 || c.D == 128) && layout != Layout::padded;
    CHECK((kernels::cuda::attention_last_path() == kernels::cuda::AttentionPath::tensor_core) == tc_case);
    CHECK(got.out_in_q_order);
    CHECK(got.grads_in_input_order == 3);
    if (layout == Layout::bthd) {
      // The layer's transpose back and merge of the heads is then a view, not a copy.
      const Tensor merged = got.got.out.transpose(1, 2).reshape({c.B, c.T, c.Hq * c.D});
      CHECK(merged.is_contiguous());
      CHECK(merged.raw_data() == got.got.out.raw_data());
    }
    check_outputs(got.got, want, c.dtype);
  });
}

kernels::cuda::AttentionStrides strides_of(const Tensor& t) {
  return {.batch = t.stride(0), .head = t.stride(1), .row = t.stride(2)};
}

// The strided kernel overloads on q, k, v, dout, out, dq, dk, dv in `layout` against the
// contiguous overloads on contiguous copies: the same path, bitwise the same out, lse,
// delta and gradients (strides move addresses, never the order of a sum).
template <class T>
void check_kernel_layout(const Case& c, Layout layout, std::mt19937& gen) {
  using A = acc_t<T>;
  CAPTURE(describe(c), name_of(layout));
  const Inputs in = make_inputs(c, gen);
  const kernels::cpu::AttentionDims dims{.batch = c.B, .q_heads = c.Hq, .kv_heads = c.Hkv, .q_len = c.T,
                                         .kv_len = c.S, .head_dim = c.D, .causal = c.causal,
                                         .scale = 1.0 / std::sqrt(static_cast<double>(c.D))};
  const auto x = views_of(layout, gpu_storage(layout, in.q, in.k, in.v, false), c.Hq, c.Hkv, c.D);
  const Tensor dout = bthd_dout(in);
  // Outputs in the same layout, zero-filled (so is their padding).
  const Tensor out = views_of(layout, gpu_storage(layout, zeros_like(in.q), in.k, in.v, false), c.Hq, c.Hkv,
                              c.D)[0];
  const auto g = views_of(layout, gpu_storage(layout, zeros_like(in.q), zeros_like(in.k), zeros_like(in.v), false),
                          c.Hq, c.Hkv, c.D);
  const Tensor qc = x[0].contiguous(), kc = x[1].contiguous(), vc = x[2].contiguous(), doutc = dout.contiguous();
  const TensorOptions acc{.dtype = dtype_of<A>, .device = kGpu};
  const TensorOptions cont{.dtype = c.dtype, .device = kGpu};
  Tensor lse = empty({c.B, c.Hq, c.T}, acc), lse_c = empty({c.B, c.Hq, c.T}, acc);
  Tensor delta = empty({c.B, c.Hq, c.T}, acc), delta_c = empty({c.B, c.Hq, c.T}, acc);
  Tensor out_c = empty(qc.sizes(), cont), dq_c = empty(qc.sizes(), cont);
  Tensor dk_c = empty(kc.sizes(), cont), dv_c = empty(vc.sizes(), cont);
  const cudaStream_t stream = cuda::current_stream(0);
  namespace kcuda = kernels::cuda;

  kcuda::attention_forward<T>(x[0].data<T>(), x[1].data<T>(), x[2].data<T>(), dims,
                              {strides_of(x[0]), strides_of(x[1]), strides_of(x[2]), strides_of(out)},
                              out.data<T>(), lse.data<A>(), stream);
  const kcuda::AttentionPath forward_path = kcuda::attention_last_path();
  kcuda::attention_forward<T>(qc.data<T>(), kc.data<T>(), vc.data<T>(), dims, out_c.data<T>(), lse_c.data<A>(),
                              stream);
  CHECK(forward_path == kcuda::attention_last_path());
  CHECK(same_bits(out, out_c));
  CHECK(same_bits(lse, lse_c));

  const kcuda::AttentionBackwardStrides strides{strides_of(x[0]), strides_of(x[1]), strides_of(x[2]),
                                                strides_of(out), strides_of(dout), strides_of(g[0]),
                                                strides_of(g[1]), strides_of(g[2])};
  kcuda::attention_backward<T>(x[0].data<T>(), x[1].data<T>(), x[2].data<T>(), out.data<T>(), lse.data<A>(),
                               dout.data<T>(), dims, strides, g[0].data<T>(), g[1].data<T>(), g[2].data<T>(),
                               delta.data<A>(), stream);
  const kcuda::AttentionPath backward_path = kcuda::attention_last_path();
  kcuda::attention_backward<T>(qc.data<T>(), kc.data<T>(), vc.data<T>(), out_c.data<T>(), lse_c.data<A>(),
                               doutc.data<T>(), dims, dq_c.data<T>(), dk_c.data<T>(), dv_c.data<T>(),
                               delta_c.data<A>(), stream);
  CHECK(backward_path == kcuda::attention_last_path());
  CHECK(same_bits(delta, delta_c));
  CHECK(same_bits(g[0], dq_c));
  CHECK(same_bits(g[1], dk_c));
  CHECK(same_bits(g[2], dv_c));
  // The padding around the strided outputs stays untouched (zero).
  if (layout == Layout::padded) {
    const Tensor padded_out = out.as_strided({c.B, c.Hq, c.T, 3}, out.strides(), out.storage_offset() + c.D);
    for (const double value : values_of(padded_out)) CHECK(value == 0.0);
  }
}

}  // namespace

TEST_CASE("cuda attention forward and gradients match the cpu over shapes, heads, dtypes and masks",
          "[gpu][attention]") {
  const unsigned seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937 gen(seed);
  // (T, S) pairs, cycled through the other parameters: every length as T and as S,
  // equal and unequal (T > S with causal leaves rows that see no key).
  const std::vector<std::pair<int64_t, int64_t>> lengths = {
      {1, 1},    {2, 2},    {17, 17},  {64, 64},  {129, 129}, {256, 256}, {1, 17},  {2, 64},
      {17, 129}, {64, 256}, {129, 1},  {256, 2},  {17, 2},    {64, 17},   {129, 64}, {256, 129},
      {2, 1},    {1, 256},  {129, 17}, {64, 129}};
  const std::vector<std::pair<int64_t, int64_t>> heads = {{1, 1}, {4, 4}, {8, 2}, {6, 1}};
  size_t next = 0;
  for (const DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    for (const auto& [hq, hkv] : heads) {
      for (const int64_t D : {16, 32, 64, 80, 128}) {
        for (const bool causal : {false, true}) {
          const auto [T, S] = lengths[next % lengths.size()];
          const int64_t B = 1 + static_cast<int64_t>(next / 3 % 2);
          ++next;
          // The largest cases (B 2, 8 heads, 256 x 256) stay few: their cpu reference is the cost.
          check_case({B, hq, hkv, T, S, D, causal, dtype}, gen);
        }
      }
    }
  }
}

TEST_CASE("cuda attention in f64, with head_dim 256 and with a given scale matches the cpu", "[gpu][attention]") {
  const unsigned seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937 gen(seed);
  check_case({2, 4, 2, 33, 47, 24, true, DType::f64}, gen);
  check_case({1, 2, 1, 129, 64, 128, false, DType::f64}, gen);
  check_case({1, 2, 2, 17, 64, 256, true, DType::f64}, gen);
  for (const DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    check_case({1, 2, 1, 70, 70, 256, true, dtype}, gen);
    check_case({2, 3, 3, 65, 31, 200, false, dtype}, gen);
    check_case({1, 4, 2, 96, 96, 96, true, dtype}, gen);
    check_case({1, 2, 2, 40, 50, 1, false, dtype}, gen);
  }
  // An explicit scale (a sharper softmax).
  const Case c{1, 4, 2, 65, 65, 64, true, DType::f32};
  CAPTURE(describe(c));
  const Inputs in = make_inputs(c, gen);
  const Outputs want = run_op(in, c.causal, kCpu, 0.9);
  const Outputs got = run_op(in, c.causal, kGpu, 0.9);
  CHECK_CLOSE(got.out, want.out, 2e-5, 1e-5);
  CHECK(relative_error(got.dq, want.dq) <= 1e-4);
  CHECK(relative_error(got.dk, want.dk) <= 1e-4);
  CHECK(relative_error(got.dv, want.dv) <= 1e-4);
}

// Only the gradients asked for: with some of q, k, v not requiring grad, the backward
// skips the dq kernel or the dk/dv kernel (or stores only one of dk, dv). Each gradient
// it does compute comes from the same kernel as in the full backward, so it must equal
// that one bit for bit; the full backward is checked against the cpu as well.
TEST_CASE("cuda attention computes only the gradients asked for and each equals the full backward's",
          "[gpu][attention]") {
  const unsigned seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937 gen(seed);
  const std::vector<Case> cases = {{2, 8, 2, 129, 129, 64, true, DType::bf16},
                                   {1, 4, 4, 70, 90, 128, false, DType::f16},
                                   {2, 4, 2, 65, 65, 40, true, DType::f32}};
  const std::vector<std::array<bool, 3>> asked = {
      {true, false, false}, {false, true, false}, {false, false, true}, {false, true, true}, {true, false, true}};
  for (const Case& c : cases) {
    CAPTURE(describe(c));
    const Inputs in = make_inputs(c, gen);
    const Outputs want = run_op(in, c.causal, kCpu);
    for_each_kernel_family(c.dtype, [&](bool, bool) {
      const Outputs full = run_op(in, c.causal, kGpu);
      check_outputs(full, want, c.dtype);
      for (const std::array<bool, 3>& needs : asked) {
        CAPTURE(needs[0], needs[1], needs[2]);
        const Tensor q = in.q.to(kGpu).detach().requires_grad_(needs[0]);
        const Tensor k = in.k.to(kGpu).detach().requires_grad_(needs[1]);
        const Tensor v = in.v.to(kGpu).detach().requires_grad_(needs[2]);
        scaled_dot_product_attention(q, k, v, c.causal).backward(in.dout.to(kGpu));
        const Tensor* full_grads[3] = {&full.dq, &full.dk, &full.dv};
        const Tensor* inputs[3] = {&q, &k, &v};
        for (int i = 0; i < 3; ++i) {
          CAPTURE(i);
          REQUIRE(inputs[i]->grad().defined() == needs[i]);
          if (needs[i]) CHECK(same_bits(inputs[i]->grad(), *full_grads[i]));
        }
      }
    });
  }
}

TEST_CASE("cuda attention takes non-contiguous q, k, v like the cpu", "[gpu][attention]") {
  const unsigned seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937 gen(seed);
  for (const DType dtype : {DType::f32, DType::bf16}) {
    CAPTURE(name_of(dtype));
    // [B, T, H, D] storage seen as [B, H, T, D], as an attention layer produces it.
    const Tensor q = random_cpu({2, 37, 4, 64}, dtype, gen, -2, 2).transpose(1, 2);
    const Tensor k = random_cpu({2, 45, 2, 64}, dtype, gen, -2, 2).transpose(1, 2);
    const Tensor v = random_cpu({2, 45, 2, 64}, dtype, gen, -1, 1).transpose(1, 2);
    const Tensor dout = random_cpu({2, 4, 37, 64}, dtype, gen, -1, 1);
    const Inputs in{q, k, v, dout};
    const Outputs want = run_op(in, true, kCpu);
    check_outputs(run_op(in, true, kGpu), want, dtype);
  }
}

TEST_CASE("cuda attention reads (B, T, H, D)-stored views in place and answers in their layout", "[gpu][attention]") {
  const unsigned seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937 gen(seed);
  // D 64 takes the tensor cores (bf16/f16), D 40 the CUDA-core kernels; T != S too.
  for (const DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    for (const auto& [hq, hkv] : std::vector<std::pair<int64_t, int64_t>>{{4, 4}, {8, 2}, {6, 1}}) {
      for (const bool causal : {false, true}) {
        check_strided_case({2, hq, hkv, 70, 70, 64, causal, dtype}, Layout::bthd, gen);
        check_strided_case({1, hq, hkv, 37, 45, 40, causal, dtype}, Layout::bthd, gen);
      }
    }
    check_strided_case({1, 2, 1, 33, 65, 128, true, dtype}, Layout::bthd, gen);
  }
}

TEST_CASE("cuda attention takes q, k, v sliced from a fused buffer and rows of odd stride", "[gpu][attention]") {
  const unsigned seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937 gen(seed);
  for (const DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    for (const bool causal : {false, true}) {
      // Fused: rows (Hq + 2 Hkv) D apart, heads D apart (multiples of 8: tensor cores).
      check_strided_case({2, 4, 4, 70, 70, 64, causal, dtype}, Layout::fused, gen);
      check_strided_case({2, 8, 2, 65, 65, 64, causal, dtype}, Layout::fused, gen);
      check_strided_case({1, 6, 3, 40, 40, 36, causal, dtype}, Layout::fused, gen);
      // Padded: rows D + 3 apart (odd), on the CUDA-core kernels whatever the dtype.
      check_strided_case({2, 4, 2, 70, 45, 64, causal, dtype}, Layout::padded, gen);
      check_strided_case({1, 2, 2, 33, 33, 128, causal, dtype}, Layout::padded, gen);
    }
  }
}

TEST_CASE("cuda attention kernels give bitwise the same results for strided and contiguous operands",
          "[gpu][attention]") {
  const unsigned seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937 gen(seed);
  for (const DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    for (const bool tensor_cores : {true, false}) {
      if (tensor_cores && (dtype == DType::f32 || dtype == DType::f64)) continue;  // CUDA-core kernels only
      CAPTURE(tensor_cores);
      const TensorCores scope(tensor_cores);
      dispatch_floating(dtype, "test", [&](auto tag) {
        using T = typename decltype(tag)::type;
        check_kernel_layout<T>({2, 8, 2, 70, 70, 64, true, dtype}, Layout::bthd, gen);
        check_kernel_layout<T>({1, 4, 4, 37, 45, 40, false, dtype}, Layout::bthd, gen);
        check_kernel_layout<T>({2, 4, 2, 65, 65, 128, true, dtype}, Layout::fused, gen);
        check_kernel_layout<T>({1, 6, 3, 40, 40, 36, false, dtype}, Layout::fused, gen);
        // Strided operands that only the CUDA-core kernels take: compared on those.
        if (!tensor_cores) {
          check_kernel_layout<T>({2, 4, 2, 70, 45, 64, true, dtype}, Layout::padded, gen);
          check_kernel_layout<T>({1, 2, 1, 33, 33, 80, false, dtype}, Layout::padded, gen);
        }
      });
    }
  }
}

TEST_CASE("cuda attention kernels write the cpu kernel's lse, -inf and 0 for rows that see no key",
          "[gpu][attention]") {
  const unsigned seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937 gen(seed);
  // Causal with T > S: rows t < T - S see no key. D 64 takes the tensor-core kernels
  // for bf16, D 40 the CUDA-core ones.
  for (const DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    for (const int64_t D : {40, 64}) {
      const kernels::cpu::AttentionDims dims{.batch = 2, .q_heads = 4, .kv_heads = 2, .q_len = 150,
                                             .kv_len = 70, .head_dim = D, .causal = true,
                                             .scale = 1.0 / std::sqrt(static_cast<double>(D))};
      CAPTURE(name_of(dtype), D);
      const Tensor q = random_cpu({2, 4, 150, D}, dtype, gen, -2, 2);
      const Tensor k = random_cpu({2, 2, 70, D}, dtype, gen, -2, 2);
      const Tensor v = random_cpu({2, 2, 70, D}, dtype, gen, -1, 1);
      // The cpu kernel on the values converted to float.
      const Tensor qf = q.to(DType::f32), kf = k.to(DType::f32), vf = v.to(DType::f32);
      Tensor out_cpu = empty(q.sizes(), {.dtype = DType::f32});
      Tensor lse_cpu = empty({2, 4, 150}, {.dtype = DType::f32});
      kernels::cpu::attention_forward<float>(qf.data<float>(), kf.data<float>(), vf.data<float>(), dims,
                                             out_cpu.data<float>(), lse_cpu.data<float>());
      const Tensor qg = q.to(kGpu), kg = k.to(kGpu), vg = v.to(kGpu);
      Tensor out_gpu = empty(q.sizes(), {.dtype = dtype, .device = kGpu});
      Tensor lse_gpu = empty({2, 4, 150}, {.dtype = DType::f32, .device = kGpu});
      dispatch_floating(dtype, "test", [&](auto tag) {
        using T = typename decltype(tag)::type;
        if constexpr (!std::is_same_v<T, double>) {
          kernels::cuda::attention_forward<T>(qg.data<T>(), kg.data<T>(), vg.data<T>(), dims, out_gpu.data<T>(),
                                              lse_gpu.data<float>(), cuda::current_stream(0));
        }
      });
      const bool tc_expected = dtype != DType::f32 && D == 64;
      CHECK((kernels::cuda::attention_last_path() == kernels::cuda::AttentionPath::tensor_core) == tc_expected);
      const std::vector<double> lse = values_of(lse_gpu), lse_want = values_of(lse_cpu);
      const std::vector<double> out = values_of(out_gpu);
      int64_t lse_off = 0, empty_rows = 0, nonzero_in_empty = 0;
      std::ostringstream first_off;
      for (size_t row = 0; row < lse.size(); ++row) {
        const int64_t t = static_cast<int64_t>(row % 150);
        const bool sees_none = t < 150 - 70;
        empty_rows += sees_none;
        const bool ok = sees_none ? std::isinf(lse[row]) && lse[row] < 0
                                  : std::fabs(lse[row] - lse_want[row]) <= 1e-5 * (1 + std::fabs(lse_want[row]));
        if (!ok && lse_off++ == 0) first_off << "row " << row << ": gpu " << lse[row] << ", cpu " << lse_want[row];
        if (sees_none) {
          for (int64_t d = 0; d < D; ++d) nonzero_in_empty += out[row * D + d] != 0.0;
        }
      }
      CHECK(empty_rows == 2 * 4 * 80);
      INFO("lse: " << lse_off << " rows off; first at " << first_off.str());
      CHECK(lse_off == 0);
      CHECK(nonzero_in_empty == 0);
      const Tolerance tol = tolerance(dtype);
      CHECK_CLOSE(out_gpu, out_cpu.to(dtype), tol.atol, tol.rtol);
    }
  }
}

TEST_CASE("cuda attention gives rows that see no key a zero output and zero dq", "[gpu][attention]") {
  const unsigned seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937 gen(seed);
  for (const DType dtype : {DType::f32, DType::bf16}) {
    const Case c{2, 8, 2, 17, 2, 64, true, dtype};
    CAPTURE(describe(c));
    const Inputs in = make_inputs(c, gen);
    const Outputs got = run_op(in, true, kGpu);
    const Outputs want = run_op(in, true, kCpu);
    const std::vector<double> out = values_of(got.out), dq = values_of(got.dq);
    int64_t nonzero = 0;
    for (int64_t row = 0; row < 2 * 8 * 17; ++row) {
      if (row % 17 >= 15) continue;  // rows 15, 16 see keys 0 and 0..1
      for (int64_t d = 0; d < 64; ++d) nonzero += (out[row * 64 + d] != 0.0) + (dq[row * 64 + d] != 0.0);
    }
    CHECK(nonzero == 0);
    const Tolerance tol = tolerance(dtype);
    CHECK_CLOSE(got.out, want.out, tol.atol, tol.rtol);
    CHECK(relative_error(got.dq, want.dq) <= tol.grad);
    CHECK(relative_error(got.dk, want.dk) <= tol.grad);
    CHECK(relative_error(got.dv, want.dv) <= tol.grad);
  }
}

TEST_CASE("cuda attention with empty sizes gives what the cpu gives", "[gpu][attention]") {
  std::mt19937 gen(7);
  // S = 0: every row sees no key (out 0, dq 0); T = 0: dk, dv are 0.
  for (const auto& [T, S] : std::vector<std::pair<int64_t, int64_t>>{{5, 0}, {0, 5}}) {
    const Case c{1, 2, 1, T, S, 32, false, DType::f32};
    CAPTURE(describe(c));
    const Inputs in = make_inputs(c, gen);
    const Outputs got = run_op(in, c.causal, kGpu);
    const Outputs want = run_op(in, c.causal, kCpu);
    CHECK(got.out.sizes() == want.out.sizes());
    CHECK(values_of(got.out) == values_of(want.out));
    CHECK(values_of(got.dq) == values_of(want.dq));
    CHECK(values_of(got.dk) == values_of(want.dk));
    CHECK(values_of(got.dv) == values_of(want.dv));
  }
}

TEST_CASE("cuda attention forward and backward are bitwise reproducible", "[gpu][attention]") {
  const unsigned seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937 gen(seed);
  for (const DType dtype : {DType::f32, DType::bf16}) {
    for (const bool tensor_cores : {true, false}) {
      const Case c{2, 8, 2, 129, 129, 64, true, dtype};
      CAPTURE(describe(c), tensor_cores);
      const Inputs in = make_inputs(c, gen);
      const TensorCores scope(tensor_cores);
      const Outputs a = run_op(in, true, kGpu);
      const Outputs b = run_op(in, true, kGpu);
      CHECK(same_bits(a.out, b.out));
      CHECK(same_bits(a.dq, b.dq));
      CHECK(same_bits(a.dk, b.dk));
      CHECK(same_bits(a.dv, b.dv));
    }
  }
}

TEST_CASE("cuda attention rejects bad inputs with dtr::Error", "[gpu][attention]") {
  const auto opts = TensorOptions{.dtype = DType::bf16, .device = kGpu};
  // Hq = 6 is not a multiple of Hkv = 4.
  CHECK_THROWS_AS(scaled_dot_product_attention(zeros({1, 6, 8, 16}, opts), zeros({1, 4, 8, 16}, opts),
                                               zeros({1, 4, 8, 16}, opts), true),
                  Error);
  // head_dim over the CUDA kernels' 256.
  CHECK_THROWS_AS(scaled_dot_product_attention(zeros({1, 1, 4, 257}, opts), zeros({1, 1, 4, 257}, opts),
                                               zeros({1, 1, 4, 257}, opts)),
                  Error);
  // q on cuda, k and v on the cpu.
  CHECK_THROWS_AS(scaled_dot_product_attention(zeros({1, 1, 4, 16}, opts), zeros({1, 1, 4, 16}, {.dtype = DType::bf16}),
                                               zeros({1, 1, 4, 16}, {.dtype = DType::bf16})),
                  Error);
  // The launcher itself checks the group ratio too.
  const Tensor x = zeros({1, 6, 8, 16}, {.dtype = DType::f32, .device = kGpu});
  Tensor out = empty({1, 6, 8, 16}, {.dtype = DType::f32, .device = kGpu});
  Tensor lse = empty({1, 6, 8}, {.dtype = DType::f32, .device = kGpu});
  const kernels::cpu::AttentionDims dims{.batch = 1, .q_heads = 6, .kv_heads = 4, .q_len = 8,
                                         .kv_len = 8, .head_dim = 16, .causal = false, .scale = 0.25};
  CHECK_THROWS_AS(kernels::cuda::attention_forward<float>(x.data<float>(), x.data<float>(), x.data<float>(), dims,
                                                          out.data<float>(), lse.data<float>(),
                                                          cuda::current_stream(0)),
                  Error);
}
