#include "dtr/checkpoint/save_steps.h"

#include "dtr/base/error.h"
#include "dtr/checkpoint/agreement.h"
#include "dtr/checkpoint/file_io.h"
#include "dtr/checkpoint/planner.h"
#include "dtr/mesh/distributed.h"
#include "dtr/mesh/process_group.h"

namespace dtr::checkpoint {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Rank 0: the metadata from every rank's report, checked for agreement with
// rank 0's own list of tensors.
Metadata assemble(const json& extra, const std::vector<std::string>& reports) {
  Metadata m;
  m.world_size = static_cast<int>(reports.size());
  m.user = extra;
  const json rank0 = json::parse(reports.at(0));
  for (const auto& [name, t] : rank0.at("tensors").items()) {
    m.tensors[name] = {parse_dtype(t.at("dtype").get<std::string>()), t.at("shape").get<Shape>(), {}};
  }
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

void call_phase(const SaveOptions& options, SavePhase phase) {
  if (options.at_phase) options.at_phase(phase);
}

// After every rank agreed on a failure (all are past their writes): rank 0 removes
// the staging directory, so a full disk is not left fuller, and no rank returns
// before it is gone. A killed save leaves it behind; the next save removes it first.
void remove_staging(const fs::path& tmp) {
  if (distributed::rank() == 0) {
    std::error_code ignored;
    fs::remove_all(tmp, ignored);
  }
  distributed::world_group()->barrier()->wait();
}

}  // namespace

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
    return "";
  } catch (const std::exception& e) {
    return e.what();
  }
}

json tensors_of(const CheckpointState& state) {
  json tensors = json::object();
  for (const auto& [name, entry] : state.tensors) {
    tensors[name] = json{{"dtype", std::string(dtype_name(entry_dtype(entry)))}, {"shape", entry_shape(entry)}};
  }
  return tensors;
}

fs::path begin_save(const fs::path& dir, const std::string& what) {
  const fs::path tmp = staging_directory(dir);
  agree_or_throw(what, error_of([&] {
                   if (distributed::rank() != 0) return;
                   fs::remove_all(tmp);
                   fs::create_directories(tmp);
                 }));
  try {
    require_shared_directory(tmp, what);
  } catch (...) {
    remove_staging(tmp);
    throw;
  }
  return tmp;
}

RankWrite write_rank(const std::vector<ChunkToWrite>& chunks, const json& tensors, const fs::path& tmp,
                     const SaveOptions& options) {
  RankWrite out;
  out.error = error_of([&] {
    RankFile written = write_rank_file(chunks, tmp, fmt::format("rank_{}.bin", distributed::rank()),
                                       options.checksum_block_bytes, [&] { call_phase(options, SavePhase::writing); });
    call_phase(options, SavePhase::written);
    json list = json::array();
    for (const auto& [name, chunk] : written.chunks) {
      json c = to_json(chunk);
      c["tensor"] = name;
      list.push_back(std::move(c));
    }
    out.report = json{{"file", written.file}, {"bytes", written.bytes}, {"tensors", tensors}, {"chunks", list}}.dump();
  });
  return out;
}

void finish_save(const fs::path& tmp, const fs::path& dir, const json& extra, const RankWrite& mine,
                 const SaveOptions& options, const std::string& what) {
  const int rank = distributed::rank();
  try {
    agree_or_throw(what, mine.error);
    const std::vector<std::string> reports = all_gather_strings(mine.report);
    agree_or_throw(what, error_of([&] {
                     if (rank != 0) return;
                     const Metadata m = assemble(extra, reports);
                     FileWriter meta(tmp / kMetadataFile);
                     const std::string text = to_json(m).dump(1);
                     meta.write(text.data(), text.size());
                     meta.sync_and_close();
                     fsync_directory(tmp);
                   }));
    agree_or_throw(what, error_of([&] { call_phase(options, SavePhase::committing); }));
    agree_or_throw(what, error_of([&] {
                     if (rank == 0) commit_directory(tmp, dir);
                   }));
  } catch (...) {
    remove_staging(tmp);
    throw;
  }
}

}  // namespace dtr::checkpoint
