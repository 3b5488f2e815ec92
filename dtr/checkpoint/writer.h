// Writes one rank's data file of a checkpoint: the boxes this rank writes
// (dtr/checkpoint/planner.h), each row-major, back to back, with per-block XXH3
// checksums; then fsyncs the file.
//
// Two steps, so that a save can run the second in the background: chunks_to_write
// takes this rank's data from a CheckpointState (on the calling thread: it may
// copy from a device), write_rank_file writes it (plain host memory and file
// I/O, no collective, safe on another thread).
#pragma once

#include "dtr/checkpoint/box.h"
#include "dtr/checkpoint/checkpoint_state.h"
#include "dtr/checkpoint/metadata.h"

#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace dtr::checkpoint {

// One box of one entry and its data: a contiguous CPU tensor of the box's shape.
struct ChunkToWrite {
  std::string tensor;
  Box box;
  Tensor data;
};

// Host buffers that chunks_to_write copies into, by entry name, kept from one
// save to the next (allocated, tagged MemoryTag::checkpoint_staging, where an
// entry is new or its shape or dtype changed).
using StagingBuffers = std::map<std::string, Tensor>;

// The boxes this rank writes, in name order. With `staging`, each box's data is
// copied into its staging buffer, so it no longer depends on the state's tensors
// once this returns; without, data already contiguous on the CPU is the state's
// own (no copy).
std::vector<ChunkToWrite> chunks_to_write(const CheckpointState& state, StagingBuffers* staging = nullptr);

struct RankFile {
  std::string file;     // name inside the checkpoint directory
  int64_t bytes = 0;    // size once written
  std::vector<std::pair<std::string, ChunkMeta>> chunks;  // (tensor name, chunk)
};

// `after_first_chunk` (may be empty) runs once the first chunk's bytes are
// written, before the rest: a test's point to end a save mid-file.
RankFile write_rank_file(const std::vector<ChunkToWrite>& chunks, const std::filesystem::path& dir,
                         const std::string& file, int64_t block_bytes,
                         const std::function<void()>& after_first_chunk = {});

}  // namespace dtr::checkpoint
