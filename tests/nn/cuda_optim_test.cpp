// FusedAdamW and FusedSGD on CUDA (dtr/kernels/cuda/adamw.h, sgd.h) against the same
// optimizers on the CPU and the op-by-op AdamW and SGD on the CPU: parameters and
// state (exp_avg and exp_avg_sq; the momentum buffer) must be equal BIT FOR BIT
// (tolerance 0) in f32 and f64 after every step, over many tensors of sizes
// {1, 3, 4, 5, 1023, 4096, 100003} (and an empty one), five steps with weight
// decay, an lr change and a parameter that skips a step (SGD: with and without
// momentum, dampening and Nesterov); misaligned parameters (the element-wise path);
// more tensors than one launch's table holds; bf16 and f16 grads through the AdamW
// kernel entry points (CUDA kernel vs CPU kernel, bitwise); run-to-run determinism;
// and the errors for bad input.
#include "dtr/base/error.h"
#include "tests/support/gpu_test_support.h"
#include "dtr/kernels/cpu/adamw.h"
#include "dtr/kernels/cuda/adamw.h"
#include "dtr/kernels/cuda/sgd.h"
#include "dtr/nn/optim/adamw.h"
#include "dtr/nn/optim/fused_adamw.h"
#include "dtr/nn/optim/fused_sgd.h"
#include "dtr/nn/optim/sgd.h"
#include "dtr/tensor/cuda/cuda_runtime.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/elementwise.h"
#include "dtr/tensor/random.h"
#include "tests/support/op_by_op_optimizers.h"

#include <catch2/catch.hpp>

#include <cstring>
#include <iomanip>
#include <sstream>
#include <string>
#include <vector>

using namespace dtr;
using namespace dtr::testing::gpu;
using namespace dtr::nn::optim;
using dtr::testing::optim::OpByOpAdamW;
using dtr::testing::optim::OpByOpSGD;

namespace {

const std::vector<int64_t> kSizes = {1, 3, 4, 5, 1023, 4096, 100003, 0};

const AdamWOptions kOptions{.lr = 3e-3, .beta1 = 0.8, .beta2 = 0.95, .eps = 1e-6, .weight_decay = 0.1};

// Empty when a and b (same dtype) hold the same bits, else where and how they differ.
std::string bit_difference(const Tensor& a, const Tensor& b) {
  const Tensor x = a.detach().to(kCpu).contiguous(), y = b.detach().to(kCpu).contiguous();
  std::ostringstream os;
  if (x.sizes() != y.sizes() || x.dtype() != y.dtype()) {
    os << "shape/dtype " << shape_str(x.sizes()) << " " << dtype_name(x.dtype()) << " vs " << shape_str(y.sizes())
       << " " << dtype_name(y.dtype());
    return os.str();
  }
  const size_t width = element_size(x.dtype());
  const auto* px = static_cast<const unsigned char*>(x.raw_data());
  const auto* py = static_cast<const unsigned char*>(y.raw_data());
  int64_t count = 0, first = -1;
  for (int64_t i = 0; i < x.numel(); ++i) {
    if (std::memcmp(px + i * width, py + i * width, width) != 0) {
      if (first < 0) first = i;
      ++count;
    }
  }
  if (count == 0) return {};
  const std::vector<double> vx = x.to(DType::f64).to_vector<double>(), vy = y.to(DType::f64).to_vector<double>();
  os << count << " of " << x.numel() << " elements differ (" << dtype_name(x.dtype()) << ", shape " << shape_str(x.sizes())
     << "); first at index " << first << ": " << std::setprecision(17) << vx[first] << " vs " << vy[first];
  return os.str();
}

#define CHECK_SAME_BITS(a, b, what)                       \
  do {                                                    \
    const std::string diff_ = bit_difference((a), (b));   \
    INFO(what << ": " << diff_);                          \
    CHECK(diff_.empty());                                 \
  } while (0)

// Parameters of the given sizes on `device` (same values for the same seed), each a
// contiguous view at element offset `offset` of its own buffer.
std::vector<Tensor> make_params(const std::vector<int64_t>& sizes, DType dtype, Device device, uint64_t seed,
                                int64_t offset = 0) {
  manual_seed(seed);
  std::vector<Tensor> params;
  for (int64_t n : sizes) {
    Tensor values = randn({n}, {.dtype = dtype});
    Tensor buffer = zeros({n + offset}, {.dtype = dtype, .device = device});
    Tensor p = buffer.narrow(0, offset, n);
    p.copy_(values);
    p.requires_grad_();
    params.push_back(p);
  }
  return params;
}

// The same fresh gradient (larger than the weights) on each list's parameter; parameter
// `skip` gets none this step.
void set_grads(const std::vector<std::vector<Tensor>*>& lists, uint64_t seed, size_t skip) {
  manual_seed(seed);
  const std::vector<Tensor>& first = *lists.front();
  for (size_t i = 0; i < first.size(); ++i) {
    const Tensor g = randn(first[i].sizes(), {.dtype = first[i].dtype()}) * 3.0;
    for (std::vector<Tensor>* list : lists) {
      const Tensor& p = (*list)[i];
      p.set_grad(i == skip ? Tensor() : g.to(p.device()).clone());
    }
  }
}

void check_same_state(const Optimizer& want, const Optimizer& got, const std::string& label) {
  REQUIRE(want.params().size() == got.params().size());
  for (size_t i = 0; i < want.params().size(); ++i) {
    const std::string what =
        label + ", parameter " + std::to_string(i) + " of " + std::to_string(want.params()[i]->numel()) + " elements";
    CHECK_SAME_BITS(got.params()[i], want.params()[i], what + " (param)");
    CHECK(want.state(i).step == got.state(i).step);
    for (const auto& [name, t] : want.state(i).tensors) {
      REQUIRE(got.state(i).tensors.count(name) == 1);
      CHECK_SAME_BITS(got.state(i).tensors.at(name), t, what + " (" + name + ")");
    }
  }
}

// Five steps of the fused optimizer on CUDA and on the CPU and of the op-by-op one
// (Ref) on the CPU, on identical inputs, compared bitwise after every step. Parameter 2
// skips step 2; the lr halves after step 3.
template <class Ref, class Fused, class Options>
void check_fused_matches_cpu(const std::vector<int64_t>& sizes, DType dtype, int64_t gpu_offset,
                             const Options& options) {
  std::vector<Tensor> ref = make_params(sizes, dtype, kCpu, 7);
  std::vector<Tensor> cpu = make_params(sizes, dtype, kCpu, 7);
  std::vector<Tensor> gpu = make_params(sizes, dtype, kGpu, 7, gpu_offset);
  Ref ref_opt(ref, options);
  Fused cpu_opt(cpu, options);
  Fused gpu_opt(gpu, options);
  for (int t = 0; t < 5; ++t) {
    if (t == 3) {
      for (Optimizer* o : std::vector<Optimizer*>{&ref_opt, &cpu_opt, &gpu_opt}) o->set_lr(o->lr() * 0.5);
    }
    set_grads({&ref, &cpu, &gpu}, 100 + static_cast<uint64_t>(t), t == 1 ? 2 : 999);
    ref_opt.step();
    cpu_opt.step();
    gpu_opt.step();
    const std::string label = std::string(dtype_name(dtype)) + ", step " + std::to_string(t + 1) + ", offset " +
                              std::to_string(gpu_offset);
    check_same_state(cpu_opt, gpu_opt, label + " (fused: CUDA vs CPU)");
    check_same_state(ref_opt, gpu_opt, label + " (CUDA fused vs CPU op by op)");
  }
  CHECK(gpu_opt.state(2).step == 4);  // the skipped step
  CHECK(!bit_difference(gpu[6], make_params(sizes, dtype, kCpu, 7)[6]).empty());  // the parameters moved
}

void check_matches_cpu(const std::vector<int64_t>& sizes, DType dtype, int64_t gpu_offset, const AdamWOptions& options) {
  check_fused_matches_cpu<OpByOpAdamW, FusedAdamW>(sizes, dtype, gpu_offset, options);
}

// FusedSGD's settings: plain, weight decay, momentum, dampening, Nesterov.
const std::vector<SGDOptions> kSGDVariants = {
    {.lr = 0.05},
    {.lr = 0.05, .weight_decay = 0.01},
    {.lr = 0.05, .momentum = 0.9},
    {.lr = 0.05, .momentum = 0.9, .dampening = 0.25, .weight_decay = 0.01},
    {.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true},
};

void check_sgd_matches_cpu(const std::vector<int64_t>& sizes, DType dtype, int64_t gpu_offset) {
  for (const SGDOptions& options : kSGDVariants) {
    INFO("momentum " << options.momentum << ", dampening " << options.dampening << ", weight_decay "
                     << options.weight_decay << (options.nesterov ? ", nesterov" : ""));
    check_fused_matches_cpu<OpByOpSGD, FusedSGD>(sizes, dtype, gpu_offset, options);
  }
}

}  // namespace

TEST_CASE("CUDA FusedAdamW equals CPU FusedAdamW and AdamW bit for bit on f32 parameters over five steps",
          "[gpu][optim]") {
  check_matches_cpu(kSizes, DType::f32, 0, kOptions);
}

TEST_CASE("CUDA FusedAdamW equals the CPU bit for bit on f64 parameters", "[gpu][optim]") {
  check_matches_cpu(kSizes, DType::f64, 0, kOptions);
}

TEST_CASE("CUDA FusedAdamW equals the CPU bit for bit on misaligned parameters (element-wise path)",
          "[gpu][optim]") {
  for (int64_t offset : {1, 2, 3}) check_matches_cpu(kSizes, DType::f32, offset, kOptions);
  check_matches_cpu(kSizes, DType::f64, 1, kOptions);
}

TEST_CASE("CUDA FusedAdamW equals the CPU with default options and without weight decay", "[gpu][optim]") {
  check_matches_cpu(kSizes, DType::f32, 0, AdamWOptions{});
  check_matches_cpu(kSizes, DType::f32, 0, AdamWOptions{.lr = 1e-2, .weight_decay = 0.0});
}

TEST_CASE("CUDA FusedAdamW over more tensors than one launch's table equals the CPU", "[gpu][optim]") {
  // Several hundred tensors fit a launch: 1500 small ones of varied sizes take several launches.
  std::vector<int64_t> sizes;
  for (int i = 0; i < 1500; ++i) sizes.push_back(1 + (i * 37) % 300);
  sizes.push_back(100003);
  check_matches_cpu(sizes, DType::f32, 0, kOptions);
}

TEST_CASE("CUDA FusedAdamW gives the same bits on two runs", "[gpu][optim]") {
  std::vector<Tensor> a = make_params(kSizes, DType::f32, kGpu, 5);
  std::vector<Tensor> b = make_params(kSizes, DType::f32, kGpu, 5, 1);
  FusedAdamW oa(a, kOptions), ob(b, kOptions);
  for (int t = 0; t < 3; ++t) {
    set_grads({&a, &b}, 50 + static_cast<uint64_t>(t), 999);
    oa.step();
    ob.step();
  }
  check_same_state(oa, ob, "run 1 vs run 2");
}

namespace {

// One tensor's four arrays.
struct Arrays {
  Tensor p, g, m, v;
};

// The kernels directly with half-precision grads: CUDA adamw<float, G> against CPU
// adamw<float, G> on the same arrays, three updates (steps 1, 2, 7), bitwise.
template <class G>
void check_half_grads(DType grad_dtype) {
  const kernels::cpu::AdamWHyper hyper{.lr = 2e-3, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .weight_decay = 0.05};
  std::vector<int64_t> sizes = kSizes;
  sizes.push_back(8193);
  for (int64_t offset : {0, 1}) {
    manual_seed(42 + static_cast<uint64_t>(offset));
    std::vector<Arrays> cpu, gpu;
    for (int64_t n : sizes) {
      Arrays c{randn({n}), randn({n}, {.dtype = grad_dtype}) * 4.0, randn({n}) * 0.1, rand({n}) * 0.01};
      cpu.push_back(c);
      auto on_gpu = [&](const Tensor& t) {
        Tensor buffer = zeros({n + offset}, {.dtype = t.dtype(), .device = kGpu});
        Tensor view = buffer.narrow(0, offset, n);
        view.copy_(t);
        return view;
      };
      gpu.push_back({on_gpu(c.p), on_gpu(c.g), on_gpu(c.m), on_gpu(c.v)});
    }
    for (int64_t step : {1, 2, 7}) {
      std::vector<kernels::cpu::AdamWTensor<float, G>> cpu_arrays, gpu_arrays;
      for (size_t k = 0; k < sizes.size(); ++k) {
        cpu_arrays.push_back({cpu[k].p.data<float>(), cpu[k].g.data<G>(), cpu[k].m.data<float>(),
                              cpu[k].v.data<float>(), sizes[k], step});
        gpu_arrays.push_back({gpu[k].p.data<float>(), gpu[k].g.data<G>(), gpu[k].m.data<float>(),
                              gpu[k].v.data<float>(), sizes[k], step});
      }
      kernels::cpu::adamw(cpu_arrays.data(), cpu_arrays.size(), hyper);
      kernels::cuda::adamw(gpu_arrays.data(), gpu_arrays.size(), hyper, cuda::current_stream(0));
      for (size_t k = 0; k < sizes.size(); ++k) {
        const std::string what = std::string(dtype_name(grad_dtype)) + " grads, offset " + std::to_string(offset) +
                                 ", step " + std::to_string(step) + ", tensor of " + std::to_string(sizes[k]);
        CHECK_SAME_BITS(gpu[k].p, cpu[k].p, what + " (param)");
        CHECK_SAME_BITS(gpu[k].m, cpu[k].m, what + " (exp_avg)");
        CHECK_SAME_BITS(gpu[k].v, cpu[k].v, what + " (exp_avg_sq)");
      }
    }
  }
}

}  // namespace

TEST_CASE("CUDA adamw kernel with bf16 and f16 grads equals the CPU kernel bit for bit", "[gpu][optim]") {
  check_half_grads<bf16>(DType::bf16);
  check_half_grads<f16>(DType::f16);
}

TEST_CASE("CUDA adamw kernel keeps subnormal and tiny values as the CPU does", "[gpu][optim]") {
  // Tiny grads make v subnormal and the update's quotients extreme: a flush-to-zero or
  // a contracted FMA would show up here.
  const int64_t n = 4099;
  Tensor p = randn({n}) * 1e-30;
  Tensor g = randn({n}) * 1e-22;
  Tensor m = randn({n}) * 1e-38;
  Tensor v = rand({n}) * 1e-44;
  std::vector<Tensor> cpu = {p.clone(), g.clone(), m.clone(), v.clone()};
  std::vector<Tensor> gpu = {p.to(kGpu), g.to(kGpu), m.to(kGpu), v.to(kGpu)};
  const kernels::cpu::AdamWHyper hyper{.lr = 1e-3, .eps = 1e-40, .weight_decay = 0.5};  // a subnormal eps
  kernels::cpu::AdamWTensor<float, float> c{cpu[0].data<float>(), cpu[1].data<float>(), cpu[2].data<float>(),
                                            cpu[3].data<float>(), n, 3};
  kernels::cpu::AdamWTensor<float, float> d{gpu[0].data<float>(), gpu[1].data<float>(), gpu[2].data<float>(),
                                            gpu[3].data<float>(), n, 3};
  kernels::cpu::adamw(&c, 1, hyper);
  kernels::cuda::adamw(&d, 1, hyper, cuda::current_stream(0));
  CHECK_SAME_BITS(gpu[0], cpu[0], "param");
  CHECK_SAME_BITS(gpu[2], cpu[2], "exp_avg");
  CHECK_SAME_BITS(gpu[3], cpu[3], "exp_avg_sq");
}

TEST_CASE("CUDA FusedAdamW refuses strided parameters, and the kernel refuses bad input",
          "[gpu][optim]") {
  Tensor strided = randn({3, 4}).to(kGpu).t();
  strided.requires_grad_();
  CHECK_THROWS_WITH(FusedAdamW({strided}, {}), Catch::Contains("not contiguous"));
  Tensor p = randn({5}).to(kGpu);
  p.requires_grad_();
  CHECK_THROWS_AS(p.set_grad(randn({5})), Error);  // a grad on another device never reaches the optimizer
  float* x = p.detach().data<float>();
  kernels::cpu::AdamWTensor<float, float> bad_step{x, x, x, x, 5, 0};
  CHECK_THROWS_AS(kernels::cuda::adamw(&bad_step, 1, {}, cuda::current_stream(0)), Error);
  kernels::cpu::AdamWTensor<float, float> null_array{x, nullptr, x, x, 5, 1};
  CHECK_THROWS_AS(kernels::cuda::adamw(&null_array, 1, {}, cuda::current_stream(0)), Error);
}

TEST_CASE("CUDA FusedSGD equals CPU FusedSGD and SGD bit for bit with and without momentum, dampening and Nesterov",
          "[gpu][optim]") {
  check_sgd_matches_cpu(kSizes, DType::f32, 0);
  check_sgd_matches_cpu(kSizes, DType::f64, 0);
}

TEST_CASE("CUDA FusedSGD equals the CPU bit for bit on misaligned parameters and over several launches",
          "[gpu][optim]") {
  check_sgd_matches_cpu(kSizes, DType::f32, 1);
  check_sgd_matches_cpu(kSizes, DType::f64, 1);
  std::vector<int64_t> sizes;
  for (int i = 0; i < 1500; ++i) sizes.push_back(1 + (i * 37) % 300);
  sizes.push_back(100003);
  check_fused_matches_cpu<OpByOpSGD, FusedSGD>(sizes, DType::f32, 0,
                                         SGDOptions{.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01});
}

TEST_CASE("CUDA FusedSGD refuses strided parameters, and the kernel refuses a missing momentum buffer",
          "[gpu][optim]") {
  Tensor strided = randn({3, 4}).to(kGpu).t();
  strided.requires_grad_();
  CHECK_THROWS_WITH(FusedSGD({strided}, {}), Catch::Contains("not contiguous"));
  Tensor p = randn({5}).to(kGpu);
  float* x = p.data<float>();
  const kernels::cpu::SGDTensor<float> no_buffer{x, x, nullptr, 5, 2};
  CHECK_THROWS_WITH(kernels::cuda::sgd(&no_buffer, 1, {.lr = 0.1, .momentum = 0.9}, cuda::current_stream(0)),
                    Catch::Contains("momentum buffer"));
  const kernels::cpu::SGDTensor<float> bad_step{x, x, x, 5, 0};
  CHECK_THROWS_WITH(kernels::cuda::sgd(&bad_step, 1, {.lr = 0.1}, cuda::current_stream(0)), Catch::Contains("step"));
}
