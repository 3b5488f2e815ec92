// Device: where a tensor's memory lives. cpu, cuda:N, or meta (shape and dtype
// only, no memory: models are built on meta and materialised shard by shard).
// The default device, which factories and layers use when not told one, is the
// CPU or, for a scope, another (DefaultDeviceGuard, as torch.device used as a
// context manager):
//
//   { DefaultDeviceGuard meta(Device::meta());
//     model = std::make_shared<MyModel>(); }      // every parameter on meta
#pragma once

#include <fmt/format.h>

#include <string>
#include <string_view>

namespace dtr {

enum class DeviceType : uint8_t { cpu, cuda, meta };

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;  // the GPU ordinal for cuda; 0 otherwise

  static Device cpu() { return {DeviceType::cpu, 0}; }
  static Device cuda(int index = 0) { return {DeviceType::cuda, index}; }
  static Device meta() { return {DeviceType::meta, 0}; }
  static Device parse(std::string_view text);  // "cpu", "cuda", "cuda:1", "meta"

  bool is_cpu() const { return type == DeviceType::cpu; }
  bool is_cuda() const { return type == DeviceType::cuda; }
  bool is_meta() const { return type == DeviceType::meta; }
  std::string str() const;

  friend bool operator==(const Device&, const Device&) = default;
};

// This thread's default device: the innermost DefaultDeviceGuard's, else the CPU.
Device default_device();

// Sets this thread's default device for a scope. Only what names no device
// follows it: an explicit device wins, and tensors made before keep theirs. dtr's
// own host-side buffers (file I/O, exchanges over MPI) always name the CPU.
class DefaultDeviceGuard {
 public:
  explicit DefaultDeviceGuard(Device device);
  ~DefaultDeviceGuard();
  DefaultDeviceGuard(const DefaultDeviceGuard&) = delete;
  DefaultDeviceGuard& operator=(const DefaultDeviceGuard&) = delete;

 private:
  Device previous_;
};

}  // namespace dtr

template <>
struct fmt::formatter<dtr::Device> : fmt::formatter<std::string> {
  auto format(const dtr::Device& d, format_context& ctx) const {
    return fmt::formatter<std::string>::format(d.str(), ctx);
  }
};
