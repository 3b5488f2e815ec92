// The steps of a checkpoint save, shared by save() (one after another) and
// async_save() (the write on a background thread, the rest on the caller's):
//   begin_save    collective: an empty staging directory <dir>.tmp that every rank sees
//   write_rank    this rank's data file and its report (local I/O only, any thread)
//   finish_save   collective: agree on every rank's write, rank 0 writes the
//                 metadata, then the atomic commit of <dir>.tmp into <dir>
// A failure in any step becomes the same dtr::Error on every rank, and the
// staging directory is removed before any rank returns.
#pragma once

#include "dtr/checkpoint/checkpoint.h"
#include "dtr/checkpoint/writer.h"

#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace dtr::checkpoint {

// Runs fn and returns its error message ("" on success), so that every rank
// reaches the agreement that follows.
std::string error_of(const std::function<void()>& fn);

// Every entry's dtype and global shape, as the ranks' reports carry them.
nlohmann::json tensors_of(const CheckpointState& state);

// Collective: makes <dir>.tmp empty (removing what a crashed save left) and checks
// that every rank sees it. Returns the staging directory.
std::filesystem::path begin_save(const std::filesystem::path& dir, const std::string& what);

// What this rank wrote: its report for the metadata, or its error.
struct RankWrite {
  std::string report;
  std::string error;
};

// Writes this rank's file into `tmp` (calling options.at_phase with `writing`
// after the first chunk and `written` once the file is durable).
RankWrite write_rank(const std::vector<ChunkToWrite>& chunks, const nlohmann::json& tensors,
                     const std::filesystem::path& tmp, const SaveOptions& options);

// Collective: see the top of this file. `extra` is the checkpoint's user object.
void finish_save(const std::filesystem::path& tmp, const std::filesystem::path& dir, const nlohmann::json& extra,
                 const RankWrite& mine, const SaveOptions& options, const std::string& what);

}  // namespace dtr::checkpoint
