#include "dtr/checkpoint/writer.h"

#include "dtr/base/error.h"
#include "dtr/checkpoint/checksum.h"
#include "dtr/checkpoint/file_io.h"
#include "dtr/checkpoint/planner.h"

#include <algorithm>

namespace dtr::checkpoint {

RankFile write_rank_file(const CheckpointState& state, const std::filesystem::path& dir, const std::string& file,
                         int64_t block_bytes) {
  DTR_CHECK(block_bytes > 0, "checkpoint: checksum block size must be positive, got {}", block_bytes);
  RankFile out{file, 0, {}};
  FileWriter writer(dir / file);
  for (const auto& [name, entry] : state.tensors) {
    auto box = box_to_write(name, entry);
    if (!box) continue;
    Tensor local = entry_local(entry);
    if (local.device() != Device::cpu()) local = local.to(Device::cpu());
    local = local.contiguous();
    const auto* data = static_cast<const char*>(local.raw_data());
    ChunkMeta chunk{*box, file, writer.position(), static_cast<int64_t>(local.nbytes()), block_bytes, {}};
    for (int64_t at = 0; at < chunk.byte_length; at += block_bytes) {
      const auto n = static_cast<size_t>(std::min(block_bytes, chunk.byte_length - at));
      chunk.checksums.push_back(checksum_hex(xxh3_64(data + at, n)));
    }
    writer.write(data, local.nbytes());
    out.chunks.emplace_back(name, std::move(chunk));
  }
  out.bytes = writer.position();
  writer.sync_and_close();
  return out;
}

}  // namespace dtr::checkpoint
