// dtr-ckpt: offline tool for dtr distributed checkpoints (checkpoint/),
// one process, no mpirun.
//
//   dtr-ckpt info DIR                        tensors, shapes, dtypes, chunks, sizes, world size
//   dtr-ckpt verify DIR                      every block's XXH3 checksum and every file's size;
//                                            exit 1 naming each bad tensor and file
//   dtr-ckpt consolidate DIR OUT.safetensors [--model-only]
//                                            one safetensors file of the full tensors, streamed
//                                            one tensor at a time (memory: the largest tensor)
//
// Exit status: 0 on success, 1 when verify finds a problem or any command fails.
#include "dtr/checkpoint/checksum.h"
#include "dtr/checkpoint/file_io.h"
#include "dtr/checkpoint/metadata.h"
#include "dtr/checkpoint/reader.h"
#include "dtr/checkpoint/safetensors.h"
#include "dtr/tensor/factory.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <vector>

namespace ckpt = dtr::checkpoint;
namespace fs = std::filesystem;

namespace {

std::string human_bytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.1f} {}", v, units[u]);
}

int info(const fs::path& dir) {
  const ckpt::Metadata m = ckpt::read_metadata(dir);
  int64_t file_bytes = 0;
  for (const auto& [f, b] : m.files) file_bytes += b;
  int64_t elements = 0;
  fmt::print("checkpoint {}\n", dir.string());
  fmt::print("written with world size {}\n", m.world_size);
  fmt::print("{} tensors, {} data files, {} ({} bytes) of data\n", m.tensors.size(), m.files.size(),
             human_bytes(file_bytes), file_bytes);
  size_t width = 4;
  for (const auto& [name, t] : m.tensors) width = std::max(width, name.size());
  fmt::print("{:<{}}  {:<5}  {:<16}  {:>6}  {:>12}\n", "name", width, "dtype", "shape", "chunks", "bytes");
  for (const auto& [name, t] : m.tensors) {
    const int64_t bytes = dtr::numel_of(t.shape) * static_cast<int64_t>(dtr::element_size(t.dtype));
    elements += dtr::numel_of(t.shape);
    fmt::print("{:<{}}  {:<5}  {:<16}  {:>6}  {:>12}\n", name, width, dtr::dtype_name(t.dtype),
               fmt::format("[{}]", fmt::join(t.shape, ", ")), t.chunks.size(), bytes);
  }
  fmt::print("{} elements in all\n", elements);
  if (!m.user.empty()) {
    std::vector<std::string> keys;
    for (const auto& [k, v] : m.user.items()) keys.push_back(k);
    fmt::print("user metadata keys: {}\n", fmt::join(keys, ", "));
    // What dtr-train records about the run that wrote it.
    for (const char* key : {"model_config", "run_settings"}) {
      if (m.user.contains(key)) fmt::print("{}: {}\n", key, m.user[key].dump());
    }
  }
  return 0;
}

// Reads every chunk block by block (memory: one block) and checks each checksum
// and each file's size. (read_metadata has checked the metadata's own checksum and
// that the chunks of each tensor tile it exactly.)
int verify(const fs::path& dir) {
  const ckpt::Metadata m = ckpt::read_metadata(dir);
  std::vector<std::string> problems;
  std::map<std::string, bool> file_ok;
  for (const auto& [file, size] : m.files) {
    const fs::path p = dir / file;
    if (!fs::exists(p)) {
      problems.push_back(fmt::format("data file {} is missing", p.string()));
      file_ok[file] = false;
    } else if (const auto found = static_cast<int64_t>(fs::file_size(p)); found != size) {
      problems.push_back(fmt::format("data file {} has {} bytes, the metadata says {}{}", p.string(), found, size,
                                     found < size ? " (truncated)" : ""));
      file_ok[file] = false;
    } else {
      file_ok[file] = true;
    }
  }
  int64_t blocks = 0, bytes = 0;
  std::vector<char> buf;
  for (const auto& [name, t] : m.tensors) {
    for (const auto& c : t.chunks) {
      const fs::path p = dir / c.file;
      auto known = file_ok.find(c.file);
      if (known == file_ok.end()) {
        problems.push_back(fmt::format("tensor '{}': chunk {} is in {}, which the metadata's file list lacks", name,
                                       c.box.to_string(), p.string()));
        continue;
      }
      if (!known->second) {
        problems.push_back(fmt::format("tensor '{}': chunk {} cannot be checked, {} is missing or has the wrong size",
                                       name, c.box.to_string(), p.string()));
        continue;
      }
      const int64_t want_blocks = c.block_bytes > 0 ? (c.byte_length + c.block_bytes - 1) / c.block_bytes : -1;
      if (static_cast<int64_t>(c.checksums.size()) != want_blocks ||
          c.byte_length != c.box.numel() * static_cast<int64_t>(dtr::element_size(t.dtype))) {
        problems.push_back(fmt::format("tensor '{}': chunk {} in {} is inconsistent in the metadata", name,
                                       c.box.to_string(), p.string()));
        continue;
      }
      ckpt::FileReader reader(p);
      for (int64_t b = 0; b < want_blocks; ++b) {
        const int64_t begin = c.byte_offset + b * c.block_bytes;
        const int64_t len = std::min(c.block_bytes, c.byte_length - b * c.block_bytes);
        buf.resize(static_cast<size_t>(len));
        reader.read_at(buf.data(), buf.size(), begin);
        const std::string sum = ckpt::checksum_hex(ckpt::xxh3_64(buf.data(), buf.size()));
        if (sum != c.checksums[static_cast<size_t>(b)]) {
          problems.push_back(fmt::format(
              "tensor '{}': checksum mismatch in {} (chunk {}, bytes {}..{} of the file): stored {}, computed {}",
              name, p.string(), c.box.to_string(), begin, begin + len, c.checksums[static_cast<size_t>(b)], sum));
        }
        ++blocks;
        bytes += len;
      }
    }
  }
  if (!problems.empty()) {
    for (const auto& p : problems) fmt::print(stderr, "FAILED: {}\n", p);
    fmt::print(stderr, "verify {}: {} problem(s)\n", dir.string(), problems.size());
    return 1;
  }
  fmt::print("verify {}: OK ({} tensors, {} blocks, {} bytes checked)\n", dir.string(), m.tensors.size(), blocks,
             bytes);
  return 0;
}

int consolidate(const fs::path& dir, const fs::path& out, bool model_only) {
  const ckpt::Metadata m = ckpt::read_metadata(dir);
  std::vector<ckpt::SafetensorsWriter::Entry> entries;
  for (const auto& [name, t] : m.tensors) {
    if (model_only && name.starts_with("optim.")) continue;
    entries.push_back({name, t.dtype, t.shape});
  }
  const fs::path tmp = fs::path(out.string() + ".tmp");
  std::map<std::string, std::string> meta{{"format", "pt"},
                                          {"dtr_checkpoint", fs::absolute(dir).string()},
                                          {"dtr_world_size", std::to_string(m.world_size)}};
  if (!m.user.empty()) meta["dtr_user"] = m.user.dump();
  try {
    ckpt::SafetensorsWriter writer(tmp, entries, meta);
    for (const auto& e : entries) {
      // One tensor in memory at a time: read (and verify) all of its chunks.
      ckpt::CheckpointState one;
      one.tensors.emplace(e.name, dtr::empty(e.shape, {.dtype = e.dtype, .device = dtr::Device::meta()}));
      ckpt::ReadStats stats;
      auto staged = ckpt::read_needed(one, m, dir, stats);
      writer.write(e.name, staged.at(e.name));
    }
    writer.finish();
  } catch (...) {
    std::error_code ignored;
    fs::remove(tmp, ignored);  // no partial output
    throw;
  }
  fs::rename(tmp, out);
  fmt::print("consolidated {} tensors of {} into {} ({} bytes)\n", entries.size(), dir.string(), out.string(),
             fs::file_size(out));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dtr-ckpt: inspect, verify and consolidate dtr distributed checkpoints"};
  app.require_subcommand(1);
  std::string dir, out;
  bool model_only = false;
  auto* info_cmd = app.add_subcommand("info", "tensors, shapes, dtypes, world size and size of a checkpoint");
  info_cmd->add_option("DIR", dir, "checkpoint directory")->required();
  auto* verify_cmd = app.add_subcommand("verify", "check every checksum and file size; exit 1 on any problem");
  verify_cmd->add_option("DIR", dir, "checkpoint directory")->required();
  auto* cons_cmd = app.add_subcommand("consolidate", "write the full tensors into one safetensors file");
  cons_cmd->add_option("DIR", dir, "checkpoint directory")->required();
  cons_cmd->add_option("OUT", out, "output .safetensors file")->required();
  cons_cmd->add_flag("--model-only", model_only, "leave out optimizer state (\"optim.*\" tensors)");
  CLI11_PARSE(app, argc, argv);
  try {
    if (*info_cmd) return info(dir);
    if (*verify_cmd) return verify(dir);
    if (*cons_cmd) return consolidate(dir, out, model_only);
  } catch (const std::exception& e) {
    fmt::print(stderr, "dtr-ckpt: error: {}\n", e.what());
    return 1;
  }
  return 1;
}
