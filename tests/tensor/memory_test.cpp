// Allocator statistics are exact; meta tensors allocate nothing.
#include "dtr/tensor/allocator.h"
#include "dtr/tensor/factory.h"

#include <catch2/catch.hpp>

#include <cstdint>
#include <memory>

#ifdef DTR_WITH_CUDA
#include "dtr/tensor/cuda/cuda_runtime.h"
#endif

using namespace dtr;

namespace {
const MemoryCounter& cpu_counter(MemoryTag tag, const MemoryStats& s) { return s[tag]; }
}  // namespace

TEST_CASE("CPU allocations are 64-byte aligned", "[memory]") {
  for (int64_t n : {1, 3, 17, 1000}) {
    Tensor t = empty({n}, {.dtype = DType::u8});
    CHECK(reinterpret_cast<uintptr_t>(t.raw_data()) % 64 == 0);
  }
}

TEST_CASE("tagged statistics track current and peak bytes exactly", "[memory]") {
  const Device cpu = Device::cpu();
  const MemoryStats before = memory_stats(cpu);
  reset_peak_memory_stats(cpu);
  {
    Tensor p = empty({100}, {.tag = MemoryTag::param});                       // 400 bytes
    Tensor g = empty({10, 10}, {.dtype = DType::f64, .tag = MemoryTag::grad});  // 800 bytes
    MemoryStats now = memory_stats(cpu);
    CHECK(now[MemoryTag::param].current_bytes - before[MemoryTag::param].current_bytes == 400);
    CHECK(now[MemoryTag::grad].current_bytes - before[MemoryTag::grad].current_bytes == 800);
    CHECK(now.total.current_bytes - before.total.current_bytes == 1200);
    CHECK(now[MemoryTag::param].live_allocations - before[MemoryTag::param].live_allocations == 1);
    {
      MemoryTagGuard guard(MemoryTag::optimizer_state);
      Tensor m = zeros({50});  // 200 bytes under the guard's tag
      Tensor v = m.view({5, 10});  // a view allocates nothing
      CHECK(memory_stats(cpu)[MemoryTag::optimizer_state].current_bytes -
                before[MemoryTag::optimizer_state].current_bytes ==
            200);
    }
    CHECK(current_memory_tag() == MemoryTag::other);
    // Re-tagging moves the bytes and keeps the total.
    Tensor a = empty({25}, {.tag = MemoryTag::activation});
    a.storage().set_tag(MemoryTag::grad);
    MemoryStats retagged = memory_stats(cpu);
    CHECK(retagged[MemoryTag::grad].current_bytes - before[MemoryTag::grad].current_bytes == 900);
    CHECK(retagged[MemoryTag::activation].current_bytes ==
          before[MemoryTag::activation].current_bytes);
  }
  const MemoryStats after = memory_stats(cpu);
  // Freeing everything returns every tag to its baseline.
  for (int i = 0; i < kNumMemoryTags; ++i) {
    auto tag = static_cast<MemoryTag>(i);
    CHECK(cpu_counter(tag, after).current_bytes == cpu_counter(tag, before).current_bytes);
  }
  // The peak of the total saw 400 + 800 + 200 + 100 live at once at most (the
  // optimizer-state tensor was freed before the activation was allocated).
  CHECK(after.total.peak_bytes - before.total.current_bytes == 1400);
  CHECK(after[MemoryTag::param].peak_bytes - before[MemoryTag::param].current_bytes == 400);
  CHECK(after[MemoryTag::grad].peak_bytes - before[MemoryTag::grad].current_bytes == 900);
  reset_peak_memory_stats(cpu);
  CHECK(memory_stats(cpu).total.peak_bytes == after.total.current_bytes);
}

TEST_CASE("a view keeps storage alive after the base handle is gone", "[memory]") {
  const int64_t base = memory_stats(Device::cpu()).total.current_bytes;
  Tensor v;
  {
    Tensor t = arange(10);
    v = t.narrow(0, 5, 2);
  }
  CHECK(memory_stats(Device::cpu()).total.current_bytes - base == 40);
  CHECK(v.to_vector<float>() == std::vector<float>{5, 6});
  v = Tensor();
  CHECK(memory_stats(Device::cpu()).total.current_bytes == base);
}

TEST_CASE("meta tensors have shapes but allocate nothing", "[memory][meta]") {
  const MemoryStats before = memory_stats(Device::cpu());
  Tensor m = zeros({1 << 20, 1 << 10}, {.device = Device::meta(), .tag = MemoryTag::param});
  CHECK(m.device().is_meta());
  CHECK(m.numel() == (int64_t{1} << 30));
  CHECK(m.raw_data() == nullptr);
  CHECK(m.t().sizes() == Shape{1 << 10, 1 << 20});
  Tensor c = m.clone();
  CHECK(c.device().is_meta());
  CHECK(m.to(DType::bf16).dtype() == DType::bf16);
  CHECK(memory_stats(Device::cpu()).total.num_allocations == before.total.num_allocations);
  CHECK(memory_stats(Device::meta()).total.current_bytes == 0);
  CHECK_THROWS_WITH(m.to(Device::cpu()), Catch::Contains("cannot copy from a meta tensor"));
  CHECK_THROWS_WITH(m.item(), Catch::Contains("expected a tensor with one element"));
  CHECK(m.to_string().find("size=[1048576, 1024]") != std::string::npos);
}

TEST_CASE("devices parse and unknown backends give clear errors", "[memory][device]") {
  CHECK(Device::parse("cuda:3") == Device::cuda(3));
  CHECK(Device::parse("cpu").is_cpu());
  CHECK(Device::parse("meta").is_meta());
  CHECK_THROWS_WITH(Device::parse("tpu"), Catch::Contains("unknown device 'tpu'"));
  CHECK_THROWS_WITH(Device::parse("cuda:x"), Catch::Contains("unknown device 'cuda:x'"));
#ifdef DTR_WITH_CUDA
  // A CUDA build on a machine without GPUs says so; with GPUs, see tests/tensor/cuda_tensor_test.cpp.
  // dtr::cuda in full: other test files of the unity build bring in dtr::kernels::cuda too.
  if (dtr::cuda::device_count() == 0) {
    CHECK_THROWS_WITH(empty({2}, {.device = Device::cuda(0)}),
                      Catch::Contains("cannot allocate on cuda:0: this machine has 0 GPU(s)"));
  }
#else
  CHECK_THROWS_WITH(empty({2}, {.device = Device::cuda(0)}),
                    Catch::Contains("no allocator for device cuda:0: this build of dtr has no CUDA backend"));
#endif
}

TEST_CASE("large CPU blocks are reused from the cache with exact statistics", "[memory]") {
  auto& cpu = static_cast<CpuAllocator&>(get_allocator(Device::cpu()));
  cpu.empty_cache();
  const MemoryStats before = memory_stats(Device::cpu());
  void* first = nullptr;
  {
    Tensor big = empty({3 << 18});  // 3 MiB: cached when freed
    first = big.raw_data();
    CHECK(memory_stats(Device::cpu()).reserved_bytes - before.reserved_bytes == (3 << 20));
  }
  const MemoryStats freed = memory_stats(Device::cpu());
  CHECK(freed.total.current_bytes == before.total.current_bytes);  // counted as freed
  CHECK(freed.reserved_bytes - before.reserved_bytes == (3 << 20));  // but kept
  Tensor again = empty({3 << 18});
  CHECK(again.raw_data() == first);
  CHECK(reinterpret_cast<uintptr_t>(again.raw_data()) % 64 == 0);
  again = Tensor();
  cpu.empty_cache();
  CHECK(memory_stats(Device::cpu()).reserved_bytes == before.reserved_bytes);
  CHECK(round_to_size_class(100, 64) == 128);
  CHECK(round_to_size_class((1 << 20) + 1, 64) == (1 << 20) + (1 << 18));
}

TEST_CASE("pin_memory without a GPU, or of a non-CPU tensor, is a clear error", "[memory]") {
  Tensor t = from_vector<float>({1, 2, 3});
  CHECK_FALSE(t.is_pinned());
  CHECK_THROWS_WITH(empty({2}, {.device = Device::meta()}).pin_memory(),
                    Catch::Contains("pin_memory: expected a CPU tensor (only host memory can be pinned), found one "
                                    "on meta"));
  CHECK_THROWS_WITH(empty({2}, {.device = Device::meta(), .pin_memory = true}),
                    Catch::Contains("pin_memory applies to host memory: expected device cpu, found meta"));
#ifdef DTR_WITH_CUDA
  if (dtr::cuda::device_count() > 0) return;  // pinned memory itself: tests/tensor/cuda_pinned_test.cpp
  const char* why = "pinned host memory needs a GPU: expected at least one CUDA device, found none";
#else
  const char* why = "pinned host memory needs the CUDA backend, which this build of dtr lacks";
#endif
  CHECK_THROWS_WITH(t.pin_memory(), Catch::Contains(why));
  CHECK_THROWS_WITH(empty({2}, {.pin_memory = true}), Catch::Contains(why));
  CHECK_THROWS_WITH(t.storage().pin(), Catch::Contains(why));
  CHECK_FALSE(t.is_pinned());
  CHECK(t.to_vector<float>() == std::vector<float>{1, 2, 3});  // a failed pin leaves the tensor as it was
}

TEST_CASE("a weak reference names its tensor object, exactly, also after it is gone", "[memory]") {
  const std::owner_less<std::weak_ptr<const void>> before;
  auto same = [&](const std::weak_ptr<const void>& a, const std::weak_ptr<const void>& b) {
    return !before(a, b) && !before(b, a);
  };
  Tensor a = zeros({4});
  Tensor alias = a;              // another handle to the same object
  Tensor view = a.view({2, 2});  // another object on the same storage
  std::weak_ptr<const void> weak = a.weak_ref();
  CHECK(same(weak, alias.weak_ref()));
  CHECK_FALSE(same(weak, view.weak_ref()));
  CHECK(weak.use_count() == 2);  // a weak reference keeps nothing alive
  a = Tensor();
  alias = Tensor();
  CHECK(weak.expired());
  Tensor next = zeros({4});  // may reuse the address; the reference still tells them apart
  CHECK_FALSE(same(weak, next.weak_ref()));
}
