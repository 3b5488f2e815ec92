// Pinned host memory: Tensor::pin_memory, the pinned allocator's statistics and
// cache, asynchronous host -> device copies from pinned memory (whose freed
// source must not be reused while a copy still reads it), and
// cuda::copy_to_host_async / copy_to_device_async. The stream is held busy by a sleeping host function,
// so "in flight" is certain, not a matter of timing.
#include "dtr/tensor/allocator.h"
#include "dtr/tensor/cuda/cuda_copy.h"
#include "dtr/tensor/cuda/cuda_runtime.h"
#include "dtr/tensor/cuda/pinned_allocator.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/reduce.h"

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

using namespace dtr;

namespace {

const Device kGpu = Device::cuda(0);

Tensor iota(const Shape& shape, DType dtype = DType::f32) {
  return arange(numel_of(shape), {.dtype = dtype}).view(shape);
}

// Holds the current stream of cuda:0 for `ms` milliseconds: work queued after
// this starts only then.
cudaStream_t stall_stream(int ms) {
  cudaStream_t stream = cuda::current_stream(0);
  auto sleep = [](void* arg) {
    std::this_thread::sleep_for(std::chrono::milliseconds(reinterpret_cast<intptr_t>(arg)));
  };
  REQUIRE(cudaLaunchHostFunc(stream, sleep, reinterpret_cast<void*>(static_cast<intptr_t>(ms))) == cudaSuccess);
  return stream;
}

bool busy(cudaStream_t stream) { return cudaStreamQuery(stream) == cudaErrorNotReady; }

}  // namespace

TEST_CASE("pin_memory copies a CPU tensor into pinned memory, counted under its tag in the CPU stats",
          "[gpu][pinned]") {
  cuda::synchronize(0);  // earlier tests' freed blocks become free, and empty_cache returns them
  cuda::PinnedHostAllocator::instance().empty_cache();
  Tensor t = arange(35, {.tag = MemoryTag::optimizer_state}).view({5, 7});
  const MemoryStats before = memory_stats(Device::cpu());
  Tensor p = t.pin_memory();
  const MemoryStats after = memory_stats(Device::cpu());
  CHECK(p.is_pinned());
  CHECK_FALSE(t.is_pinned());
  CHECK(p.device().is_cpu());
  CHECK(p.sizes() == t.sizes());
  CHECK(p.to_vector<float>() == t.to_vector<float>());
  CHECK(p.raw_data() != t.raw_data());
  CHECK(p.storage().tag() == MemoryTag::optimizer_state);
  CHECK(after[MemoryTag::optimizer_state].current_bytes - before[MemoryTag::optimizer_state].current_bytes == 35 * 4);
  CHECK(after.total.current_bytes - before.total.current_bytes == 35 * 4);
  CHECK(after.reserved_bytes - before.reserved_bytes == 512);  // one new block of the smallest class
  CHECK(p.pin_memory().is_same(p));  // already pinned: itself, as torch
  CHECK(p.narrow(0, 1, 2).is_pinned());
  CHECK_FALSE(p.clone().is_pinned());
  p = Tensor();
  const MemoryStats freed = memory_stats(Device::cpu());
  CHECK(freed[MemoryTag::optimizer_state].current_bytes == before[MemoryTag::optimizer_state].current_bytes);
  CHECK(freed.reserved_bytes == after.reserved_bytes);  // cached
  cuda::synchronize(0);                                 // the free's event completes
  cuda::PinnedHostAllocator::instance().empty_cache();
  CHECK(memory_stats(Device::cpu()).reserved_bytes == before.reserved_bytes);

  // A strided source gives a contiguous pinned copy; gradients flow through.
  Tensor pt = t.t().pin_memory();
  CHECK(pt.is_contiguous());
  CHECK(pt.to_vector<float>() == t.t().contiguous().to_vector<float>());
  Tensor w = ones({3});
  w.requires_grad_();
  sum(w.pin_memory()).backward();
  CHECK(w.grad().to_vector<float>() == std::vector<float>{1, 1, 1});
  // Pinning a storage in place: every view sees the same values, now pinned.
  Tensor q = iota({6});
  Tensor view = q.narrow(0, 2, 3);
  q.storage().pin();
  CHECK(view.is_pinned());
  CHECK(view.to_vector<float>() == std::vector<float>{2, 3, 4});
}

TEST_CASE("pin_memory and copy_to_host_async refuse what they cannot do", "[gpu][pinned]") {
  Tensor dev = iota({3, 5}).to(kGpu);
  CHECK_FALSE(dev.is_pinned());
  CHECK_THROWS_WITH(dev.pin_memory(), Catch::Contains("pin_memory: expected a CPU tensor (only host memory can be "
                                                      "pinned), found one on cuda:0"));
  CHECK_THROWS_WITH(empty({2}, {.device = kGpu, .pin_memory = true}),
                    Catch::Contains("pin_memory applies to host memory: expected device cpu, found cuda:0"));
  CHECK_THROWS_WITH(cuda::copy_to_host_async(empty({3, 5}), dev),
                    Catch::Contains("expected a destination in pinned host memory (Tensor::pin_memory), found "
                                    "pageable host memory"));
  CHECK_THROWS_WITH(cuda::copy_to_host_async(empty({3, 5}, {.device = kGpu}), dev),
                    Catch::Contains("found one on cuda:0"));
  CHECK_THROWS_WITH(cuda::copy_to_host_async(empty({5, 3}, {.pin_memory = true}).t(), dev),
                    Catch::Contains("expected a contiguous destination"));
  CHECK_THROWS_WITH(cuda::copy_to_host_async(empty({3, 5}, {.dtype = DType::f64, .pin_memory = true}), dev),
                    Catch::Contains("expected the same dtype"));
  CHECK_THROWS_WITH(cuda::copy_to_host_async(empty({15}, {.pin_memory = true}), dev),
                    Catch::Contains("expected the same shape, found [3, 5] -> [15]"));
  CHECK_THROWS_WITH(cuda::copy_to_host_async(empty({3, 5}, {.pin_memory = true}), iota({3, 5})),
                    Catch::Contains("expected a source on a GPU, found one on cpu"));
  CHECK_THROWS_WITH(cuda::copy_to_device_async(dev, iota({3, 5})),
                    Catch::Contains("expected a source in pinned host memory (Tensor::pin_memory), found pageable"));
  CHECK_THROWS_WITH(cuda::copy_to_device_async(empty({3, 5}), iota({3, 5}).pin_memory()),
                    Catch::Contains("expected a destination on a GPU, found one on cpu"));
  CHECK_THROWS_WITH(cuda::copy_to_device_async(empty({5, 3}, {.device = kGpu}), iota({3, 5}).pin_memory().t()),
                    Catch::Contains("expected a contiguous source"));
  CHECK_THROWS_WITH(cuda::copy_to_device_async(empty({15}, {.device = kGpu}), iota({3, 5}).pin_memory()),
                    Catch::Contains("expected the same shape, found [3, 5] -> [15]"));
}

TEST_CASE("copy_to_device_async does not wait, and a freed source is not reused mid-copy",
          "[gpu][pinned]") {
  constexpr int64_t n = 1 << 14;  // 64 KiB of f32: one size class
  constexpr int kCopies = 16;
  // No driver allocation while the stream is held (cudaHostAlloc and cudaMalloc
  // may synchronize): the device tensors and enough cached pinned blocks first.
  std::vector<Tensor> on_device;
  for (int i = 0; i < kCopies; ++i) on_device.push_back(empty({n}, {.device = kGpu}));
  {
    std::vector<Tensor> warm;
    for (int i = 0; i < 4 * kCopies; ++i) warm.push_back(empty({n}, {.pin_memory = true}));
  }
  cuda::synchronize(0);
  cudaStream_t stream = stall_stream(300);
  int reuse_checks = 0;
  for (int i = 0; i < kCopies; ++i) {
    Tensor src = full({n}, static_cast<float>(i), {.pin_memory = true});
    void* const freed = src.raw_data();
    cuda::copy_to_device_async(on_device[i], src);
    if (i == 0) CHECK(busy(stream));  // queued behind the stall: returned without waiting
    src = Tensor();                    // freed while its copy is queued
    cuda::Event freed_at;              // completes together with the allocator's event for `freed`
    freed_at.record(stream);
    // Same-size pinned blocks, overwritten at once: none may be the source still being read.
    for (int k = 0; k < 3; ++k) {
      Tensor other = full({n}, -1.0f, {.pin_memory = true});
      if (!freed_at.query()) {
        CHECK(other.raw_data() != freed);
        ++reuse_checks;
      }
    }
  }
  CHECK(reuse_checks > 0);
  cuda::synchronize(0);
  for (int i = 0; i < kCopies; ++i) {
    INFO("copy " << i);
    const std::vector<float> got = on_device[i].to(Device::cpu()).to_vector<float>();
    CHECK(got == std::vector<float>(n, static_cast<float>(i)));
  }
  // Once the copies completed, a freed block is reused without new driver memory.
  cuda::PinnedHostAllocator::instance().empty_cache();
  Tensor a = empty({n}, {.pin_memory = true});
  void* const first = a.raw_data();
  a = Tensor();
  cuda::synchronize(0);
  const int64_t reserved = memory_stats(Device::cpu()).reserved_bytes;
  Tensor b = empty({n}, {.pin_memory = true});
  CHECK(b.raw_data() == first);
  CHECK(memory_stats(Device::cpu()).reserved_bytes == reserved);
}

TEST_CASE("host -> device from pinned memory into strided and converting destinations", "[gpu][pinned]") {
  Tensor src = iota({4, 6}).pin_memory();
  Tensor dst = zeros({6, 4}, {.dtype = DType::bf16, .device = kGpu});
  cudaStream_t stream = stall_stream(50);
  cuda::copy_to_device_async(dst.t(), src);  // lands on the device, then converted and scattered there
  CHECK(busy(stream));
  // copy_ from pinned memory waits, as torch without non_blocking: the source may be reused at once.
  Tensor waited = empty({4, 6}, {.device = kGpu});
  waited.copy_(src);
  CHECK_FALSE(busy(stream));
  src.fill_(0);
  CHECK(waited.to(Device::cpu()).to_vector<float>() == iota({4, 6}).to_vector<float>());
  src = iota({4, 6}).pin_memory();
  std::vector<bf16> expected;
  for (int j = 0; j < 6; ++j)
    for (int i = 0; i < 4; ++i) expected.push_back(bf16(static_cast<float>(6 * i + j)));
  CHECK(dst.to(Device::cpu()).to_vector<bf16>() == expected);
  // Tensor::to from pinned memory, and a broadcast pinned source (the waiting path).
  CHECK(src.to(kGpu).to(Device::cpu()).to_vector<float>() == src.to_vector<float>());
  Tensor row = from_vector<float>({1, 2, 3}).pin_memory();
  Tensor grid = empty({2, 3}, {.device = kGpu});
  grid.copy_(row);
  CHECK(grid.to(Device::cpu()).to_vector<float>() == std::vector<float>{1, 2, 3, 1, 2, 3});
}

TEST_CASE("copy_to_host_async returns at once, and the values are there after a stream synchronize", "[gpu][pinned]") {
  Tensor src = iota({3, 5}).to(kGpu);
  Tensor dst = empty({3, 5}, {.pin_memory = true});
  cudaStream_t stream = stall_stream(100);
  cuda::copy_to_host_async(dst, src);
  CHECK(busy(stream));
  REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
  CHECK(dst.to_vector<float>() == iota({3, 5}).to_vector<float>());
  // A strided source is packed on the device first.
  Tensor dst_t = empty({5, 3}, {.pin_memory = true});
  cuda::copy_to_host_async(dst_t, src.t());
  REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
  CHECK(dst_t.to_vector<float>() == iota({3, 5}).t().contiguous().to_vector<float>());
  // A destination freed while its copy is queued is not handed out again until
  // the copy wrote it: a new block filled now keeps its values.
  constexpr int64_t n = 1 << 15;
  Tensor big = full({n}, 5.0f, {.device = kGpu});
  {  // two cached blocks of this size: no cudaHostAlloc while the stream is held
    Tensor w1 = empty({n}, {.pin_memory = true}), w2 = empty({n}, {.pin_memory = true});
  }
  cuda::synchronize(0);
  stall_stream(100);
  {
    Tensor doomed = empty({n}, {.pin_memory = true});
    cuda::copy_to_host_async(doomed, big);
  }
  Tensor other = full({n}, 7.0f, {.pin_memory = true});
  REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
  CHECK(other.to_vector<float>() == std::vector<float>(n, 7.0f));
}
