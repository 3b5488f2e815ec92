#include "dtr/tensor/cuda/cuda_runtime.h"

#include "dtr/base/error.h"
#include "dtr/kernels/cuda/cuda_check.h"
#include "dtr/tensor/allocator.h"
#include "dtr/tensor/cuda/cuda_allocator.h"
#include "dtr/tensor/cuda/pinned_allocator.h"

#include <mutex>
#include <unordered_map>
#include <vector>

namespace dtr::cuda {

int device_count() {
  static const int count = [] {
    int n = 0;
    // No driver or no device is not an error: it means no GPUs.
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      cudaGetLastError();
      return 0;
    }
    return n;
  }();
  return count;
}

bool is_available() { return device_count() > 0; }

void init() {
  static std::once_flag once;
  std::call_once(once, [] {
    set_allocator(DeviceType::cuda, &CudaCachingAllocator::instance());
    set_pinned_allocator(&PinnedHostAllocator::instance());
  });
}

int current_device() {
  int d = 0;
  DTR_CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

void set_device(int device) {
  DTR_CHECK(device >= 0 && device < device_count(), "cuda:{} does not exist: this machine has {} GPU(s)",
            device, device_count());
  DTR_CUDA_CHECK(cudaSetDevice(device));
}

void synchronize(int device) {
  DeviceGuard guard(device);
  DTR_CUDA_CHECK(cudaDeviceSynchronize());
}

namespace {

struct StreamRegistry {
  std::mutex mutex;
  std::vector<cudaStream_t> compute;  // per device, created on first use
  std::vector<cudaStream_t> owned;
};

StreamRegistry& registry() {
  static StreamRegistry r;
  return r;
}

thread_local std::unordered_map<int, cudaStream_t> t_current;

}  // namespace

cudaStream_t create_stream(int device) {
  DeviceGuard guard(device);
  cudaStream_t s = nullptr;
  DTR_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  std::lock_guard lock(registry().mutex);
  registry().owned.push_back(s);
  return s;
}

cudaStream_t current_stream(int device) {
  auto it = t_current.find(device);
  if (it != t_current.end()) return it->second;
  StreamRegistry& r = registry();
  cudaStream_t s = nullptr;
  {
    std::lock_guard lock(r.mutex);
    if (static_cast<int>(r.compute.size()) <= device) r.compute.resize(device + 1, nullptr);
    s = r.compute[device];
  }
  if (s == nullptr) {
    DTR_CHECK(device >= 0 && device < device_count(),
              "cuda:{} does not exist: this machine has {} GPU(s)", device, device_count());
    s = create_stream(device);
    std::lock_guard lock(r.mutex);
    if (r.compute[device] == nullptr) r.compute[device] = s;
    s = r.compute[device];
  }
  t_current[device] = s;
  return s;
}

void set_current_stream(int device, cudaStream_t stream) { t_current[device] = stream; }

DeviceGuard::DeviceGuard(int device) : previous_(current_device()) {
  if (device != previous_) set_device(device);
}

DeviceGuard::~DeviceGuard() { cudaSetDevice(previous_); }

StreamGuard::StreamGuard(int device, cudaStream_t stream)
    : device_(device), previous_(current_stream(device)) {
  set_current_stream(device, stream);
}

StreamGuard::~StreamGuard() { set_current_stream(device_, previous_); }

Event::Event(bool timing) {
  DTR_CUDA_CHECK(cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault : cudaEventDisableTiming));
}

Event::~Event() {
  if (event_) cudaEventDestroy(event_);
}

void Event::record(cudaStream_t stream) { DTR_CUDA_CHECK(cudaEventRecord(event_, stream)); }

bool Event::query() const {
  cudaError_t status = cudaEventQuery(event_);
  if (status == cudaErrorNotReady) return false;
  DTR_CUDA_CHECK(status);
  return true;
}

void Event::synchronize() const { DTR_CUDA_CHECK(cudaEventSynchronize(event_)); }

void Event::wait(cudaStream_t stream) const { DTR_CUDA_CHECK(cudaStreamWaitEvent(stream, event_, 0)); }

float Event::elapsed_ms(const Event& end) const {
  float ms = 0;
  DTR_CUDA_CHECK(cudaEventElapsedTime(&ms, event_, end.event_));
  return ms;
}

}  // namespace dtr::cuda
