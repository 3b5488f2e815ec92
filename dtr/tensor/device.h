// Device: where a tensor's memory lives. cpu, cuda:N, or meta (shape and dtype
// only, no memory: models are built on meta and materialised shard by shard).
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

}  // namespace dtr

template <>
struct fmt::formatter<dtr::Device> : fmt::formatter<std::string> {
  auto format(const dtr::Device& d, format_context& ctx) const {
    return fmt::formatter<std::string>::format(d.str(), ctx);
  }
};
