// Reads, for every entry of a CheckpointState, the box this rank needs out of a
// checkpoint written by any number of ranks on any mesh: each stored chunk whose
// box intersects the needed box contributes only the bytes of the intersection
// (pread of the checksum blocks that hold them; each block read is verified
// against its XXH3 checksum before use). Everything lands in new staging
// tensors, so the live tensors are untouched until every rank has succeeded.
//
// Errors name the tensor and the file: a missing key, a dtype or global shape
// different from the checkpoint's, stored chunks that do not cover the needed
// box, a missing data file, a file shorter (or longer) than the metadata says,
// a checksum mismatch.
#pragma once

#include "dtr/checkpoint/checkpoint_state.h"
#include "dtr/checkpoint/metadata.h"

#include <filesystem>
#include <map>
#include <string>

namespace dtr::checkpoint {

struct ReadStats {
  int64_t bytes_read = 0;   // bytes read from data files (whole checksum blocks)
  int64_t chunks_read = 0;  // stored chunks touched
};

// Staging tensors (contiguous, CPU, the entry's dtype and this rank's box), by name.
std::map<std::string, Tensor> read_needed(const CheckpointState& state, const Metadata& metadata,
                                          const std::filesystem::path& dir, ReadStats& stats);

}  // namespace dtr::checkpoint
