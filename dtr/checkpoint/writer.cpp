#include "dtr/checkpoint/writer.h"

#include "dtr/base/error.h"
#include "dtr/checkpoint/checksum.h"
#include "dtr/checkpoint/file_io.h"
#include "dtr/checkpoint/planner.h"
#include "dtr/tensor/autograd/grad_mode.h"
#include "dtr/tensor/factory.h"

#include <algorithm>

namespace dtr::checkpoint {

std::vector<ChunkToWrite> chunks_to_write(const CheckpointState& state, StagingBuffers* staging) {
  autograd::NoGradGuard no_grad;
  std::vector<ChunkToWrite> out;
  StagingBuffers used;  // buffers of entries no longer saved here are freed
  for (const auto& [name, entry] : state.tensors) {
    auto box = box_to_write(name, entry);
    if (!box) continue;
    Tensor local = entry_local(entry);
    if (staging) {
      Tensor& buffer = used[name] = (*staging)[name];
      if (!buffer.defined() || buffer.sizes() != local.sizes() || buffer.dtype() != local.dtype()) {
        buffer = empty(local.sizes(),
                       {.dtype = local.dtype(), .device = Device::cpu(), .tag = MemoryTag::checkpoint_staging});
      }
      buffer.copy_(local);
      local = buffer;
    } else {
      if (local.device() != Device::cpu()) local = local.to(Device::cpu());
      local = local.contiguous();
    }
    out.push_back({name, std::move(*box), std::move(local)});
  }
  if (staging) *staging = std::move(used);
  return out;
}

RankFile write_rank_file(const std::vector<ChunkToWrite>& chunks, const std::filesystem::path& dir,
                         const std::string& file, int64_t block_bytes, const std::function<void()>& after_first_chunk) {
  DTR_CHECK(block_bytes > 0, "checkpoint: checksum block size must be positive, got {}", block_bytes);
  RankFile out{file, 0, {}};
  FileWriter writer(dir / file);
  for (const ChunkToWrite& c : chunks) {
    const auto* data = static_cast<const char*>(c.data.raw_data());
    const auto nbytes = static_cast<int64_t>(c.data.nbytes());
    ChunkMeta chunk{c.box, file, writer.position(), nbytes, block_bytes, {}};
    for (int64_t at = 0; at < nbytes; at += block_bytes) {
      const auto n = static_cast<size_t>(std::min(block_bytes, nbytes - at));
      chunk.checksums.push_back(checksum_hex(xxh3_64(data + at, n)));
    }
    writer.write(data, c.data.nbytes());
    out.chunks.emplace_back(c.tensor, std::move(chunk));
    if (out.chunks.size() == 1 && after_first_chunk) after_first_chunk();
  }
  out.bytes = writer.position();
  writer.sync_and_close();
  return out;
}

}  // namespace dtr::checkpoint
