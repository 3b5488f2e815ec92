#include "dtr/mesh/debug_collectives.h"

#include <atomic>
#include <cstdlib>
#include <string_view>

namespace dtr::mesh {

namespace {

bool from_environment() {
  const char* value = std::getenv("DTR_DEBUG_COLLECTIVES");
  if (value == nullptr) return false;
  std::string_view v(value);
  return !(v.empty() || v == "0" || v == "false" || v == "off");
}

std::atomic<bool>& flag() {
  static std::atomic<bool> on{from_environment()};
  return on;
}

}  // namespace

bool debug_collectives() { return flag().load(std::memory_order_relaxed); }
void set_debug_collectives(bool on) { flag().store(on); }

}  // namespace dtr::mesh
