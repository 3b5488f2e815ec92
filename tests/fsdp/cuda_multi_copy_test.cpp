// Multi-tensor copies on CUDA (dtr/kernels/cuda/multi_copy.h, through dtr/fsdp/copy_batch.h
// and directly) against the same copies done one by one with copy_ / zero_ on the
// CPU: every same-dtype copy (all seven dtypes) and every floating conversion,
// odd sizes (1 .. 100003), misaligned offsets, row-strided blocks, zero fills,
// FSDP's copy-in / copy-out / reduce-scatter layouts, the layouts copy_batch
// hands back to copy_, and more items than one launch's table holds. All
// destinations are views into one buffer pre-filled with a sentinel, so a write
// outside a destination shows up. Results must be equal BIT FOR BIT (a conversion
// that yields NaN may differ in the NaN's payload bits only); copies are
// deterministic by construction (each element written once, from its source).
#include "dtr/base/error.h"
#include "dtr/fsdp/copy_batch.h"
#include "tests/support/gpu_test_support.h"
#include "dtr/kernels/cuda/multi_copy.h"
#include "dtr/tensor/autograd/grad_mode.h"
#include "dtr/tensor/cuda/cuda_runtime.h"
#include "dtr/tensor/factory.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iomanip>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

using namespace dtr;
using namespace dtr::testing::gpu;
using fsdp::CopyJob;

namespace {

const std::vector<int64_t> kSizes = {1, 2, 3, 5, 33, 127, 1000, 4097, 8192, 8193, 100003};

// n values of `dtype` on the CPU: floats of magnitudes 1e-3 .. 1e3 with infinities,
// NaN, -0, float subnormals, f16 overflows and bf16/f16 rounding ties mixed in; integers
// over the dtype's range (within +-1e9).
Tensor random_values(int64_t n, DType dtype, std::mt19937& gen) {
  std::vector<double> v(n);
  if (is_floating(dtype)) {
    std::normal_distribution<double> normal;
    std::uniform_real_distribution<double> exponent(-3, 3);
    for (double& x : v) x = normal(gen) * std::pow(10.0, exponent(gen));
    const double specials[] = {std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(),
                               std::numeric_limits<double>::quiet_NaN(), -0.0, 1e-40, -3e-42, 70000.0,
                               1.00390625, 1.0 + std::ldexp(1.0, -11), 3.0e38, 1.0 / 3.0};
    for (size_t k = 0; k < std::size(specials); ++k) {
      const size_t at = (k * 7919) % v.size();
      v[at] = specials[k];
    }
  } else {
    const int64_t hi = dtype == DType::u8 ? 255 : 1000000000, lo = dtype == DType::u8 ? 0 : -hi;
    std::uniform_int_distribution<int64_t> dist(lo, hi);
    for (double& x : v) x = static_cast<double>(dist(gen));
  }
  return from_vector(v, {n}).to(dtype);
}

Tensor sentinel(int64_t n, DType dtype) { return full({n}, 7, {.dtype = dtype}); }

// Empty when the buffers hold the same bits (a NaN meeting a NaN counts as equal
// across a conversion), else the count and the first difference.
std::string difference(const Tensor& gpu, const Tensor& cpu, bool nan_equal) {
  const Tensor a = gpu.to(kCpu).contiguous(), b = cpu.contiguous();
  REQUIRE(a.dtype() == b.dtype());
  REQUIRE(a.numel() == b.numel());
  const size_t width = element_size(a.dtype());
  const auto* pa = static_cast<const unsigned char*>(a.raw_data());
  const auto* pb = static_cast<const unsigned char*>(b.raw_data());
  const std::vector<double> va = a.to(DType::f64).to_vector<double>(), vb = b.to(DType::f64).to_vector<double>();
  int64_t count = 0, first = -1;
  for (int64_t i = 0; i < a.numel(); ++i) {
    if (std::memcmp(pa + i * width, pb + i * width, width) == 0) continue;
    if (nan_equal && std::isnan(va[i]) && std::isnan(vb[i])) continue;
    if (first < 0) first = i;
    ++count;
  }
  if (count == 0) return {};
  std::ostringstream os;
  os << count << " of " << a.numel() << " elements differ (" << dtype_name(a.dtype()) << "); first at buffer index " << first
     << ": gpu " << std::setprecision(17) << va[first] << ", cpu " << vb[first];
  return os.str();
}

#define CHECK_SAME_BUFFER(gpu, cpu, nan_equal)                 \
  do {                                                         \
    const std::string diff_ = difference((gpu), (cpu), (nan_equal)); \
    INFO(diff_);                                               \
    CHECK(diff_.empty());                                      \
  } while (0)

// The same jobs on two sets of buffers: views built by `make` from (src buffer, dst buffer).
struct Buffers {
  Tensor src_cpu, dst_cpu, src_gpu, dst_gpu;
};

Buffers make_buffers(int64_t src_n, DType from, int64_t dst_n, DType to, std::mt19937& gen) {
  Buffers b;
  b.src_cpu = random_values(src_n, from, gen);
  b.dst_cpu = sentinel(dst_n, to);
  b.src_gpu = b.src_cpu.to(kGpu);
  b.dst_gpu = b.dst_cpu.to(kGpu);
  return b;
}

// Runs the jobs made by make(src, dst) one by one on the CPU buffers and as one
// copy_batch on the GPU buffers, then compares the whole destination buffers.
template <class Make>
void run_and_compare(Buffers& b, const Make& make, bool nan_equal, const std::string& label) {
  NoGradGuard no_grad;
  for (const CopyJob& job : make(b.src_cpu, b.dst_cpu)) {
    if (job.src.defined()) {
      job.dst.copy_(job.src);
    } else {
      job.dst.zero_();
    }
  }
  fsdp::copy_batch(make(b.src_gpu, b.dst_gpu));
  INFO(label);
  CHECK_SAME_BUFFER(b.dst_gpu, b.dst_cpu, nan_equal);
}

// Jobs over kSizes at staggered offsets (so most are misaligned); every fourth job is
// a zero fill; plus two row-strided blocks.
struct MixedLayout {
  std::vector<int64_t> src_offset, dst_offset;
  int64_t src_total = 0, dst_total = 0;
  MixedLayout() {
    for (size_t i = 0; i < kSizes.size(); ++i) {
      src_offset.push_back(src_total + static_cast<int64_t>(i % 4));
      src_total = src_offset.back() + kSizes[i] + 1;
      dst_offset.push_back(dst_total + static_cast<int64_t>((i * 3) % 5));
      dst_total = dst_offset.back() + kSizes[i] + 2;
    }
    src_total += 40 * 70 + 8;  // the row-strided blocks' sources
    dst_total += 40 * 61 + 8;
  }
  std::vector<CopyJob> operator()(const Tensor& src, const Tensor& dst) const {
    std::vector<CopyJob> jobs;
    for (size_t i = 0; i < kSizes.size(); ++i) {
      Tensor d = dst.narrow(0, dst_offset[i], kSizes[i]);
      jobs.push_back({d, i % 4 == 3 ? Tensor() : src.narrow(0, src_offset[i], kSizes[i])});
    }
    // [40, 50] blocks: source rows 70 apart, destination rows 61 apart, odd column starts.
    const int64_t s0 = src_offset.back() + kSizes.back() + 1, d0 = dst_offset.back() + kSizes.back() + 2;
    jobs.push_back({dst.narrow(0, d0, 40 * 61).view({40, 61}).narrow(1, 3, 50),
                    src.narrow(0, s0, 40 * 70).view({40, 70}).narrow(1, 5, 50)});
    // A [2, 3] block that collapses to one contiguous row of 6.
    jobs.push_back({dst.narrow(0, d0 + 40 * 61 + 1, 6).view({2, 3}), src.narrow(0, s0 + 2, 6).view({2, 3})});
    return jobs;
  }
};

}  // namespace

TEST_CASE("copy_batch on CUDA equals copy_ on the CPU for every same-dtype copy", "[gpu][multi_copy]") {
  std::mt19937 gen(1);
  const MixedLayout layout;
  for (DType dtype : kAllDtypes) {
    Buffers b = make_buffers(layout.src_total, dtype, layout.dst_total, dtype, gen);
    run_and_compare(b, layout, false, std::string("dtype ") + std::string(dtype_name(dtype)));
  }
}

TEST_CASE("copy_batch on CUDA equals copy_ on the CPU for every floating conversion", "[gpu][multi_copy]") {
  std::mt19937 gen(2);
  const MixedLayout layout;
  for (DType from : kFloating) {
    for (DType to : kFloating) {
      if (from == to) continue;
      Buffers b = make_buffers(layout.src_total, from, layout.dst_total, to, gen);
      run_and_compare(b, layout, true, std::string(dtype_name(from)) + " -> " + std::string(dtype_name(to)));
    }
  }
}

TEST_CASE("copy_batch on CUDA does FSDP's copy-in, copy-out and reduce-scatter layouts like the CPU",
          "[gpu][multi_copy]") {
  std::mt19937 gen(3);
  // A group of parameters: rows x row_numel, sharded over k = 3 ranks with padded rows.
  struct Param {
    int64_t rows, row_numel;
  };
  const std::vector<Param> params = {{5, 7}, {1, 1}, {33, 1}, {128, 64}, {7, 3}, {1000, 3}};
  const int64_t k = 3;
  std::vector<int64_t> offsets;
  int64_t flat = 0;
  for (const Param& p : params) {
    offsets.push_back(flat);
    flat += (p.rows + k - 1) / k * p.row_numel;
  }
  auto padded_numel = [&](size_t i) { return (params[i].rows + k - 1) / k * params[i].row_numel; };

  SECTION("copy-in: shards (rank 1's rows) cast f32 -> bf16 into the flat input, padding zeroed") {
    int64_t src_total = 0;
    std::vector<int64_t> src_offsets;
    for (size_t i = 0; i < params.size(); ++i) {
      src_offsets.push_back(src_total);
      src_total += padded_numel(i) + 1;
    }
    Buffers b = make_buffers(src_total, DType::f32, flat, DType::bf16, gen);
    run_and_compare(
        b,
        [&](const Tensor& src, const Tensor& dst) {
          std::vector<CopyJob> jobs;
          for (size_t i = 0; i < params.size(); ++i) {
            const int64_t per = (params[i].rows + k - 1) / k;
            const int64_t local_rows = std::max<int64_t>(0, std::min(per, params[i].rows - per));  // rank 1
            const int64_t used = local_rows * params[i].row_numel;
            Tensor segment = dst.narrow(0, offsets[i], padded_numel(i));
            if (used > 0) jobs.push_back({segment.narrow(0, 0, used), src.narrow(0, src_offsets[i], used)});
            if (used < padded_numel(i)) jobs.push_back({segment.narrow(0, used, padded_numel(i) - used), Tensor()});
          }
          return jobs;
        },
        true, "copy-in f32 -> bf16");
  }
  SECTION("copy-out: each parameter's k row blocks of the gathered [k, flat] buffer into its padded tensor") {
    int64_t dst_total = 0;
    std::vector<int64_t> dst_offsets;
    for (size_t i = 0; i < params.size(); ++i) {
      dst_offsets.push_back(dst_total + 1);
      dst_total += k * padded_numel(i) + 2;
    }
    Buffers b = make_buffers(k * flat, DType::bf16, dst_total, DType::bf16, gen);
    run_and_compare(
        b,
        [&](const Tensor& src, const Tensor& dst) {
          std::vector<CopyJob> jobs;
          const Tensor gathered = src.view({k, flat});
          for (size_t i = 0; i < params.size(); ++i) {
            const int64_t per = (params[i].rows + k - 1) / k;
            jobs.push_back({dst.narrow(0, dst_offsets[i], k * padded_numel(i)).view({k, per, params[i].row_numel}),
                            gathered.narrow(1, offsets[i], padded_numel(i)).view({k, per, params[i].row_numel})});
          }
          return jobs;
        },
        false, "copy-out bf16");
  }
  SECTION("reduce-scatter input: gradient rows cast bf16 -> f32 rank by rank, padding zeroed") {
    int64_t src_total = 0;
    std::vector<int64_t> src_offsets;
    for (const Param& p : params) {
      src_offsets.push_back(src_total);
      src_total += p.rows * p.row_numel;
    }
    Buffers b = make_buffers(src_total, DType::bf16, k * flat, DType::f32, gen);
    run_and_compare(
        b,
        [&](const Tensor& src, const Tensor& dst) {
          std::vector<CopyJob> jobs;
          const Tensor by_rank = dst.view({k, flat});
          for (size_t i = 0; i < params.size(); ++i) {
            const int64_t per = (params[i].rows + k - 1) / k, cols = params[i].row_numel;
            const Tensor grad_rows = src.narrow(0, src_offsets[i], params[i].rows * cols).view({params[i].rows, cols});
            for (int64_t r = 0; r < k; ++r) {
              Tensor segment = by_rank.select(0, r).narrow(0, offsets[i], padded_numel(i));
              const int64_t first = std::min(r * per, params[i].rows);
              const int64_t length = std::min(per, params[i].rows - first);
              const int64_t used = length * cols;
              if (used > 0) jobs.push_back({segment.narrow(0, 0, used), grad_rows.narrow(0, first, length).reshape({used})});
              if (used < padded_numel(i)) jobs.push_back({segment.narrow(0, used, padded_numel(i) - used), Tensor()});
            }
          }
          return jobs;
        },
        true, "reduce-scatter input bf16 -> f32");
  }
}

TEST_CASE("copy_batch hands layouts the kernel does not take to copy_ and still equals the CPU",
          "[gpu][multi_copy]") {
  std::mt19937 gen(4);
  Buffers b = make_buffers(4000, DType::f32, 4000, DType::f32, gen);
  run_and_compare(
      b,
      [](const Tensor& src, const Tensor& dst) {
        std::vector<CopyJob> jobs;
        jobs.push_back({dst.narrow(0, 0, 600).view({20, 30}), src.narrow(0, 0, 600).view({30, 20}).t()});  // transposed
        jobs.push_back({dst.narrow(0, 700, 60).view({3, 20}), src.narrow(0, 700, 20).view({1, 20})});  // broadcast
        jobs.push_back({dst.narrow(0, 800, 100), dst.narrow(0, 3000, 100)});  // source in the destination's storage
        jobs.push_back({dst.narrow(0, 1000, 0), src.narrow(0, 0, 0)});           // empty
        jobs.push_back({dst.narrow(0, 1100, 64), src.narrow(0, 1100, 64)});      // a plain one among them
        return jobs;
      },
      false, "fallback layouts");
  // An integer conversion and a copy from the CPU.
  Tensor ints = random_values(300, DType::i32, gen);
  Tensor dst_gpu = zeros({300}, {.device = kGpu});
  Tensor host = random_values(300, DType::f32, gen);
  Tensor dst2_gpu = zeros({300}, {.device = kGpu});
  fsdp::copy_batch({{dst_gpu, ints.to(kGpu)}, {dst2_gpu, host}});
  CHECK_SAME_BUFFER(dst_gpu, ints.to(DType::f32), false);
  CHECK_SAME_BUFFER(dst2_gpu, host, false);
}

TEST_CASE("multi_copy over more items than one launch's table equals copy_ on the CPU", "[gpu][multi_copy]") {
  std::mt19937 gen(5);
  const int items = 1500;  // several hundred fit one launch
  std::vector<int64_t> src_off, dst_off, rows, cols;
  int64_t src_total = 0, dst_total = 0;
  for (int i = 0; i < items; ++i) {
    rows.push_back(1 + i % 3);
    cols.push_back(1 + (i * 37) % 90);
    src_off.push_back(src_total + i % 2);
    src_total = src_off.back() + rows.back() * 100 + 1;  // source rows 100 apart
    dst_off.push_back(dst_total + i % 3);
    dst_total = dst_off.back() + rows.back() * cols.back() + 1;  // destination rows packed
  }
  Buffers b = make_buffers(src_total, DType::f32, dst_total, DType::f16, gen);
  std::vector<kernels::cuda::MultiCopyItem> table;
  {
    NoGradGuard no_grad;
    for (int i = 0; i < items; ++i) {
      b.dst_cpu.as_strided({rows[i], cols[i]}, {cols[i], 1}, dst_off[i])
          .copy_(b.src_cpu.as_strided({rows[i], cols[i]}, {100, 1}, src_off[i]));
      table.push_back({.src = static_cast<const float*>(b.src_gpu.raw_data()) + src_off[i],
                       .dst = static_cast<f16*>(b.dst_gpu.raw_data()) + dst_off[i],
                       .rows = rows[i],
                       .cols = cols[i],
                       .src_row_stride = 100,
                       .dst_row_stride = cols[i]});
    }
  }
  kernels::cuda::multi_copy<float, f16>(table.data(), table.size(), cuda::current_stream(0));
  CHECK_SAME_BUFFER(b.dst_gpu, b.dst_cpu, true);
}

TEST_CASE("copy_batch bumps destination versions and refuses writes into tensors that require grad",
          "[gpu][multi_copy]") {
  Tensor dst = zeros({10}, {.device = kGpu});
  const uint64_t before = dst.storage().version();
  fsdp::copy_batch({{dst.narrow(0, 0, 5), ones({5}, {.device = kGpu})}, {dst.narrow(0, 5, 5), Tensor()}});
  CHECK(dst.storage().version() > before);
  CHECK_SAME_BUFFER(dst, from_vector(std::vector<float>{1, 1, 1, 1, 1, 0, 0, 0, 0, 0}, {10}), false);
  Tensor leaf = zeros({4}, {.device = kGpu});
  leaf.requires_grad_();
  CHECK_THROWS_AS(fsdp::copy_batch({{leaf, ones({4}, {.device = kGpu})}}), Error);
  CHECK_THROWS_AS(fsdp::copy_batch({{Tensor(), ones({4}, {.device = kGpu})}}), Error);
  kernels::cuda::MultiCopyItem bad{.dst = nullptr, .rows = 1, .cols = 4};
  auto launch_bad = [&] { kernels::cuda::multi_copy<float, float>(&bad, 1, cuda::current_stream(0)); };
  CHECK_THROWS_AS(launch_bad(), Error);
}
