// CUDA tensors: host<->device copies (contiguous, strided, converting), fill and
// arange on the device, all checked against values computed on the CPU; the
// device's rounding to bf16 against Eigen's, bit for bit, over every class of float.
#include "tests/support/gpu_test_support.h"
#include "dtr/tensor/allocator.h"
#include "dtr/tensor/cuda/cuda_allocator.h"
#include "dtr/tensor/cuda/cuda_runtime.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/elementwise.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <random>
#include <vector>

using namespace dtr;
using namespace dtr::testing::gpu;

namespace {
Tensor iota(const Shape& shape, DType dtype = DType::f32) {
  return arange(numel_of(shape), {.dtype = dtype}).view(shape);
}

// The ctest entry gpu_allocator_without_caching runs the [allocator] cases again with
// DTR_CUDA_NO_CACHING=1: there the caching cases step aside and the last one checks.
bool caching_turned_off() {
  if (cuda::CudaCachingAllocator::instance().caching_enabled()) return false;
  WARN("DTR_CUDA_NO_CACHING is set: this case checks the caching, so it does not apply");
  return true;
}
}  // namespace

TEST_CASE("a GPU is present for the gpu tests", "[gpu]") { REQUIRE(cuda::device_count() > 0); }

TEST_CASE("round trip host -> device -> host keeps every dtype bit for bit", "[gpu]") {
  for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i32, DType::i64, DType::u8}) {
    Tensor host = iota({3, 7}, dtype);
    Tensor dev = host.to(kGpu);
    CHECK(dev.device() == kGpu);
    CHECK(dev.dtype() == dtype);
    Tensor back = dev.to(Device::cpu());
    CHECK(back.to(DType::f64).to_vector<double>() == host.to(DType::f64).to_vector<double>());
  }
}

TEST_CASE("strided and converting copies on and off the device", "[gpu]") {
  Tensor host = iota({4, 6});  // h[i][j] = 6i + j
  Tensor dev = host.to(kGpu);
  // A transposed slice on the device, copied back.
  Tensor view = dev.slice(1, 1, 6, 2).t();  // [3, 4]: v[c][i] = 6i + 1 + 2c
  std::vector<float> expected;
  for (int c = 0; c < 3; ++c)
    for (int i = 0; i < 4; ++i) expected.push_back(static_cast<float>(6 * i + 1 + 2 * c));
  CHECK(view.to(Device::cpu()).to_vector<float>() == expected);
  CHECK(view.contiguous().to(Device::cpu()).to_vector<float>() == expected);
  // Into a strided device destination, converting f32 -> bf16.
  Tensor dst = zeros({6, 4}, {.dtype = DType::bf16, .device = kGpu});
  dst.t().copy_(host);
  std::vector<bf16> expected_t;
  for (int j = 0; j < 6; ++j)
    for (int i = 0; i < 4; ++i) expected_t.push_back(bf16(static_cast<float>(6 * i + j)));
  CHECK(dst.to(Device::cpu()).to_vector<bf16>() == expected_t);
  // Device -> strided host destination with broadcasting.
  Tensor row = from_vector<double>({1, 2, 3}).to(kGpu);
  Tensor host_dst = zeros({3, 2}, {.dtype = DType::f64});
  host_dst.t().copy_(row);
  CHECK(host_dst.to_vector<double>() == std::vector<double>{1, 1, 2, 2, 3, 3});
}

// Every dtype into every dtype on the device, from a contiguous and a transposed source,
// equals the cpu's conversion bit for bit. The values, in [0, 100) with fractions, fit
// every dtype's range, so each conversion is defined (truncation toward 0 into integers).
TEST_CASE("converting copies on the device between every pair of dtypes equal the cpu's", "[gpu]") {
  std::mt19937 gen(5);
  const Tensor values = random_cpu({33, 65}, DType::f64, gen, 0, 100);
  for (DType from : kAllDtypes) {
    const Tensor source = values.to(from);
    for (DType to : kAllDtypes) {
      CAPTURE(name_of(from), name_of(to));
      CHECK(same_bits(source.to(kGpu).to(to), source.to(to)));
      CHECK(same_bits(source.to(kGpu).t().to(to), source.t().to(to)));
    }
  }
}

// Every upper half of a float's bits (sign, exponent, the 7 mantissa bits bf16 keeps)
// with lower halves below, at and above the rounding tie, 0, the largest and a random
// one: every exponent (subnormals, the overflow to infinity), both tie directions, and
// NaNs with many payloads and both signs.
std::vector<float> floats_of_every_class() {
  std::mt19937 rng(11);
  std::vector<float> values;
  for (uint32_t hi = 0; hi < 0x10000u; ++hi) {
    for (uint32_t lo : {0x0000u, 0x7FFFu, 0x8000u, 0x8001u, 0xFFFFu, static_cast<uint32_t>(rng()) & 0xFFFFu}) {
      values.push_back(std::bit_cast<float>((hi << 16) | lo));
    }
  }
  return values;
}

TEST_CASE("the device rounds f32 to bf16 to the cpu's bits, NaNs included", "[gpu]") {
  // The device converts with cvt.rn.bf16.f32 (dtr/kernels/scalar_types.h); the cpu with
  // Eigen. Both round to nearest even and make a NaN the quiet NaN of its sign.
  const std::vector<float> values = floats_of_every_class();
  const Tensor host = from_vector(values, {static_cast<int64_t>(values.size())});
  SECTION("a converting copy (convert<bf16>)") {
    CHECK(same_bits(host.to(kGpu).to(DType::bf16), host.to(DType::bf16)));
  }
  SECTION("an elementwise op storing bf16 (products of two bf16 need rounding)") {
    // bf16 operands from the same bit patterns; their f32 products have up to 16
    // significant bits, so the store rounds, ties included. A product that is NaN
    // only has to be NaN: which NaN a multiply makes differs between x86 and the GPU
    // (before any rounding to bf16).
    std::vector<float> shuffled = values;
    std::shuffle(shuffled.begin(), shuffled.end(), std::mt19937(12));
    const Tensor a = host.to(DType::bf16);
    const Tensor b = from_vector(shuffled, {static_cast<int64_t>(shuffled.size())}).to(DType::bf16);
    const std::vector<bf16> got = mul(a.to(kGpu), b.to(kGpu)).to(kCpu).to_vector<bf16>();
    const std::vector<bf16> want = mul(a, b).to_vector<bf16>();
    REQUIRE(got.size() == want.size());
    int64_t wrong = 0, first = -1;
    for (size_t i = 0; i < want.size(); ++i) {
      const auto g = std::bit_cast<uint16_t>(got[i]), w = std::bit_cast<uint16_t>(want[i]);
      const bool both_nan = (g & 0x7FFFu) > 0x7F80u && (w & 0x7FFFu) > 0x7F80u;
      if (g != w && !both_nan && wrong++ == 0) first = static_cast<int64_t>(i);
    }
    INFO("first difference at " << first);
    CHECK(wrong == 0);
  }
}

TEST_CASE("fill and arange run on the device", "[gpu]") {
  Tensor t = zeros({5, 3}, {.dtype = DType::i64, .device = kGpu});
  t.narrow(0, 1, 2).fill_(int64_t{1} << 40);
  std::vector<int64_t> got = t.to(Device::cpu()).to_vector<int64_t>();
  for (int i = 0; i < 15; ++i) CHECK(got[i] == ((i >= 3 && i < 9) ? (int64_t{1} << 40) : 0));
  Tensor a = arange(-1, 1, 0.5, {.dtype = DType::f16, .device = kGpu});
  CHECK(a.to(Device::cpu()).to(DType::f32).to_vector<float>() == std::vector<float>{-1, -0.5, 0, 0.5});
}

TEST_CASE("the caching allocator reuses freed blocks without new driver memory", "[gpu][allocator]") {
  cuda::init();
  if (caching_turned_off()) return;
  Tensor warm = empty({1 << 20}, {.device = kGpu});  // 4 MiB
  warm = Tensor();
  const MemoryStats before = memory_stats(kGpu);
  for (int step = 0; step < 10; ++step) {
    Tensor buf = empty({1 << 20}, {.device = kGpu, .tag = MemoryTag::comm_buffer});
    buf.fill_(step);
  }
  const MemoryStats after = memory_stats(kGpu);
  CHECK(after.reserved_bytes == before.reserved_bytes);
  CHECK(after[MemoryTag::comm_buffer].current_bytes == before[MemoryTag::comm_buffer].current_bytes);
  CHECK(after[MemoryTag::comm_buffer].peak_bytes - before[MemoryTag::comm_buffer].current_bytes ==
        (int64_t{4} << 20));
  CHECK(after.reserved_bytes >= (int64_t{4} << 20));
}

TEST_CASE("a block used on another stream is reused only after that stream's work", "[gpu][allocator]") {
  cuda::init();
  if (caching_turned_off()) return;
  auto& alloc = cuda::CudaCachingAllocator::instance();
  cudaStream_t side = cuda::create_stream(0);
  const Shape three_mib = {3 << 18};  // f32: 3 MiB, a size class of its own here
  void* first = nullptr;
  void* second = nullptr;
  {
    Tensor t = empty(three_mib, {.device = kGpu});
    first = t.raw_data();
    alloc.record_stream(first, side);
    {
      // Queue several milliseconds of work on the side stream.
      cuda::StreamGuard guard(0, side);
      Tensor big = empty({1 << 26}, {.device = kGpu});
      for (int i = 0; i < 50; ++i) big.fill_(i);
    }
    t = Tensor();  // freed while the side stream is still busy: not reusable yet
    Tensor u = empty(three_mib, {.device = kGpu});
    second = u.raw_data();
    CHECK(second != first);
  }
  cuda::synchronize(0);
  const int64_t reserved = memory_stats(kGpu).reserved_bytes;
  // Once the side stream is idle, both blocks are back in the pool and reused.
  Tensor v1 = empty(three_mib, {.device = kGpu});
  Tensor v2 = empty(three_mib, {.device = kGpu});
  CHECK(((v1.raw_data() == first && v2.raw_data() == second) ||
         (v1.raw_data() == second && v2.raw_data() == first)));
  CHECK(memory_stats(kGpu).reserved_bytes == reserved);
}

TEST_CASE("size classes round up by at most a quarter", "[gpu][allocator]") {
  using A = cuda::CudaCachingAllocator;
  CHECK(A::round_size(1) == 512);
  CHECK(A::round_size(513) == 1024);
  CHECK(A::round_size((1 << 20) + 1) == (1 << 20) + (1 << 18));
  CHECK(A::round_size(3 << 20) == 3 << 20);
  for (size_t n : {size_t{1} << 21, (size_t{5} << 20) + 7, size_t{100} << 20}) {
    CHECK(A::round_size(n) >= n);
    CHECK(A::round_size(n) <= n + n / 4);
  }
}

TEST_CASE("with DTR_CUDA_NO_CACHING each tensor is its own driver allocation of its exact size",
          "[gpu][allocator]") {
  cuda::init();
  if (cuda::CudaCachingAllocator::instance().caching_enabled()) {
    WARN("DTR_CUDA_NO_CACHING is not set: this case runs under the ctest entry gpu_allocator_without_caching");
    return;
  }
  const int64_t before = memory_stats(kGpu).reserved_bytes;
  {
    Tensor a = empty({1000}, {.device = kGpu});          // 4000 bytes: no size class
    Tensor b = empty({3}, {.dtype = DType::bf16, .device = kGpu});  // 6 bytes
    CHECK(memory_stats(kGpu).reserved_bytes == before + 4006);
    a.fill_(1.0);
    b.fill_(2.0);
    a = Tensor();  // waits for the fill, then goes back to the driver
    CHECK(memory_stats(kGpu).reserved_bytes == before + 6);
    CHECK(b.to(Device::cpu()).to(DType::f32).to_vector<float>() == std::vector<float>{2, 2, 2});
  }
  CHECK(memory_stats(kGpu).reserved_bytes == before);
}

TEST_CASE("ops without CUDA kernels and bad devices give clear errors", "[gpu]") {
  CHECK_THROWS_WITH(empty({2}, {.device = Device::cuda(cuda::device_count())}),
                    Catch::Contains("this machine has"));
}
