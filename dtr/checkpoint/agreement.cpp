#include "dtr/checkpoint/agreement.h"

#include "dtr/base/error.h"
#include "dtr/mesh/distributed.h"
#include "dtr/tensor/factory.h"

#include <algorithm>
#include <cstring>

namespace dtr::checkpoint {

std::vector<std::string> all_gather_strings(const std::string& mine) {
  auto world = distributed::world_group();
  const int n = world->size();
  Tensor length = from_vector<int64_t>({static_cast<int64_t>(mine.size())}, {1});
  Tensor lengths = empty({n}, {.dtype = DType::i64, .device = Device::cpu()});
  world->all_gather_into_tensor(lengths, length)->wait();
  auto sizes = lengths.to_vector<int64_t>();
  const int64_t longest = *std::max_element(sizes.begin(), sizes.end());
  std::vector<std::string> out(static_cast<size_t>(n));
  if (longest == 0) return out;
  Tensor in = zeros({longest}, {.dtype = DType::u8, .device = Device::cpu()});
  std::memcpy(in.raw_data(), mine.data(), mine.size());
  Tensor all = empty({n * longest}, {.dtype = DType::u8, .device = Device::cpu()});
  world->all_gather_into_tensor(all, in)->wait();
  const char* p = static_cast<const char*>(all.raw_data());
  for (int r = 0; r < n; ++r) out[static_cast<size_t>(r)].assign(p + r * longest, static_cast<size_t>(sizes[r]));
  return out;
}

void agree_or_throw(const std::string& what, const std::string& my_error) {
  auto errors = all_gather_strings(my_error);
  std::vector<std::string> failed;
  for (size_t r = 0; r < errors.size(); ++r) {
    if (!errors[r].empty()) failed.push_back(fmt::format("rank {}: {}", r, errors[r]));
  }
  DTR_CHECK(failed.empty(), "{} failed: {}", what, fmt::join(failed, "; "));
}

}  // namespace dtr::checkpoint
