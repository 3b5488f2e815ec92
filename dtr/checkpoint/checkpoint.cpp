#include "dtr/checkpoint/checkpoint.h"

#include "dtr/base/error.h"
#include "dtr/checkpoint/agreement.h"
#include "dtr/checkpoint/async_save.h"
#include "dtr/checkpoint/file_io.h"
#include "dtr/checkpoint/planner.h"
#include "dtr/checkpoint/reader.h"
#include "dtr/checkpoint/save_steps.h"
#include "dtr/mesh/distributed.h"
#include "dtr/mesh/process_group.h"
#include "dtr/tensor/autograd/grad_mode.h"

#include <chrono>
#include <fstream>
#include <functional>
#include <map>
#include <iterator>
#include <random>

namespace dtr::checkpoint {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Rank 0, after its own reads: every data file the metadata lists is there with
// its recorded size (also those no rank needed to read, such as empty replica files).
void check_all_files(const Metadata& m, const fs::path& dir) {
  for (const auto& [file, bytes] : m.files) {
    std::vector<std::string> holds;
    for (const auto& [name, t] : m.tensors) {
      for (const auto& c : t.chunks) {
        if (c.file == file && holds.size() < 3) holds.push_back("'" + name + "'");
      }
    }
    const std::string tensors = holds.empty() ? "no tensor data" : fmt::format("tensors {}", fmt::join(holds, ", "));
    const fs::path path = dir / file;
    DTR_CHECK(fs::exists(path), "data file {} (holding {}) is missing", path.string(), tensors);
    const auto found = static_cast<int64_t>(fs::file_size(path));
    DTR_CHECK(found == bytes, "data file {} (holding {}) has {} bytes, the metadata says {}{}", path.string(),
              tensors, found, bytes, found < bytes ? " (truncated)" : "");
  }
}

}  // namespace

fs::path staging_directory(const fs::path& dir) {
  fs::path clean = dir;
  if (!clean.has_filename()) clean = clean.parent_path();
  return clean.parent_path() / (clean.filename().string() + ".tmp");
}

void require_shared_directory(const fs::path& dir, const std::string& what) {
  distributed::ensure_initialized("dtr::checkpoint::require_shared_directory");
  const fs::path marker = dir / ".shared_directory_check";
  const int rank = distributed::rank();
  std::string token;
  agree_or_throw(what, error_of([&] {
                   if (rank != 0) return;
                   token = fmt::format("{:08x}{:016x}", std::random_device{}(),
                                       static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
                   FileWriter out(marker);
                   out.write(token.data(), token.size());
                   out.sync_and_close();
                 }));
  token = all_gather_strings(token)[0];
  std::ifstream in(marker, std::ios::binary);
  const std::string seen((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::vector<std::string> sees = all_gather_strings(seen == token ? "yes" : "no");
  if (rank == 0) {
    std::error_code ignored;
    fs::remove(marker, ignored);
  }
  std::map<int, std::vector<int>> blind;  // host -> ranks that do not see rank 0's file
  for (int r = 0; r < static_cast<int>(sees.size()); ++r) {
    if (sees[r] != "yes") blind[distributed::host_of(r)].push_back(r);
  }
  if (blind.empty()) return;
  std::vector<std::string> where;
  for (const auto& [host, ranks] : blind) {
    where.push_back(fmt::format("rank{} {} (host {})", ranks.size() == 1 ? "" : "s", fmt::join(ranks, ", "),
                                distributed::host_name(host)));
  }
  DTR_FAIL(
      "{}: the directory {} is not shared by all ranks: {} do{} not see the file that rank 0 (host {}) wrote "
      "there. A checkpoint is one directory that every rank shares (a shared filesystem such as NFS or Lustre); "
      "node-local disks are not supported",
      what, dir.string(), fmt::join(where, ", "), blind.size() == 1 && blind.begin()->second.size() == 1 ? "es" : "",
      distributed::host_name(distributed::host_of(0)));
}

void save(const fs::path& dir, const CheckpointState& state, const SaveOptions& options) {
  distributed::ensure_initialized("dtr::checkpoint::save");
  wait_async_save();  // one save at a time, in the order they were started
  const std::string what = fmt::format("checkpoint save to {}", dir.string());
  const fs::path tmp = begin_save(dir, what);
  RankWrite mine;
  // chunks_to_write's own failures (a Partial placement, a device copy) are this rank's error too.
  const std::string error =
      error_of([&] { mine = write_rank(chunks_to_write(state), tensors_of(state), tmp, options); });
  if (!error.empty()) mine.error = error;
  finish_save(tmp, dir, state.extra, mine, options, what);
}

LoadResult load(const fs::path& dir, CheckpointState& state) {
  distributed::ensure_initialized("dtr::checkpoint::load");
  const std::string what = fmt::format("checkpoint load from {}", dir.string());
  Metadata metadata;
  ReadStats stats;
  std::map<std::string, Tensor> staged;
  agree_or_throw(what, error_of([&] {
                   metadata = read_metadata(dir);
                   staged = read_needed(state, metadata, dir, stats);
                   if (distributed::rank() == 0) check_all_files(metadata, dir);
                 }));
  // Every rank has everything it needs: only now touch the live tensors.
  autograd::NoGradGuard no_grad;
  for (auto& [name, entry] : state.tensors) entry_local(entry).copy_(staged.at(name));
  state.extra = metadata.user;
  return {stats.bytes_read, stats.chunks_read};
}

}  // namespace dtr::checkpoint
