// Asynchronous checkpoints: a save that does not stop training for the write.
//
//   checkpoint::async_save(dir, state);      // every rank: copies, returns
//   ... training steps ...
//   checkpoint::poll_async_save();           // every rank, e.g. once per step
//   checkpoint::wait_async_save();           // every rank, before the end
//
// async_save() first completes the save still in flight, if any (at most one is
// in flight), then copies this rank's part of `state` into host staging buffers
// (MemoryTag::checkpoint_staging; kept for the next save, so a run allocates
// them once) and returns: the state's tensors may change from then on, the
// checkpoint holds their values at the call. A background thread writes this
// rank's file and checksums; it uses no collective. The metadata and the atomic
// commit of <dir>.tmp into <dir> need every rank, so they run on the calling
// thread at the first poll_async_save() that finds every rank's file written, or
// at wait_async_save() or the next async_save() or save(). The files are those
// save() writes, byte for byte, and the guarantees are save()'s: until the
// commit the previous checkpoint at <dir> stays the valid one, and a process
// killed at any point leaves at most a <dir>.tmp that the next save removes.
//
// All calls are collective over the world: every rank calls them in the same
// order. A failure (on any rank, in any step) is thrown by the call that
// commits, as the same dtr::Error on every rank, with the staging directory
// removed. A process that ends with a save in flight leaves it uncommitted.
#pragma once

#include "dtr/checkpoint/checkpoint.h"

#include <filesystem>
#include <optional>

namespace dtr::checkpoint {

void async_save(const std::filesystem::path& dir, const CheckpointState& state, const SaveOptions& options = {});

// Commits the save in flight if every rank has written its file (one small
// all-reduce when a save is in flight; nothing otherwise). Returns the directory
// committed by this call.
std::optional<std::filesystem::path> poll_async_save();

// Waits for this rank's write of the save in flight, then commits it. Returns the
// directory committed by this call (none when no save was in flight).
std::optional<std::filesystem::path> wait_async_save();

// The directory of the save in flight on this rank (no communication).
std::optional<std::filesystem::path> async_save_in_flight();

}  // namespace dtr::checkpoint
