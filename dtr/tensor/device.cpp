#include "dtr/tensor/device.h"

#include "dtr/base/error.h"

#include <charconv>

namespace dtr {

std::string Device::str() const {
  switch (type) {
    case DeviceType::cpu: return "cpu";
    case DeviceType::cuda: return fmt::format("cuda:{}", index);
    case DeviceType::meta: return "meta";
  }
  return "?";
}

Device Device::parse(std::string_view text) {
  if (text == "cpu") return cpu();
  if (text == "meta") return meta();
  if (text == "cuda") return cuda(0);
  if (text.starts_with("cuda:")) {
    std::string_view digits = text.substr(5);
    int index = -1;
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (ec == std::errc() && end == digits.data() + digits.size() && index >= 0) return cuda(index);
  }
  DTR_FAIL("unknown device '{}': expected cpu, meta, cuda or cuda:N", text);
}

namespace {
thread_local Device t_default_device = Device::cpu();
}  // namespace

Device default_device() { return t_default_device; }

DefaultDeviceGuard::DefaultDeviceGuard(Device device) : previous_(t_default_device) { t_default_device = device; }

DefaultDeviceGuard::~DefaultDeviceGuard() { t_default_device = previous_; }

}  // namespace dtr
