// The matmul ops (matmul, mm, bmm, addmm) on cuda tensors against the same ops on
// the cpu: 2-D, 1-D promotions, broadcast batch dims, the [.., m, k] . [k, n]
// (Linear) case, transposed and permuted views, and addmm's broadcast c with beta
// and alpha, for f32, bf16 and f16; f64 on cuda is a clear error. One backward
// through matmul, addmm, log_softmax and max runs on cuda and is compared with the
// cpu backward. linear with its bias and GELU in the GEMM epilogue, forward and
// backward, on every GEMM path. Inputs are fresh random numbers each run (the seed is printed on
// failure). Both devices accumulate in f32 but in different orders, so results
// agree within ||gpu - cpu|| / ||cpu|| <= 1e-5 (f32), 2e-3 (f16), 1e-2 (bf16).
#include "tests/support/gpu_test_support.h"
#include "dtr/kernels/cuda/gemm.h"
#include "dtr/tensor/autograd/grad_mode.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/elementwise.h"
#include "dtr/tensor/ops/matmul.h"
#include "dtr/tensor/ops/reduce.h"
#include "dtr/tensor/ops/softmax.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <algorithm>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

using namespace dtr;
using namespace dtr::testing::gpu;

namespace {

double tolerance(DType dtype) {
  switch (dtype) {
    case DType::f32: return 1e-5;
    case DType::f16: return 2e-3;
    default: return 1e-2;
  }
}

// One op applied to operands built from cpu tensors: `make` gives the views the op
// takes (a transpose of a stored tensor, say), from tensors on either device.
struct Case {
  std::string name;
  std::vector<Shape> stored;  // shapes of the stored operands
  std::function<Tensor(const std::vector<Tensor>&)> op;
};

std::vector<Case> cases() {
  auto mat = [](const std::vector<Tensor>& t) { return matmul(t[0], t[1]); };
  return {
      {"2-D . 2-D", {{37, 53}, {53, 29}}, mat},
      {"tile-sized 2-D", {{128, 64}, {64, 136}}, mat},
      {"1-D . 1-D", {{77}, {77}}, mat},
      {"1-D . 3-D", {{24}, {4, 24, 7}}, mat},
      {"3-D . 1-D", {{3, 9, 24}, {24}}, mat},
      {"broadcast batch dims", {{3, 1, 17, 24}, {5, 24, 9}}, mat},
      {"Linear case [.., m, k] . [k, n]", {{4, 6, 32}, {32, 16}}, mat},
      {"2-D . batched", {{17, 24}, {3, 24, 8}}, mat},
      {"transposed views", {{24, 17}, {9, 24}},
       [](const std::vector<Tensor>& t) { return matmul(t[0].t(), t[1].t()); }},
      {"permuted batched views", {{17, 3, 24}, {24, 3, 8}},
       [](const std::vector<Tensor>& t) { return matmul(t[0].permute({1, 0, 2}), t[1].permute({1, 0, 2})); }},
      {"sliced operand", {{20, 48}, {24, 10}},
       [](const std::vector<Tensor>& t) { return matmul(t[0].slice(1, 0, 48, 2), t[1]); }},
      {"mm", {{33, 16}, {16, 40}}, [](const std::vector<Tensor>& t) { return mm(t[0], t[1]); }},
      {"bmm of a transpose", {{4, 24, 13}, {4, 24, 11}},
       [](const std::vector<Tensor>& t) { return bmm(t[0].transpose(1, 2), t[1]); }},
      {"addmm, row-broadcast c", {{40}, {21, 32}, {32, 40}},
       [](const std::vector<Tensor>& t) { return addmm(t[0], t[1], t[2]); }},
      {"addmm, column c, beta and alpha", {{21, 1}, {21, 32}, {40, 32}},
       [](const std::vector<Tensor>& t) { return addmm(t[0], t[1], t[2].t(), 0.5, -2); }},
      {"addmm, beta 0", {{21, 40}, {21, 32}, {32, 40}},
       [](const std::vector<Tensor>& t) { return addmm(t[0], t[1], t[2], 0, 1.5); }},
  };
}

}  // namespace

TEST_CASE("cuda matmul ops match the cpu ops for f32, bf16 and f16", "[gpu][matmul]") {
  const unsigned seed = std::random_device{}();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    for (const Case& c : cases()) {
      INFO(c.name << " in " << dtype_name(dtype));
      std::vector<Tensor> cpu_in, gpu_in;
      for (const Shape& s : c.stored) {
        cpu_in.push_back(random_cpu(s, dtype, gen, -1, 1));
        gpu_in.push_back(cpu_in.back().to(kGpu));
      }
      const Tensor want = c.op(cpu_in);
      const Tensor got = c.op(gpu_in);
      CHECK(got.device() == kGpu);
      CHECK(got.dtype() == dtype);
      CHECK(got.sizes() == want.sizes());
      CHECK(relative_error(got, want) <= tolerance(dtype));
    }
  }
}

TEST_CASE("cuda matmul ops refuse f64 with an error naming the op and dtype", "[gpu][matmul]") {
  const Tensor a = zeros({2, 3}, {.dtype = DType::f64, .device = kGpu});
  const Tensor b = zeros({3, 4}, {.dtype = DType::f64, .device = kGpu});
  CHECK_THROWS_WITH(matmul(a, b), Catch::Contains("matmul: f64 tensors on cuda:0 are not supported"));
  CHECK_THROWS_WITH(mm(a, b), Catch::Contains("mm: f64"));
  CHECK_THROWS_WITH(bmm(a.unsqueeze(0), b.unsqueeze(0)), Catch::Contains("bmm: f64"));
  CHECK_THROWS_WITH(addmm(b.narrow(0, 0, 1), a, b), Catch::Contains("addmm: f64"));
  CHECK_THROWS_WITH(matmul(a.to(DType::f32), b.to(DType::f32).to(kCpu)),
                    Catch::Contains("expected all operands on cuda:0"));
}

TEST_CASE("a backward through matmul, addmm, log_softmax and max on cuda matches the cpu", "[gpu][matmul]") {
  const unsigned seed = std::random_device{}();
  INFO("seed " << seed);
  std::mt19937 gen(seed);
  // loss = sum(max(log_softmax(addmm(c, x, w1) reshaped . w2, -1), 1)), f32.
  const std::vector<Shape> shapes = {{12}, {8, 16}, {16, 12}, {3, 4, 5}};  // c, x, w1, w2
  std::vector<Tensor> cpu_leaves, gpu_leaves;
  for (const Shape& s : shapes) {
    const Tensor t = random_cpu(s, DType::f32, gen, -1, 1);
    cpu_leaves.push_back(t.detach().requires_grad_());
    gpu_leaves.push_back(t.to(kGpu).requires_grad_());
  }
  auto loss_of = [](const std::vector<Tensor>& p) {
    const Tensor h = addmm(p[0], p[1], p[2]).view({2, 4, 12}).narrow(2, 0, 4);  // [2, 4, 4]
    const Tensor logits = matmul(h.unsqueeze(1), p[3]);                       // [2, 3, 4, 5]
    return sum(max(log_softmax(logits, -1), 1));
  };
  const Tensor cpu_loss = loss_of(cpu_leaves), gpu_loss = loss_of(gpu_leaves);
  CHECK(relative_error(gpu_loss, cpu_loss) <= 1e-5);
  cpu_loss.backward();
  gpu_loss.backward();
  for (size_t i = 0; i < shapes.size(); ++i) {
    INFO("leaf " << i << " of shape " << shape_str(shapes[i]));
    REQUIRE(gpu_leaves[i].grad().defined());
    CHECK(gpu_leaves[i].grad().device() == kGpu);
    CHECK(relative_error(gpu_leaves[i].grad(), cpu_leaves[i].grad()) <= 1e-4);
  }
}

namespace {

// The largest |a - b| / max(|b|, smallest normal of the dtype): relative error, and
// in the subnormal range (where one ulp is a large fraction) error in normal ulps.
double worst_element_error(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = values_of(a), y = values_of(b);
  REQUIRE(x.size() == y.size());
  const double smallest_normal = b.dtype() == DType::f16 ? 0x1p-14 : 0x1p-126;
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    worst = std::max(worst, std::abs(x[i] - y[i]) / std::max(std::abs(y[i]), smallest_normal));
  }
  return worst;
}

}  // namespace

TEST_CASE("cuda linear with its bias and GELU in the GEMM epilogue matches the cpu, values and gradients",
          "[gpu][matmul]") {
  const unsigned seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937 gen(seed);
  struct LinearCase {
    std::string name;
    Shape x, w;
    int64_t x_pad;  // extra columns in x's storage: a row stride that is not a multiple of 8
  };
  // Odd sizes (guarded mma.sync, SIMT for f32); tile-sized (wgmma with bulk stores of C);
  // 200 rows (wgmma's last 128-row tile half outside, its bulk stores clipped); an
  // output 45 wide (aligned operands but an odd ldc: wgmma's direct stores with the bias,
  // mma.sync where there is an activation); a padded input (misaligned rows: the
  // mma.sync guarded path even on Hopper).
  const std::vector<LinearCase> shapes = {{"odd", {3, 5, 37}, {45, 37}, 0},
                                          {"tile-sized", {2, 128, 192}, {384, 192}, 0},
                                          {"partial row tile", {2, 100, 192}, {384, 192}, 0},
                                          {"odd output width", {130, 64}, {45, 64}, 0},
                                          {"padded rows", {70, 64}, {136, 64}, 3}};
  for (const GemmKernels& kernels : kEveryGemmKernel) {
    const GemmKernelsScope scope(kernels);
    for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
      for (const LinearCase& c : shapes) {
        for (LinearActivation act : {LinearActivation::none, LinearActivation::gelu_tanh, LinearActivation::gelu_erf}) {
          INFO(c.name << " in " << name_of(dtype) << ", activation " << static_cast<int>(act) << ", wgmma "
                      << kernels.wgmma << ", tile width " << kernels.tile_n);
          Shape stored = c.x;
          stored.back() += c.x_pad;
          const Tensor x_stored = random_cpu(stored, dtype, gen, -1, 1);
          const Tensor w = random_cpu(c.w, dtype, gen, -0.3, 0.3), b = random_cpu({c.w[0]}, dtype, gen, -1, 1);
          Shape out_shape = c.x;
          out_shape.back() = c.w[0];
          const Tensor upstream = random_cpu(out_shape, dtype, gen, -1, 1);
          std::vector<Tensor> grads[2];
          Tensor outs[2];
          for (int d = 0; d < 2; ++d) {
            const Device device = d == 0 ? kCpu : kGpu;
            // Leaves on each device (to(kCpu) would hand back x_stored itself).
            const Tensor xs = x_stored.to(device).detach().requires_grad_();
            const Tensor wd = w.to(device).detach().requires_grad_(), bd = b.to(device).detach().requires_grad_();
            const Tensor x = xs.narrow(-1, 0, c.x.back());
            outs[d] = linear(x, wd, bd, act);
            outs[d].backward(upstream.to(device));
            grads[d] = {xs.grad(), wd.grad(), bd.grad()};
          }
          CHECK(outs[1].device() == kGpu);
          CHECK(relative_error(outs[1], outs[0]) <= tolerance(dtype));
          for (int i = 0; i < 3; ++i) {
            INFO("gradient " << i);
            CHECK(relative_error(grads[1][i], grads[0][i]) <= tolerance(dtype));
          }
          CHECK(grads[1][1].is_contiguous());
          if (act != LinearActivation::none) {
            // The epilogue's GELU is the gelu op's on the rounded pre-activation: equal up to
            // how nvcc contracts the same expression into FMAs (an ulp at most).
            NoGradGuard no_grad;
            // Both sides on one GEMM kernel: an output width that is not a multiple of 8
            // sends the fused GEMM to mma.sync but the plain one to wgmma, whose sums may
            // round differently.
            std::optional<WgmmaOff> same_kernel;
            if (c.w[0] % 8 != 0) same_kernel.emplace();
            const Tensor x = x_stored.to(kGpu).narrow(-1, 0, c.x.back());
            const Tensor separate = gelu(linear(x, w.to(kGpu), b.to(kGpu)),
                                         act == LinearActivation::gelu_tanh ? GeluApproximation::tanh
                                                                            : GeluApproximation::none);
            const double ulp = dtype == DType::f32 ? 0x1p-23 : dtype == DType::bf16 ? 0x1p-7 : 0x1p-10;
            CHECK(worst_element_error(linear(x, w.to(kGpu), b.to(kGpu), act), separate) <= ulp);
          }
        }
      }
    }
  }
}

TEST_CASE("cuda matmul reads large 16-bit operands with unaligned rows through aligned copies, like GPT-2's head",
          "[gpu][matmul]") {
  const unsigned seed = fresh_seed();
  CAPTURE(seed);
  std::mt19937 gen(seed);
  // logits = h . W^T with W [1025, 96] (a tied head of an odd vocabulary): the backward's
  // dlogits [1024, 1025] has rows of 2050 bytes, which no tensor-core path reads in place.
  for (DType dtype : {DType::bf16, DType::f16}) {
    INFO(name_of(dtype));
    const Tensor h = random_cpu({1024, 96}, dtype, gen, -1, 1), w = random_cpu({1025, 96}, dtype, gen, -0.3, 0.3);
    const Tensor upstream = random_cpu({1024, 1025}, dtype, gen, -1, 1);
    Tensor logits[2], dh[2], dw[2];
    for (int d = 0; d < 2; ++d) {
      const Device device = d == 0 ? kCpu : kGpu;
      const Tensor hd = h.to(device).detach().requires_grad_(), wd = w.to(device).detach().requires_grad_();
      logits[d] = matmul(hd, wd.t());
      logits[d].backward(upstream.to(device));
      dh[d] = hd.grad();
      dw[d] = wd.grad();
    }
    CHECK(relative_error(logits[1], logits[0]) <= tolerance(dtype));
    CHECK(relative_error(dh[1], dh[0]) <= tolerance(dtype));
    CHECK(relative_error(dw[1], dw[0]) <= tolerance(dtype));
    // The product with dlogits as an operand ran on the tensor cores, not the guarded loads.
    NoGradGuard no_grad;
    const Tensor dh_again = matmul(upstream.to(kGpu), w.to(kGpu));
    CHECK(kernels::cuda::gemm_last_path() != kernels::cuda::GemmPath::mma_sync_guarded);
    CHECK(same_bits(dh_again, dh[1]));
  }
}
