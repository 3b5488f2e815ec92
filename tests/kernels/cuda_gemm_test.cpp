// CUDA GEMM (dtr/kernels/cuda/gemm.h) against a triple loop in double on the host:
// every transpose combination, odd and tile-sized shapes, padded leading dims,
// misaligned pointers (the guarded path), batch strides including 0 (broadcast),
// alpha and beta. Every element must lie within a bound on the error of any f32
// summation order (element_bound); the norm of the error within the tolerance below.
// Inputs are fresh random numbers for every case; when beta == 0
// C starts as NaN, which must not leak into the result; the padding of C must
// come back untouched. On a Hopper GPU the bf16/f16 cases of the first three test
// cases mostly run on the wgmma path; further cases check which path ran (wgmma on the
// shapes it accepts, mma.sync on those it declines) and run the shape table again with
// the wgmma path switched off, so that both kernels are checked on every H100.
#include "tests/support/gpu_test_support.h"
#include "dtr/kernels/cuda/gemm.h"
#include "dtr/kernels/cuda/gemm_sm90.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

using dtr::bf16;
using dtr::f16;
using dtr::kernels::Transpose;
namespace kc = dtr::kernels::cuda;

namespace {

// ‖out − ref‖ / ‖ref‖ bounds: f32 accumulates in f32 (no TF32); the half types add
// one rounding of the output (2^-9 for bf16, 2^-11 for f16, relative).
template <class T>
double tolerance() {
  if constexpr (std::is_same_v<T, float>) return 1e-5;
  if constexpr (std::is_same_v<T, bf16>) return 1e-2;
  return 2e-3;
}

// A bound on one element's error that holds for any summation order: the products of
// two f32, bf16 or f16 values are summed in f32 (|error| <= k u sum |a b| with u = 2^-24
// when each addition rounds to nearest; the tensor cores align a k16 step's products to
// the largest and truncate, up to about twice that, so the bound takes four times), alpha
// and beta cost two more roundings, and a bf16 or f16 result one more of its own (2^-8 or
// 2^-11 relative, or 2^-25 absolute for an f16 subnormal). Still a wrong element, even
// one among millions, fails it: at k = 1024 the bound is ~2.4e-4 of sum |a b| (~0.06 for
// inputs in [-1, 1)), while leaving out one k-tile of 64 terms errs by ~2.7 on average.
template <class T>
double element_bound(int64_t k, double ref, double scale) {
  const double out_round = std::is_same_v<T, bf16> ? 0x1p-8 : std::is_same_v<T, f16> ? 0x1p-11 : 0.0;
  const double accumulation = 4.0 * static_cast<double>(k + 2) * 0x1p-24 * scale;
  // Below f16's smallest normal a rounding is absolute: up to half its spacing, 2^-25.
  const double subnormal_round = std::is_same_v<T, f16> ? 0x1p-25 : 0.0;
  return out_round * (std::fabs(ref) + accumulation) + accumulation + subnormal_round + 1e-30;
}

// GELU in double, the reference for the epilogue's activation.
double gelu_reference(dtr::kernels::GemmActivation act, double x) {
  if (act == dtr::kernels::GemmActivation::gelu_tanh) {
    return 0.5 * x * (1 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
  }
  return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
}

template <class T>
double to_double(T v) {
  return static_cast<double>(static_cast<float>(v));
}

struct Case {
  Transpose ta = Transpose::no, tb = Transpose::no;
  int64_t m = 1, n = 1, k = 1;
  int64_t pad_a = 0, pad_b = 0, pad_c = 0;  // extra elements per stored row
  int64_t batch = 1;
  bool broadcast_a = false, broadcast_b = false;
  float alpha = 1.f, beta = 0.f;
  int64_t offset_a = 0;  // elements added to A's pointer (breaks 16-byte alignment)
  // The epilogue (dtr/kernels/gemm_epilogue.h): a bias row, and an activation with its
  // pre-activation stored (in C's layout, as linear asks for it).
  bool bias = false;
  dtr::kernels::GemmActivation act = dtr::kernels::GemmActivation::none;

  std::string describe() const {
    std::ostringstream s;
    s << "ta=" << (ta == Transpose::yes ? "T" : "N") << " tb=" << (tb == Transpose::yes ? "T" : "N") << " m=" << m
      << " n=" << n << " k=" << k << " pads=" << pad_a << "/" << pad_b << "/" << pad_c << " batch=" << batch
      << (broadcast_a ? " bcastA" : "") << (broadcast_b ? " bcastB" : "") << " alpha=" << alpha
      << " beta=" << beta << " offset_a=" << offset_a << (bias ? " bias" : "")
      << (act == dtr::kernels::GemmActivation::gelu_tanh ? " gelu_tanh"
          : act == dtr::kernels::GemmActivation::gelu_erf ? " gelu_erf"
                                                           : "");
    return s.str();
  }
};

template <class T>
struct DeviceBuffer {
  T* ptr = nullptr;
  explicit DeviceBuffer(size_t n) { REQUIRE(cudaMalloc(&ptr, std::max<size_t>(n, 1) * sizeof(T)) == cudaSuccess); }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

// A stored operand: rows x cols with row stride ld, `batch` matrices apart by stride.
struct Stored {
  int64_t rows, cols, ld, stride, count;
  size_t size() const { return static_cast<size_t>((count - 1) * stride + rows * ld); }
};

Stored stored(int64_t rows, int64_t cols, int64_t pad, int64_t batch, bool broadcast) {
  const int64_t ld = std::max<int64_t>(cols + pad, 1);
  // A batch stride a little larger than one matrix, so entries do not simply abut.
  const int64_t stride = broadcast ? 0 : rows * ld + 8;
  return {rows, cols, ld, stride, broadcast ? 1 : batch};
}

// Runs one case, checks it against the reference and returns the path that ran it.
template <class T>
kc::GemmPath run_case(const Case& c, std::mt19937& rng) {
  INFO(c.describe());
  const Stored sa = stored(c.ta == Transpose::no ? c.m : c.k, c.ta == Transpose::no ? c.k : c.m, c.pad_a, c.batch,
                           c.broadcast_a);
  const Stored sb = stored(c.tb == Transpose::no ? c.k : c.n, c.tb == Transpose::no ? c.n : c.k, c.pad_b, c.batch,
                           c.broadcast_b);
  const Stored sc = stored(c.m, c.n, c.pad_c, c.batch, false);

  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<T> ha(sa.size() + c.offset_a), hb(sb.size()), hc(sc.size());
  for (T& v : ha) v = T(dist(rng));
  for (T& v : hb) v = T(dist(rng));
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (T& v : hc) v = T(c.beta == 0.f ? nan : dist(rng));
  // Padding and gaps of C hold a sentinel that must survive.
  const float sentinel = 7.f;
  std::vector<bool> is_c(hc.size(), false);
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t i = 0; i < c.m; ++i)
      for (int64_t j = 0; j < c.n; ++j) is_c[b * sc.stride + i * sc.ld + j] = true;
  for (size_t e = 0; e < hc.size(); ++e)
    if (!is_c[e]) hc[e] = T(sentinel);
  // The epilogue's operands: a bias row, and pre (C's layout) starting as the sentinel.
  const bool has_act = c.act != dtr::kernels::GemmActivation::none;
  std::vector<T> hbias(static_cast<size_t>(c.n)), hpre(has_act ? hc.size() : 0, T(sentinel));
  for (T& v : hbias) v = T(dist(rng));

  DeviceBuffer<T> da(ha.size()), db(hb.size()), dc(hc.size()), dbias(hbias.size()), dpre(hpre.size());
  REQUIRE(cudaMemcpy(da.ptr, ha.data(), ha.size() * sizeof(T), cudaMemcpyHostToDevice) == cudaSuccess);
  REQUIRE(cudaMemcpy(db.ptr, hb.data(), hb.size() * sizeof(T), cudaMemcpyHostToDevice) == cudaSuccess);
  REQUIRE(cudaMemcpy(dc.ptr, hc.data(), hc.size() * sizeof(T), cudaMemcpyHostToDevice) == cudaSuccess);
  REQUIRE(cudaMemcpy(dbias.ptr, hbias.data(), hbias.size() * sizeof(T), cudaMemcpyHostToDevice) == cudaSuccess);
  REQUIRE(cudaMemcpy(dpre.ptr, hpre.data(), hpre.size() * sizeof(T), cudaMemcpyHostToDevice) == cudaSuccess);
  const dtr::kernels::GemmEpilogue<T> epilogue{
      .bias = c.bias ? dbias.ptr : nullptr, .activation = c.act, .pre = has_act ? dpre.ptr : nullptr};

  cudaStream_t stream = nullptr;
  REQUIRE(cudaStreamCreate(&stream) == cudaSuccess);
  if (c.batch == 1 && c.offset_a % 2 == 0) {
    kc::gemm<T>(c.ta, c.tb, c.m, c.n, c.k, c.alpha, da.ptr + c.offset_a, sa.ld, db.ptr, sb.ld, c.beta, dc.ptr, sc.ld,
                stream, epilogue);
  } else {
    kc::gemm_batched<T>(c.batch, c.ta, c.tb, c.m, c.n, c.k, c.alpha, da.ptr + c.offset_a, sa.ld, sa.stride, db.ptr,
                        sb.ld, sb.stride, c.beta, dc.ptr, sc.ld, sc.stride, stream, epilogue);
  }
  const kc::GemmPath path = kc::gemm_last_path();
  REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(stream) == cudaSuccess);
  std::vector<T> out(hc.size()), pre(hpre.size());
  REQUIRE(cudaMemcpy(out.data(), dc.ptr, out.size() * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
  REQUIRE(cudaMemcpy(pre.data(), dpre.ptr, pre.size() * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);

  auto a_at = [&](int64_t b, int64_t i, int64_t p) {
    const int64_t base = c.offset_a + b * sa.stride;
    return to_double(ha[base + (c.ta == Transpose::no ? i * sa.ld + p : p * sa.ld + i)]);
  };
  auto b_at = [&](int64_t bz, int64_t p, int64_t j) {
    const int64_t base = bz * sb.stride;
    return to_double(hb[base + (c.tb == Transpose::no ? p * sb.ld + j : j * sb.ld + p)]);
  };
  double err2 = 0, ref2 = 0;
  int64_t non_finite = 0, sentinel_changed = 0, off_bound = 0;
  std::string first_off;
  // op(A) as [m, k] and op(B) as [n, k], in double, so the reference's inner loop is a
  // unit-stride dot product (four partial sums).
  std::vector<double> opa(static_cast<size_t>(c.m * c.k)), opb(static_cast<size_t>(c.n * c.k));
  for (int64_t bz = 0; bz < c.batch; ++bz) {
    for (int64_t i = 0; i < c.m; ++i)
      for (int64_t p = 0; p < c.k; ++p) opa[i * c.k + p] = a_at(bz, i, p);
    for (int64_t j = 0; j < c.n; ++j)
      for (int64_t p = 0; p < c.k; ++p) opb[j * c.k + p] = b_at(bz, p, j);
    for (int64_t i = 0; i < c.m; ++i) {
      const double* ar = opa.data() + i * c.k;
      for (int64_t j = 0; j < c.n; ++j) {
        const double* br = opb.data() + j * c.k;
        double s4[4] = {0, 0, 0, 0}, magnitude = 0;  // magnitude: sum of |a b|
        int64_t p = 0;
        for (; p + 4 <= c.k; p += 4)
          for (int q = 0; q < 4; ++q) s4[q] += ar[p + q] * br[p + q];
        for (; p < c.k; ++p) s4[0] += ar[p] * br[p];
        for (p = 0; p < c.k; ++p) magnitude += std::fabs(ar[p] * br[p]);
        const double sum = (s4[0] + s4[1]) + (s4[2] + s4[3]);
        const size_t e = bz * sc.stride + i * sc.ld + j;
        double ref = c.alpha * sum;
        double scale = std::fabs(c.alpha) * magnitude;
        if (c.beta != 0.f) {
          ref += c.beta * to_double(hc[e]);
          scale += std::fabs(c.beta * to_double(hc[e]));
        }
        if (c.bias) {
          ref += to_double(hbias[j]);
          scale += std::fabs(to_double(hbias[j]));
        }
        // With an activation, ref is checked against pre, and C against the activation of
        // the pre the gpu stored: f32 transcendentals (a few ulp of the terms) plus C's
        // rounding.
        double bound = element_bound<T>(c.k, ref, scale);
        double got = to_double(has_act ? pre[e] : out[e]);
        auto check_element = [&](const char* what, double value, double want, double allowed) {
          if (!std::isfinite(value)) ++non_finite;
          if (!(std::fabs(value - want) <= allowed) && off_bound++ == 0) {
            std::ostringstream os;
            os.precision(9);
            os << what << " batch " << bz << " row " << i << " col " << j << ": gpu " << value << ", reference "
               << want << " (bound " << allowed << ")";
            first_off = os.str();
          }
        };
        check_element(has_act ? "pre" : "C", got, ref, bound);
        if (has_act) {
          ref = gelu_reference(c.act, got);
          got = to_double(out[e]);
          bound = element_bound<T>(0, ref, 0) + 2e-6 * (1 + std::fabs(to_double(pre[e])));
          check_element("C", got, ref, bound);
        }
        err2 += (got - ref) * (got - ref);
        ref2 += ref * ref;
      }
    }
  }
  for (size_t e = 0; e < out.size(); ++e) {
    if (!is_c[e] && to_double(out[e]) != sentinel) ++sentinel_changed;
    if (has_act && !is_c[e] && to_double(pre[e]) != sentinel) ++sentinel_changed;
  }
  CHECK(non_finite == 0);
  CHECK(sentinel_changed == 0);
  INFO(off_bound << " elements outside their error bound; first: " << first_off);
  CHECK(off_bound == 0);
  const double rel = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  CHECK(rel <= tolerance<T>());
  return path;
}

std::string path_name(kc::GemmPath p) {
  switch (p) {
    case kc::GemmPath::none: return "none";
    case kc::GemmPath::simt: return "simt";
    case kc::GemmPath::mma_sync: return "mma_sync";
    case kc::GemmPath::mma_sync_guarded: return "mma_sync_guarded";
    case kc::GemmPath::wgmma: return "wgmma";
  }
  return "?";
}

constexpr Transpose kN = Transpose::no, kT = Transpose::yes;
constexpr Transpose kBoth[] = {kN, kT};

}  // namespace

TEMPLATE_TEST_CASE("gemm matches a double-precision triple loop on odd and tile-sized shapes", "[gpu][gemm]", float,
                   bf16, f16) {
  std::mt19937 rng(1234);
  struct Dims {
    int64_t m, n, k;
  };
  const Dims dims[] = {{1, 1, 1},     {7, 7, 7},     {33, 33, 33},   {129, 129, 129}, {256, 256, 256},
                       {1, 256, 64},  {256, 1, 64},  {64, 48, 1},    {129, 136, 72},  {200, 64, 520},
                       {7, 129, 33},  {128, 128, 32}, {96, 264, 200}, {384, 256, 1024}};
  for (Transpose ta : kBoth)
    for (Transpose tb : kBoth)
      for (const Dims& d : dims) run_case<TestType>({.ta = ta, .tb = tb, .m = d.m, .n = d.n, .k = d.k}, rng);
}

TEMPLATE_TEST_CASE("gemm honours padded leading dims and misaligned pointers", "[gpu][gemm]", float, bf16, f16) {
  std::mt19937 rng(99);
  for (Transpose ta : kBoth) {
    for (Transpose tb : kBoth) {
      // Pads of 8 keep rows 16-byte aligned (the cp.async path for the half types);
      // odd pads and an odd pointer offset force the guarded path.
      run_case<TestType>({.ta = ta, .tb = tb, .m = 136, .n = 72, .k = 96, .pad_a = 8, .pad_b = 16, .pad_c = 8}, rng);
      run_case<TestType>({.ta = ta, .tb = tb, .m = 129, .n = 65, .k = 100, .pad_a = 3, .pad_b = 5, .pad_c = 1}, rng);
      run_case<TestType>({.ta = ta, .tb = tb, .m = 64, .n = 64, .k = 64, .offset_a = 1}, rng);
      run_case<TestType>({.ta = ta, .tb = tb, .m = 64, .n = 40, .k = 48, .pad_c = 1}, rng);
    }
  }
}

TEMPLATE_TEST_CASE("gemm_batched with batch strides, broadcasts, alpha and beta", "[gpu][gemm]", float, bf16, f16) {
  std::mt19937 rng(7);
  for (Transpose ta : kBoth) {
    for (Transpose tb : kBoth) {
      run_case<TestType>({.ta = ta, .tb = tb, .m = 64, .n = 80, .k = 48, .batch = 3}, rng);
      run_case<TestType>({.ta = ta, .tb = tb, .m = 33, .n = 17, .k = 9, .batch = 4, .broadcast_a = true}, rng);
      run_case<TestType>(
          {.ta = ta, .tb = tb, .m = 128, .n = 64, .k = 96, .batch = 2, .broadcast_b = true, .alpha = -0.5f}, rng);
      run_case<TestType>({.ta = ta, .tb = tb, .m = 65, .n = 130, .k = 70, .alpha = 1.5f, .beta = 0.5f}, rng);
      run_case<TestType>(
          {.ta = ta, .tb = tb, .m = 128, .n = 128, .k = 64, .batch = 2, .alpha = 0.25f, .beta = -2.f}, rng);
    }
  }
  // alpha == 0 and k == 0 scale C by beta without reading A or B.
  run_case<TestType>({.m = 40, .n = 24, .k = 16, .alpha = 0.f, .beta = 0.75f}, rng);
  run_case<TestType>({.m = 40, .n = 24, .k = 0, .beta = 1.f}, rng);
  run_case<TestType>({.m = 8, .n = 8, .k = 0, .beta = 0.f}, rng);
}

// With k == 0 or alpha == 0 there is no product: C = beta * C exactly, and +0 where beta
// is 0, as the CPU writes it, whatever alpha is (-0 or NaN would be alpha * 0).
TEMPLATE_TEST_CASE("gemm without a product writes beta * C, +0 for beta 0, whatever alpha is", "[gpu][gemm]", float,
                   bf16, f16) {
  const float inf = std::numeric_limits<float>::infinity();
  struct NoProduct {
    int64_t k;
    float alpha, beta;
  };
  const NoProduct cases[] = {{0, -1.f, 0.f}, {0, -inf, 0.f}, {0, inf, 0.5f}, {16, -0.f, 0.f}, {16, 0.f, -2.f}};
  const int64_t m = 5, n = 7;
  for (const NoProduct& c : cases) {
    INFO("k " << c.k << " alpha " << c.alpha << " beta " << c.beta);
    const int64_t lda = std::max<int64_t>(c.k, 1);  // A is [m, k], B [k, n]
    std::vector<TestType> ha(static_cast<size_t>(m * lda), TestType(1.f));
    std::vector<TestType> hb(static_cast<size_t>(lda * n), TestType(1.f));
    std::vector<TestType> hc(static_cast<size_t>(m * n));
    for (size_t e = 0; e < hc.size(); ++e) {
      const float value = 0.25f * static_cast<float>(e) - 3.125f;
      hc[e] = TestType(c.beta == 0.f ? std::numeric_limits<float>::quiet_NaN() : value);
    }
    DeviceBuffer<TestType> da(ha.size()), db(hb.size()), dc(hc.size());
    REQUIRE(cudaMemcpy(da.ptr, ha.data(), ha.size() * sizeof(TestType), cudaMemcpyHostToDevice) == cudaSuccess);
    REQUIRE(cudaMemcpy(db.ptr, hb.data(), hb.size() * sizeof(TestType), cudaMemcpyHostToDevice) == cudaSuccess);
    REQUIRE(cudaMemcpy(dc.ptr, hc.data(), hc.size() * sizeof(TestType), cudaMemcpyHostToDevice) == cudaSuccess);
    kc::gemm<TestType>(kN, kN, m, n, c.k, c.alpha, da.ptr, lda, db.ptr, n, c.beta, dc.ptr, n, nullptr);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    std::vector<TestType> out(hc.size());
    REQUIRE(cudaMemcpy(out.data(), dc.ptr, out.size() * sizeof(TestType), cudaMemcpyDeviceToHost) == cudaSuccess);
    int64_t wrong = 0;
    for (size_t e = 0; e < out.size(); ++e) {
      // beta * C is exact here (C an odd multiple of 0.125 below 6 in magnitude, never 0;
      // beta 0.5 or -2).
      const float want = c.beta == 0.f ? 0.f : c.beta * static_cast<float>(hc[e]);
      const float got = static_cast<float>(out[e]);
      if (!(got == want && std::signbit(got) == std::signbit(want))) ++wrong;
    }
    CHECK(wrong == 0);
  }
}

// The epilogue (bias row, GELU with its pre-activation) on every layout, with batches and
// broadcasts, on every kernel: wgmma's staged stores at both tile widths (aligned C), its
// direct stores (odd ldc or beta: the bias only; an activation there goes to mma.sync),
// mma.sync aligned and guarded, and SIMT for f32. pre must equal the definition's
// v = alpha A B + beta C + bias within the summation bound, and C the activation of pre.
TEMPLATE_TEST_CASE("gemm epilogues on every layout, batch and kernel match their definition", "[gpu][gemm]", float,
                   bf16, f16) {
  using dtr::kernels::GemmActivation;
  std::mt19937 rng(2718);
  const std::vector<Case> shapes = {
      {.m = 128, .n = 256, .k = 64},
      {.m = 200, .n = 136, .k = 72, .batch = 2},
      {.m = 64, .n = 80, .k = 48, .batch = 3, .broadcast_b = true},
      {.m = 65, .n = 40, .k = 48, .pad_c = 1},
      {.m = 65, .n = 130, .k = 70, .alpha = 1.5f, .beta = 0.5f},
      {.m = 33, .n = 17, .k = 9, .batch = 2, .broadcast_a = true},
  };
  struct Epilogue {
    bool bias;
    GemmActivation act;
  };
  const Epilogue epilogues[] = {
      {true, GemmActivation::none}, {true, GemmActivation::gelu_tanh}, {false, GemmActivation::gelu_erf}};
  using dtr::testing::gpu::GemmKernels;
  // f32 runs on the SIMT kernel whatever the setting: once is enough.
  const std::vector<GemmKernels> every_kernel = std::is_same_v<TestType, float>
                                                    ? std::vector<GemmKernels>{{true, 0}}
                                                    : dtr::testing::gpu::kEveryGemmKernel;
  for (const GemmKernels& kernels : every_kernel) {
    CAPTURE(kernels.wgmma, kernels.tile_n);
    const dtr::testing::gpu::GemmKernelsScope scope(kernels);
    for (Transpose ta : kBoth) {
      for (Transpose tb : kBoth) {
        for (const Case& shape : shapes) {
          for (const Epilogue& epilogue : epilogues) {
            Case c = shape;
            c.ta = ta;
            c.tb = tb;
            c.bias = epilogue.bias;
            c.act = epilogue.act;
            // A transposed is stored [k, m]: rows of a multiple of 8 elements, as wgmma needs.
            if (ta == kT) c.pad_a += (8 - (c.m + c.pad_a) % 8) % 8;
            run_case<TestType>(c, rng);
          }
        }
      }
    }
  }
}

TEMPLATE_TEST_CASE("gemm mma.sync kernels with the wgmma path switched off", "[gpu][gemm]", bf16, f16) {
  const dtr::testing::gpu::WgmmaOff off;
  std::mt19937 rng(4321);
  struct Dims {
    int64_t m, n, k;
  };
  const Dims dims[] = {{33, 33, 33}, {129, 136, 72}, {200, 64, 520}, {384, 256, 1024}};
  for (Transpose ta : kBoth) {
    for (Transpose tb : kBoth) {
      for (const Dims& d : dims) {
        const kc::GemmPath path = run_case<TestType>({.ta = ta, .tb = tb, .m = d.m, .n = d.n, .k = d.k}, rng);
        CHECK((path == kc::GemmPath::mma_sync || path == kc::GemmPath::mma_sync_guarded));
      }
      run_case<TestType>({.ta = ta, .tb = tb, .m = 65, .n = 130, .k = 70, .alpha = 1.5f, .beta = 0.5f}, rng);
      // Batches, broadcasts and beta on the aligned (cp.async) kernel: on Hopper the
      // wgmma path takes these when it is on.
      for (const Case& aligned : {Case{.m = 64, .n = 80, .k = 48, .batch = 3},
                                  Case{.m = 128, .n = 64, .k = 96, .batch = 2, .broadcast_b = true, .alpha = -0.5f},
                                  Case{.m = 72, .n = 48, .k = 40, .batch = 4, .broadcast_a = true},
                                  Case{.m = 128, .n = 128, .k = 64, .batch = 2, .alpha = 0.25f, .beta = -2.f}}) {
        Case c = aligned;
        c.ta = ta;
        c.tb = tb;
        CHECK(path_name(run_case<TestType>(c, rng)) == "mma_sync");
      }
    }
  }
}

// The shapes the wgmma path accepts (every layout; 16-byte aligned operands) must run
// on it when the device offers it, for both tile widths; the others must fall back.
TEMPLATE_TEST_CASE("gemm takes the wgmma path on Hopper for the shapes it accepts", "[gpu][gemm]", bf16, f16) {
  int device = 0, major = 0, minor = 0;
  REQUIRE(cudaGetDevice(&device) == cudaSuccess);
  REQUIRE(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess);
  REQUIRE(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) == cudaSuccess);
  if (!kc::gemm_wgmma_available()) {
    // A build for sm_90a on a compute capability 9.0 GPU must offer the path.
    CHECK_FALSE((kc::sm90::compiled() && major == 9 && minor == 0));
    WARN("wgmma path not available here (not a compute capability 9.0 GPU, or built without 90): skipped");
    return;
  }
  std::mt19937 rng(2024);
  const std::vector<Case> accepted = {
      {.m = 128, .n = 256, .k = 64},
      {.m = 129, .n = 136, .k = 72},
      {.m = 200, .n = 64, .k = 520},
      {.m = 7, .n = 8, .k = 8},
      {.m = 384, .n = 264, .k = 1024},
      {.m = 136, .n = 72, .k = 96, .pad_a = 8, .pad_b = 16, .pad_c = 8},
      {.m = 64, .n = 40, .k = 48, .pad_c = 1},
      {.m = 65, .n = 136, .k = 72, .alpha = 1.5f, .beta = 0.5f},
      {.m = 64, .n = 80, .k = 48, .batch = 3},
      {.m = 128, .n = 64, .k = 96, .batch = 2, .broadcast_b = true, .alpha = -0.5f},
      {.m = 72, .n = 48, .k = 40, .batch = 4, .broadcast_a = true},
      {.m = 128, .n = 128, .k = 64, .batch = 2, .alpha = 0.25f, .beta = -2.f},
      // More output tiles than SMs (each block walks several) and a k loop that wraps the
      // ring of shared-memory stages several times.
      {.m = 1280, .n = 1024, .k = 64, .batch = 2},
      {.m = 1100, .n = 2104, .k = 136},
      {.m = 300, .n = 520, .k = 200, .beta = 1.f},
  };
  for (const int bn : {0, 128, 256}) {
    const dtr::testing::gpu::WgmmaTileWidth width(bn);
    INFO("tile width " << (bn == 0 ? std::string("auto") : std::to_string(bn)));
    for (Transpose ta : kBoth) {
      for (Transpose tb : kBoth) {
        for (Case c : accepted) {
          c.ta = ta;
          c.tb = tb;
          // A transposed is stored [k, m]: pad its rows to a multiple of 8 elements (16 bytes).
          if (ta == kT) c.pad_a += (8 - (c.m + c.pad_a) % 8) % 8;
          INFO("ta " << (ta == kT ? "T" : "N") << " tb " << (tb == kT ? "T" : "N") << " m " << c.m << " n " << c.n
                     << " k " << c.k << " batch " << c.batch);
          const kc::GemmPath path = run_case<TestType>(c, rng);
          CHECK(path_name(path) == "wgmma");
        }
      }
    }
  }
  // Declined: misaligned or odd-strided operands (A transposed or not), k == 0.
  const std::vector<Case> declined = {
      {.ta = kT, .tb = kN, .m = 129, .n = 136, .k = 72, .offset_a = 1},
      {.ta = kT, .tb = kT, .m = 66, .n = 64, .k = 64, .pad_a = 3},
      {.m = 64, .n = 64, .k = 64, .offset_a = 1},
      {.m = 64, .n = 64, .k = 64, .offset_a = 2},
      {.m = 129, .n = 65, .k = 100, .pad_a = 3, .pad_b = 5, .pad_c = 1},
      {.tb = kT, .m = 33, .n = 17, .k = 9},
      {.m = 40, .n = 24, .k = 0, .beta = 1.f},
  };
  for (const Case& c : declined) {
    const kc::GemmPath path = run_case<TestType>(c, rng);
    CHECK(path_name(path) != "wgmma");
  }
}

TEST_CASE("gemm rejects bad arguments with an error", "[gpu][gemm]") {
  float* p = nullptr;
  REQUIRE(cudaMalloc(&p, 64 * sizeof(float)) == cudaSuccess);
  CHECK_THROWS_WITH(kc::gemm<float>(kN, kN, 4, 4, 4, 1.f, p, 3, p, 4, 0.f, p, 4, nullptr), Catch::Contains("lda"));
  CHECK_THROWS_WITH(kc::gemm<float>(kN, kT, 4, 4, 4, 1.f, p, 4, p, 3, 0.f, p, 4, nullptr), Catch::Contains("ldb"));
  CHECK_THROWS_WITH(kc::gemm_batched<float>(2, kN, kN, 2, 2, 2, 1.f, p, 2, 4, p, 2, 4, 0.f, p, 2, 0, nullptr),
                    Catch::Contains("batch stride"));
  cudaFree(p);
}
