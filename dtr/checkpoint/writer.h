// Writes one rank's data file of a checkpoint: for every entry (in name order)
// the box this rank writes (dtr/checkpoint/planner.h), row-major, back to back,
// with per-block XXH3 checksums; then fsyncs the file.
#pragma once

#include "dtr/checkpoint/checkpoint_state.h"
#include "dtr/checkpoint/metadata.h"

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace dtr::checkpoint {

struct RankFile {
  std::string file;     // name inside the checkpoint directory
  int64_t bytes = 0;    // size once written
  std::vector<std::pair<std::string, ChunkMeta>> chunks;  // (tensor name, chunk)
};

RankFile write_rank_file(const CheckpointState& state, const std::filesystem::path& dir, const std::string& file,
                         int64_t block_bytes);

}  // namespace dtr::checkpoint
