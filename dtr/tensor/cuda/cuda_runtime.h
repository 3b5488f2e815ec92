// The CUDA device runtime of dtr: device discovery, explicit backend init
// (registers the caching allocator), the per-thread current stream of each
// device, and RAII guards for the current device and stream.
//
// Streams: every device starts with a dtr-owned non-blocking "compute" stream
// as the current stream of every thread; ops launch on current_stream().
// StreamGuard switches it for a scope (FSDP runs its all-gathers on another).
#pragma once

#include <cuda_runtime.h>

namespace dtr::cuda {

int device_count();  // 0 when there is no driver or no GPU
bool is_available();
// Registers the CUDA allocator and the pinned host allocator with dtr
// (idempotent). Tensor code calls it on the first use of a cuda device or of
// pinned memory, so users normally never need to.
void init();

int current_device();
void set_device(int device);
void synchronize(int device);

cudaStream_t current_stream(int device);
void set_current_stream(int device, cudaStream_t stream);
// A new non-blocking stream on `device`, owned by the runtime (lives until exit).
cudaStream_t create_stream(int device);

class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_;
};

class StreamGuard {
 public:
  StreamGuard(int device, cudaStream_t stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  int device_;
  cudaStream_t previous_;
};

// An owned CUDA event (timing disabled unless asked for).
class Event {
 public:
  explicit Event(bool timing = false);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  void record(cudaStream_t stream);
  bool query() const;  // true when the recorded work has completed
  void synchronize() const;
  void wait(cudaStream_t stream) const;  // makes `stream` wait for the recorded work
  float elapsed_ms(const Event& end) const;
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

}  // namespace dtr::cuda
