#include "dtr/checkpoint/checksum.h"

#include <fmt/format.h>
#include <xxhash.h>

namespace dtr::checkpoint {

uint64_t xxh3_64(const void* data, size_t bytes) { return XXH3_64bits(data, bytes); }

std::string checksum_hex(uint64_t checksum) { return fmt::format("{:016x}", checksum); }

}  // namespace dtr::checkpoint
