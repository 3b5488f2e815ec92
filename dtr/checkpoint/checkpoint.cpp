#include "dtr/checkpoint/checkpoint.h"

#include "dtr/base/error.h"
#include "dtr/checkpoint/agreement.h"
#include "dtr/checkpoint/file_io.h"
#include "dtr/checkpoint/planner.h"
#include "dtr/checkpoint/reader.h"
#include "dtr/checkpoint/writer.h"
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

// Runs fn and returns its error message ("" on success), so that every rank
// reaches the agreement that follows.
std::string capture(const std::function<void()>& fn) {
  try {
    fn();
    return "";
  } catch (const std::exception& e) {
    return e.what();
  }
}

std::string shape_str(const Shape& s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

// Rank 0: the metadata from every rank's report, checked for agreement.
Metadata assemble(const CheckpointState& state, const std::vector<std::string>& reports) {
  Metadata m;
  m.world_size = static_cast<int>(reports.size());
  m.user = state.extra;
  for (const auto& [name, entry] : state.tensors) m.tensors[name] = {entry_dtype(entry), entry_shape(entry), {}};
  for (size_t r = 0; r < reports.size(); ++r) {
    json j = json::parse(reports[r]);
    for (const auto& [name, t] : j.at("tensors").items()) {
      auto it = m.tensors.find(name);
      DTR_CHECK(it != m.tensors.end(), "rank {} saves tensor '{}', which rank 0 does not have", r, name);
      DTR_CHECK(t.at("dtype").get<std::string>() == dtype_name(it->second.dtype) &&
                    t.at("shape").get<Shape>() == it->second.shape,
                "tensor '{}' is {} {} on rank {} but {} {} on rank 0", name, t.at("dtype").get<std::string>(),
                shape_str(t.at("shape").get<Shape>()), r, dtype_name(it->second.dtype), shape_str(it->second.shape));
    }
    DTR_CHECK(j.at("tensors").size() == m.tensors.size(), "rank {} saves {} tensors, rank 0 saves {}", r,
              j.at("tensors").size(), m.tensors.size());
    m.files[j.at("file").get<std::string>()] = j.at("bytes").get<int64_t>();
    for (const auto& c : j.at("chunks")) m.tensors.at(c.at("tensor").get<std::string>()).chunks.push_back(chunk_from_json(c));
  }
  for (const auto& [name, t] : m.tensors) {
    const std::string problem = tiling_problem(name, t);
    DTR_INTERNAL_ASSERT(problem.empty(), "checkpoint: {}", problem);
  }
  return m;
}

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

namespace {

// The rank files, the metadata and the commit of a save whose staging directory
// `tmp` exists (collective).
void write_and_commit(const fs::path& tmp, const fs::path& dir, const CheckpointState& state,
                      const SaveOptions& options, const std::string& what) {
  const int rank = distributed::rank();
  // Every rank writes its own file, in parallel.
  std::string report;
  std::string error = capture([&] {
    RankFile written = write_rank_file(state, tmp, fmt::format("rank_{}.bin", rank), options.checksum_block_bytes);
    json tensors = json::object(), chunks = json::array();
    for (const auto& [name, entry] : state.tensors) {
      tensors[name] = json{{"dtype", std::string(dtype_name(entry_dtype(entry)))}, {"shape", entry_shape(entry)}};
    }
    for (const auto& [name, chunk] : written.chunks) {
      json c = to_json(chunk);
      c["tensor"] = name;
      chunks.push_back(std::move(c));
    }
    report = json{{"file", written.file}, {"bytes", written.bytes}, {"tensors", tensors}, {"chunks", chunks}}.dump();
  });
  agree_or_throw(what, error);

  auto reports = all_gather_strings(report);
  agree_or_throw(what, capture([&] {
                   if (rank != 0) return;
                   Metadata m = assemble(state, reports);
                   FileWriter meta(tmp / kMetadataFile);
                   const std::string text = to_json(m).dump(1);
                   meta.write(text.data(), text.size());
                   meta.sync_and_close();
                   fsync_directory(tmp);
                 }));

  agree_or_throw(what, capture([&] {
                   if (options.before_commit) options.before_commit();
                 }));
  agree_or_throw(what, capture([&] {
                   if (rank == 0) commit_directory(tmp, dir);
                 }));
}

}  // namespace

void require_shared_directory(const fs::path& dir, const std::string& what) {
  distributed::ensure_initialized("dtr::checkpoint::require_shared_directory");
  const fs::path marker = dir / ".shared_directory_check";
  const int rank = distributed::rank();
  std::string token;
  agree_or_throw(what, capture([&] {
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
  const int rank = distributed::rank();
  const fs::path tmp = staging_directory(dir);
  const std::string what = fmt::format("checkpoint save to {}", dir.string());

  agree_or_throw(what, capture([&] {
                   if (rank != 0) return;
                   fs::remove_all(tmp);
                   fs::create_directories(tmp);
                 }));
  try {
    require_shared_directory(tmp, what);
    write_and_commit(tmp, dir, state, options, what);
  } catch (...) {
    // Every rank agreed on the failure, so all are past their writes: rank 0 removes
    // the staging directory (a full disk is not left fuller), and no rank returns
    // before it is gone. A killed save leaves it behind; the next save removes it first.
    if (rank == 0) {
      std::error_code ignored;
      fs::remove_all(tmp, ignored);
    }
    distributed::world_group()->barrier()->wait();
    throw;
  }
}

LoadResult load(const fs::path& dir, CheckpointState& state) {
  distributed::ensure_initialized("dtr::checkpoint::load");
  const std::string what = fmt::format("checkpoint load from {}", dir.string());
  Metadata metadata;
  ReadStats stats;
  std::map<std::string, Tensor> staged;
  agree_or_throw(what, capture([&] {
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
