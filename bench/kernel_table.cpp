#include "bench/kernel_table.h"

#include "dtr/base/error.h"

#include <cupti.h>
#include <cxxabi.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace dtr::bench {

namespace {

constexpr size_t kBufferBytes = size_t{8} << 20;
constexpr size_t kRecordAlignment = 8;

struct Total {
  int64_t count = 0;
  uint64_t ns = 0;
};

// CUPTI calls back from its own threads: the totals are shared under a lock.
std::mutex g_mutex;
std::map<std::string, Total> g_totals;
bool g_active = false;

void check(CUptiResult result, const char* what) {
  if (result == CUPTI_SUCCESS) return;
  const char* message = nullptr;
  cuptiGetResultString(result, &message);
  DTR_FAIL("KernelTable: {} failed: {}", what, message ? message : "unknown CUPTI error");
}

// "void ns::kernel<float, 4>(Args...)" -> "ns::kernel<...>": one entry per kernel, whatever its instantiation.
std::string short_name(const char* mangled) {
  int status = 0;
  std::unique_ptr<char, decltype(&std::free)> demangled(abi::__cxa_demangle(mangled, nullptr, nullptr, &status),
                                                        &std::free);
  std::string name = status == 0 && demangled ? demangled.get() : mangled;
  // "(anonymous namespace)::" would otherwise be taken for the argument list.
  for (size_t at; (at = name.find("(anonymous namespace)::")) != std::string::npos;) name.erase(at, 23);
  if (const size_t paren = name.find('('); paren != std::string::npos) name.resize(paren);
  if (name.rfind("void ", 0) == 0) name.erase(0, 5);
  if (const size_t angle = name.find('<'); angle != std::string::npos) name = name.substr(0, angle) + "<...>";
  return name;
}

std::string memcpy_name(uint8_t kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return "[memcpy host to device]";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return "[memcpy device to host]";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return "[memcpy device to device]";
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP: return "[memcpy peer to peer]";
    default: return "[memcpy other]";
  }
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(kRecordAlignment, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;  // as many as fit
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  std::lock_guard lock(g_mutex);
  CUpti_Activity* record = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    std::string name;
    uint64_t start = 0, end = 0;
    switch (record->kind) {
      case CUPTI_ACTIVITY_KIND_KERNEL:
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
        name = short_name(k->name);
        start = k->start;
        end = k->end;
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
        name = memcpy_name(m->copyKind);
        start = m->start;
        end = m->end;
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
        name = "[memset]";
        start = m->start;
        end = m->end;
        break;
      }
      default: continue;
    }
    Total& t = g_totals[name];
    ++t.count;
    t.ns += end > start ? end - start : 0;
  }
  std::free(buffer);
}

constexpr CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                         CUPTI_ACTIVITY_KIND_MEMSET};

}  // namespace

KernelTable::KernelTable() {
  {
    std::lock_guard lock(g_mutex);
    DTR_CHECK(!g_active, "KernelTable: only one may be active at a time");
    g_active = true;
    g_totals.clear();
  }
  check(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed), "cuptiActivityRegisterCallbacks");
  for (CUpti_ActivityKind kind : kKinds) check(cuptiActivityEnable(kind), "cuptiActivityEnable");
}

KernelTable::~KernelTable() {
  cuptiActivityFlushAll(0);
  for (CUpti_ActivityKind kind : kKinds) cuptiActivityDisable(kind);
  std::lock_guard lock(g_mutex);
  g_active = false;
}

void KernelTable::reset() {
  check(cuptiActivityFlushAll(0), "cuptiActivityFlushAll");
  std::lock_guard lock(g_mutex);
  g_totals.clear();
}

std::string KernelTable::table(int rows, int steps) {
  check(cuptiActivityFlushAll(0), "cuptiActivityFlushAll");
  std::vector<std::pair<std::string, Total>> sorted;
  uint64_t sum = 0;
  {
    std::lock_guard lock(g_mutex);
    sorted.assign(g_totals.begin(), g_totals.end());
  }
  for (const auto& [name, t] : sorted) sum += t.ns;
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.second.ns > b.second.ns; });
  const double per = std::max(steps, 1);
  std::string out = fmt::format("{:>8} {:>9} {:>9} {:>6}  {}\n", "count", "ms", "mean us", "share", "kernel (per step)");
  for (size_t i = 0; i < sorted.size() && i < static_cast<size_t>(rows); ++i) {
    const auto& [name, t] = sorted[i];
    out += fmt::format("{:>8.0f} {:>9.3f} {:>9.1f} {:>5.1f}%  {}\n", static_cast<double>(t.count) / per,
                       static_cast<double>(t.ns) / 1e6 / per, static_cast<double>(t.ns) / 1e3 / static_cast<double>(t.count),
                       sum > 0 ? 100.0 * static_cast<double>(t.ns) / static_cast<double>(sum) : 0.0, name);
  }
  out += fmt::format("{:>8} {:>9.3f} {:>9} {:>6}  all GPU activity ({} kinds of kernels and copies)\n", "",
                     static_cast<double>(sum) / 1e6 / per, "", "", sorted.size());
  return out;
}

}  // namespace dtr::bench
