// cat, stack and split (dtr/tensor/ops/shape_ops.h) on CUDA tensors against the
// CPU ops on the same inputs: every dtype, every dim, empty, one-element, odd and
// large operands, non-contiguous operands; gradients through all three (cat's
// narrowed gradient, stack's unsqueeze + cat, split's per-piece narrow views with
// only some pieces used); mixed devices as an error.
//
// Tolerance: none. The forwards and backwards are copies (Tensor::copy_ on the
// strided copy kernel) and zero fills, and the gradient of a value used once is
// accumulated as 0 + g, so everything must match the CPU bit for bit.
#include "tests/support/gpu_test_support.h"
#include "dtr/tensor/autograd/engine.h"
#include "dtr/tensor/cuda/cuda_runtime.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/shape_ops.h"
#include "dtr/tensor/random.h"

#include <catch2/catch.hpp>

#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

using namespace dtr;
using namespace dtr::testing::gpu;

namespace {

// "" when got and want have the same dtype, shape and bytes; otherwise what
// differs, with the first differing element (flat index and both values).
std::string bit_difference(const Tensor& got, const Tensor& want) {
  std::ostringstream os;
  if (got.dtype() != want.dtype() || got.sizes() != want.sizes()) {
    os << "dtype/shape " << name_of(got.dtype()) << shape_str(got.sizes()) << " vs "
       << name_of(want.dtype()) << shape_str(want.sizes());
    return os.str();
  }
  const Tensor g = got.to(kCpu).contiguous(), w = want.to(kCpu).contiguous();
  const size_t es = element_size(g.dtype());
  const auto* gb = static_cast<const unsigned char*>(g.raw_data());
  const auto* wb = static_cast<const unsigned char*>(w.raw_data());
  if (g.numel() == 0 || std::memcmp(gb, wb, g.nbytes()) == 0) return "";
  int64_t count = 0, first = -1;
  for (int64_t i = 0; i < g.numel(); ++i) {
    if (std::memcmp(gb + i * es, wb + i * es, es) != 0 && count++ == 0) first = i;
  }
  const Tensor gf = g.reshape({g.numel()}), wf = w.reshape({w.numel()});
  os.precision(17);
  os << count << " of " << g.numel() << " elements differ (shape " << shape_str(g.sizes())
     << ", dtype " << name_of(g.dtype()) << "); first at flat index " << first << ": gpu "
     << gf.narrow(0, first, 1).item() << ", cpu " << wf.narrow(0, first, 1).item();
  return os.str();
}

#define CHECK_SAME_BITS(got, want)                             \
  do {                                                         \
    const std::string diff_ = bit_difference((got), (want));   \
    INFO(diff_);                                               \
    CHECK(diff_.empty());                                      \
  } while (0)

std::vector<Tensor> to_gpu(const std::vector<Tensor>& ts) {
  std::vector<Tensor> out;
  for (const Tensor& t : ts) out.push_back(t.to(kGpu));
  return out;
}

// Leaves on `device` holding the values of `ts` (which are on the CPU).
std::vector<Tensor> leaves(const std::vector<Tensor>& ts, Device device) {
  std::vector<Tensor> out;
  for (const Tensor& t : ts) out.push_back(t.to(device).detach().requires_grad_());
  return out;
}

}  // namespace

TEST_CASE("CUDA cat along every dim equals the CPU bit for bit for every dtype",
          "[gpu][shape_ops]") {
  const unsigned seed = fresh_seed();
  CAPTURE(seed);
  Generator gen(seed);
  for (DType dtype : kAllDtypes) {
    for (int64_t dim : {0, 1, 2, -1, -3}) {
      // Sizes along the joined dim: 2, 0 (an empty operand), 5, 1 and 33.
      std::vector<Tensor> cpu;
      for (int64_t n : {2, 0, 5, 1, 33}) {
        Shape s = {3, 4, 7};
        s[dim < 0 ? dim + 3 : dim] = n;
        cpu.push_back(random_cpu_philox(s, dtype, gen, -2, 2));
      }
      CAPTURE(name_of(dtype), dim);
      const Tensor got = cat(to_gpu(cpu), dim);
      REQUIRE(got.device() == kGpu);
      CHECK_SAME_BITS(got, cat(cpu, dim));
    }
    // One operand; non-contiguous operands (a transpose and a strided slice).
    const Tensor a = random_cpu_philox({5, 9}, dtype, gen, -2, 2);
    const Tensor b = random_cpu_philox({9, 5}, dtype, gen, -2, 2);
    const Tensor c = random_cpu_philox({5, 30}, dtype, gen, -2, 2);
    CHECK_SAME_BITS(cat({a.to(kGpu)}, 1), a);
    CHECK_SAME_BITS(cat({a.to(kGpu), b.to(kGpu).t(), c.to(kGpu).slice(1, 1, 30, 3)}, 1),
                    cat({a, b.t(), c.slice(1, 1, 30, 3)}, 1));
  }
  // Large operands with odd sizes.
  for (DType dtype : {DType::f32, DType::bf16, DType::u8}) {
    std::vector<Tensor> cpu = {random_cpu_philox({1000, 4097}, dtype, gen, -2, 2),
                               random_cpu_philox({1000, 127}, dtype, gen, -2, 2),
                               random_cpu_philox({1000, 1}, dtype, gen, -2, 2)};
    CAPTURE(name_of(dtype));
    CHECK_SAME_BITS(cat(to_gpu(cpu), 1), cat(cpu, 1));
    CHECK_SAME_BITS(cat({cpu[0].to(kGpu), cpu[0].to(kGpu)}, 0), cat({cpu[0], cpu[0]}, 0));
  }
}

TEST_CASE("CUDA stack at every position and split into pieces equal the CPU bit for bit",
          "[gpu][shape_ops]") {
  const unsigned seed = fresh_seed();
  CAPTURE(seed);
  Generator gen(seed);
  for (DType dtype : kAllDtypes) {
    std::vector<Tensor> cpu;
    for (int i = 0; i < 3; ++i) cpu.push_back(random_cpu_philox({4, 33}, dtype, gen, -2, 2));
    for (int64_t dim : {0, 1, 2, -1, -3}) {
      CAPTURE(name_of(dtype), dim);
      const Tensor got = stack(to_gpu(cpu), dim);
      REQUIRE(got.device() == kGpu);
      CHECK_SAME_BITS(got, stack(cpu, dim));
    }
    CHECK_SAME_BITS(stack({scalar_tensor(1, dtype, kGpu), scalar_tensor(2, dtype, kGpu)}),
                    stack({scalar_tensor(1, dtype), scalar_tensor(2, dtype)}));

    const Tensor t = random_cpu_philox({10, 127}, dtype, gen, -2, 2);
    const Tensor t_gpu = t.to(kGpu);
    for (int64_t dim : {0, 1}) {
      for (int64_t size : {1, 3, 10, 64, 200}) {
        CAPTURE(name_of(dtype), dim, size);
        const std::vector<Tensor> want = split(t, size, dim);
        const std::vector<Tensor> got = split(t_gpu, size, dim);
        REQUIRE(got.size() == want.size());
        for (size_t i = 0; i < got.size(); ++i) {
          CAPTURE(i);
          CHECK(got[i].device() == kGpu);
          CHECK_SAME_BITS(got[i], want[i]);
        }
      }
    }
    CHECK(split(empty({0, 3}, {.dtype = dtype, .device = kGpu}), 2, 0).size() == 1);
  }
}

TEST_CASE("gradients through cat, stack and split on CUDA equal the CPU's bit for bit",
          "[gpu][shape_ops]") {
  const unsigned seed = fresh_seed();
  CAPTURE(seed);
  Generator gen(seed);
  for (DType dtype : kFloating) {
    CAPTURE(name_of(dtype));
    const std::vector<Tensor> values = {random_cpu_philox({6, 5}, dtype, gen, -2, 2),
                                        random_cpu_philox({9, 6}, dtype, gen, -2, 2),
                                        random_cpu_philox({6, 1}, dtype, gen, -2, 2)};
    {
      INFO("cat of a tensor, a transposed one and a thin one along dim 1");
      const Tensor g = random_cpu_philox({6, 15}, dtype, gen, -2, 2);
      std::vector<Tensor> grads[2];
      for (int d = 0; d < 2; ++d) {
        const Device device = d == 0 ? kCpu : kGpu;
        std::vector<Tensor> in = leaves(values, device);
        cat({in[0], in[1].t(), in[2]}, 1).backward(g.to(device));
        for (const Tensor& t : in) grads[d].push_back(t.grad());
      }
      for (size_t i = 0; i < values.size(); ++i) {
        CAPTURE(i);
        REQUIRE(grads[1][i].defined());
        CHECK(grads[1][i].device() == kGpu);
        CHECK_SAME_BITS(grads[1][i], grads[0][i]);
      }
    }
    {
      INFO("cat where only the middle operand needs a gradient");
      const Tensor g = random_cpu_philox({20, 5}, dtype, gen, -2, 2);
      Tensor got;
      for (const Device device : {kCpu, kGpu}) {
        const Tensor mid = values[0].to(device).detach().requires_grad_();
        cat({zeros({4, 5}, {.dtype = dtype, .device = device}), mid,
             ones({10, 5}, {.dtype = dtype, .device = device})},
            0)
            .backward(g.to(device));
        if (device == kGpu) {
          CHECK_SAME_BITS(mid.grad(), got);
        } else {
          got = mid.grad();
        }
      }
    }
    {
      INFO("stack at dim 1 and -1");
      for (int64_t dim : {1, -1}) {
        CAPTURE(dim);
        const std::vector<Tensor> same = {values[0], random_cpu_philox({6, 5}, dtype, gen, -2, 2)};
        const Tensor g = random_cpu_philox(stack(same, dim).sizes(), dtype, gen, -2, 2);
        std::vector<Tensor> grads[2];
        for (int d = 0; d < 2; ++d) {
          const Device device = d == 0 ? kCpu : kGpu;
          std::vector<Tensor> in = leaves(same, device);
          stack(in, dim).backward(g.to(device));
          for (const Tensor& t : in) grads[d].push_back(t.grad());
        }
        CHECK_SAME_BITS(grads[1][0], grads[0][0]);
        CHECK_SAME_BITS(grads[1][1], grads[0][1]);
      }
    }
    {
      INFO("split into 4 pieces along dim 1, pieces 0, 2 and 3 used (3 is the remainder)");
      const Tensor x = random_cpu_philox({7, 23}, dtype, gen, -2, 2);
      const Tensor g0 = random_cpu_philox({7, 6}, dtype, gen, -2, 2);
      const Tensor g2 = random_cpu_philox({7, 6}, dtype, gen, -2, 2);
      const Tensor g3 = random_cpu_philox({7, 5}, dtype, gen, -2, 2);
      Tensor grads[2];
      for (int d = 0; d < 2; ++d) {
        const Device device = d == 0 ? kCpu : kGpu;
        const Tensor leaf = x.to(device).detach().requires_grad_();
        const std::vector<Tensor> pieces = split(leaf, 6, 1);
        REQUIRE(pieces.size() == 4);
        autograd::backward({pieces[0], pieces[2], pieces[3]},
                           {g0.to(device), g2.to(device), g3.to(device)});
        grads[d] = leaf.grad();
      }
      REQUIRE(grads[1].defined());
      CHECK(grads[1].device() == kGpu);
      CHECK_SAME_BITS(grads[1], grads[0]);
      // Piece 1 (columns 6..11) got no gradient: exactly 0.
      CHECK_SAME_BITS(grads[1].narrow(1, 6, 6), zeros({7, 6}, {.dtype = dtype}));
    }
  }
}

TEST_CASE("CUDA cat and stack of operands on different devices are clear errors",
          "[gpu][shape_ops]") {
  const Tensor a = zeros({2, 3}, {.device = kGpu});
  const Tensor b = zeros({2, 3});
  CHECK_THROWS_WITH(cat({a, b}, 0), Catch::Contains("cat: tensor 1 is on cpu, but tensor 0 is on cuda:0"));
  CHECK_THROWS_WITH(stack({b, a}), Catch::Contains("stack: tensor 1 is on cuda:0, but tensor 0 is on cpu"));
  CHECK_THROWS_WITH(cat({a, zeros({2, 4}, {.device = kGpu})}, 0),
                    Catch::Contains("cat: tensor 1 has shape [2, 4], but tensor 0 has shape [2, 3]"));
  CHECK_THROWS_WITH(cat({a, zeros({2, 3}, {.dtype = DType::f64, .device = kGpu})}, 0),
                    Catch::Contains("cat: tensor 1 has dtype f64, but tensor 0 has dtype f32"));
}
