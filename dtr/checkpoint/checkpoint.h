// Distributed checkpoints: save() and load() of a CheckpointState
// (dtr/checkpoint/checkpoint_state.h), called by every rank of the world
// together, with the checkpoint directory on a filesystem every rank sees.
//
//   checkpoint::save("ckpt/step_500", state);   // every rank
//   checkpoint::load("ckpt/step_500", state);   // every rank, any world size / mesh
//
// Layout of a checkpoint directory:
//   rank_<r>.bin   one per world rank (possibly empty), written in parallel: the
//                  chunks that rank writes, row-major, back to back
//   metadata.json  written by rank 0 (dtr/checkpoint/metadata.h): every tensor's
//                  name, dtype, global shape, and each chunk's box, file, byte
//                  range and per-block XXH3 checksums; file sizes; `extra`
// Each distinct shard is written once: HSDP replicas and Replicate placements by
// the rank at coordinate 0 of the replicating mesh dims, plain Tensors by rank 0.
//
// save(): first commits an asynchronous save still in flight (async_save.h);
// writes into <dir>.tmp (removed first if a crashed save left it), each
// rank fsyncs its file; rank 0 gathers the chunk lists, writes and fsyncs
// metadata.json and the directory, then (after every rank is known to be done)
// swaps <dir>.tmp into <dir> with one atomic rename (an existing checkpoint is
// exchanged and then removed). A crash before that leaves the previous <dir>
// intact. Replacing is atomic; removing the old copy is not needed for safety.
//
// load(): every rank reads metadata.json, validates every entry (present, same
// dtype and global shape) and reads only the blocks holding the box it needs
// (resharding from any world size and mesh, HSDP included, or into a plain
// Tensor for an unsharded model), verifying each block's checksum; rank 0 also
// checks that every data file the metadata lists exists with its size. The data
// lands in staging tensors first; only when every rank has succeeded are the
// live tensors (parameters, optimizer state) overwritten, and state.extra is
// replaced by the checkpoint's. Keys in the checkpoint that the state lacks are
// ignored (load a model alone from a checkpoint that also holds optimizer state).
//
// Errors: any failure on any rank (I/O, a missing key, a dtype or shape
// mismatch, a missing or truncated data file, a checksum mismatch) becomes the
// same dtr::Error on every rank, naming the failing rank(s), the tensor and the
// file; nothing is loaded and no rank is left waiting in a collective.
// Ranks must pass states with the same keys, dtypes and global shapes.
#pragma once

#include "dtr/checkpoint/checkpoint_state.h"
#include "dtr/checkpoint/metadata.h"

#include <cstdint>
#include <filesystem>
#include <functional>

namespace dtr::checkpoint {

// The points of a save that SaveOptions::at_phase is called at, in order.
enum class SavePhase {
  staged,      // async_save only: this rank's data is copied, the background write not begun
  writing,     // this rank's first chunk is in its file, the rest not yet
  written,     // this rank's file is durable (fsynced)
  committing,  // every rank's file and the metadata are durable, just before the rename
};

struct SaveOptions {
  // Checksum granularity: a reader verifies (and so reads) whole blocks.
  int64_t checksum_block_bytes = int64_t{1} << 20;
  // For tests: called on every rank at each phase (`writing` and `written` on
  // async_save's background thread). Throwing is a failed save (the previous
  // checkpoint stays, the staging directory is removed); raising SIGKILL is a
  // crash at that point (<dir>.tmp is left behind and removed by the next save).
  std::function<void(SavePhase)> at_phase{};
};

struct LoadResult {
  int64_t bytes_read = 0;   // on this rank
  int64_t chunks_read = 0;  // stored chunks this rank read from
};

// Every rank writes its own file into `dir`, so all ranks must share it: save()
// first checks that every rank sees a file rank 0 wrote into its staging
// directory, and fails on every rank (naming the ranks and hosts that do not)
// before any data is written.
void save(const std::filesystem::path& dir, const CheckpointState& state, const SaveOptions& options = {});
LoadResult load(const std::filesystem::path& dir, CheckpointState& state);

// Collective: returns when every rank sees the file rank 0 writes into `dir` (an
// existing directory), else throws the same error on every rank naming the ranks
// and hosts that do not (node-local disks). `what` starts the message.
void require_shared_directory(const std::filesystem::path& dir, const std::string& what);

// The temporary directory save() writes into: <dir>.tmp.
std::filesystem::path staging_directory(const std::filesystem::path& dir);

}  // namespace dtr::checkpoint
