// Checksums of checkpoint data: XXH3 (64-bit) over byte ranges, written as 16
// lowercase hex digits in the metadata. Each stored chunk is checksummed in
// blocks of a fixed size (the last block shorter), so a reader that needs only
// part of a chunk reads and verifies only the blocks it touches.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace dtr::checkpoint {

uint64_t xxh3_64(const void* data, size_t bytes);
std::string checksum_hex(uint64_t checksum);  // "0123456789abcdef"

}  // namespace dtr::checkpoint
