#include "dtr/checkpoint/reader.h"

#include "dtr/base/error.h"
#include "dtr/checkpoint/checksum.h"
#include "dtr/checkpoint/file_io.h"
#include "dtr/checkpoint/planner.h"
#include "dtr/tensor/factory.h"

#include <cstring>
#include <memory>

namespace dtr::checkpoint {

namespace fs = std::filesystem;

namespace {

// Open data files, each checked once against the size the metadata records.
class Files {
 public:
  Files(const Metadata& metadata, fs::path dir) : metadata_(metadata), dir_(std::move(dir)) {}

  const FileReader& get(const std::string& file, const std::string& tensor) {
    auto it = open_.find(file);
    if (it != open_.end()) return *it->second;
    const fs::path path = dir_ / file;
    DTR_CHECK(fs::exists(path), "tensor '{}': data file {} is missing", tensor, path.string());
    auto reader = std::make_unique<FileReader>(path);
    const int64_t expected = metadata_.files.at(file), found = reader->size();
    DTR_CHECK(found == expected, "tensor '{}': data file {} has {} bytes, the metadata says {}{}", tensor,
              path.string(), found, expected, found < expected ? " (truncated)" : "");
    return *open_.emplace(file, std::move(reader)).first->second;
  }

 private:
  const Metadata& metadata_;
  fs::path dir_;
  std::map<std::string, std::unique_ptr<FileReader>> open_;
};

void validate_chunk(const std::string& name, const TensorMeta& tm, const ChunkMeta& c) {
  const int64_t expected_bytes = c.box.numel() * static_cast<int64_t>(element_size(tm.dtype));
  const int64_t blocks = c.block_bytes > 0 ? (c.byte_length + c.block_bytes - 1) / c.block_bytes : -1;
  DTR_CHECK(c.byte_length == expected_bytes && c.block_bytes > 0 &&
                static_cast<int64_t>(c.checksums.size()) == blocks,
            "tensor '{}': chunk {} in {} is inconsistent: {} bytes (box needs {}), block size {}, {} checksums",
            name, c.box.to_string(), c.file, c.byte_length, expected_bytes, c.block_bytes, c.checksums.size());
  for (size_t d = 0; d < tm.shape.size(); ++d) {
    DTR_CHECK(c.box.offset[d] >= 0 && c.box.shape[d] >= 0 && c.box.offset[d] + c.box.shape[d] <= tm.shape[d],
              "tensor '{}': chunk {} in {} lies outside the shape {}", name, c.box.to_string(), c.file,
              shape_str(tm.shape));
  }
}

// Copies the intersection of chunk `c` with `need` into `dst` (the staging
// tensor of `need`), reading and verifying only the blocks involved.
void read_chunk_part(const std::string& name, const TensorMeta& tm, const ChunkMeta& c, const Box& need,
                     const Box& part, char* dst, Files& files, ReadStats& stats, const fs::path& dir) {
  const auto esize = static_cast<int64_t>(element_size(tm.dtype));
  auto runs = copy_runs(c.box, need, part);
  const int64_t nblocks = static_cast<int64_t>(c.checksums.size());
  std::vector<char> wanted(static_cast<size_t>(nblocks), 0);
  for (const Run& r : runs) {
    const int64_t first = r.src * esize / c.block_bytes, last = ((r.src + r.elements) * esize - 1) / c.block_bytes;
    for (int64_t b = first; b <= last; ++b) wanted[static_cast<size_t>(b)] = 1;
  }
  const FileReader& file = files.get(c.file, name);
  std::vector<std::vector<char>> buffers;
  std::vector<const char*> block(static_cast<size_t>(nblocks), nullptr);
  auto block_len = [&](int64_t b) { return std::min(c.block_bytes, c.byte_length - b * c.block_bytes); };
  for (int64_t b = 0; b < nblocks;) {
    if (!wanted[static_cast<size_t>(b)]) {
      ++b;
      continue;
    }
    int64_t e = b;
    while (e < nblocks && wanted[static_cast<size_t>(e)]) ++e;  // blocks [b, e) are read together
    const int64_t begin = b * c.block_bytes, end = (e - 1) * c.block_bytes + block_len(e - 1);
    auto& buf = buffers.emplace_back(static_cast<size_t>(end - begin));
    file.read_at(buf.data(), buf.size(), c.byte_offset + begin);
    stats.bytes_read += end - begin;
    for (int64_t k = b; k < e; ++k) {
      const char* p = buf.data() + (k - b) * c.block_bytes;
      const std::string sum = checksum_hex(xxh3_64(p, static_cast<size_t>(block_len(k))));
      DTR_CHECK(sum == c.checksums[static_cast<size_t>(k)],
                "tensor '{}': checksum mismatch in {} (chunk {}, bytes {}..{} of the file): stored {}, computed {} "
                "(corrupt file?)",
                name, (dir / c.file).string(), c.box.to_string(), c.byte_offset + k * c.block_bytes,
                c.byte_offset + k * c.block_bytes + block_len(k), c.checksums[static_cast<size_t>(k)], sum);
      block[static_cast<size_t>(k)] = p;
    }
    b = e;
  }
  for (const Run& r : runs) {
    int64_t pos = r.src * esize, left = r.elements * esize;
    char* out = dst + r.dst * esize;
    while (left > 0) {
      const int64_t b = pos / c.block_bytes, within = pos % c.block_bytes;
      const int64_t n = std::min(left, block_len(b) - within);
      std::memcpy(out, block[static_cast<size_t>(b)] + within, static_cast<size_t>(n));
      out += n;
      pos += n;
      left -= n;
    }
  }
  ++stats.chunks_read;
}

}  // namespace

std::map<std::string, Tensor> read_needed(const CheckpointState& state, const Metadata& metadata, const fs::path& dir,
                                          ReadStats& stats) {
  const std::string meta_path = (dir / kMetadataFile).string();
  // Validate every entry against the metadata before reading anything.
  std::vector<std::string> problems;
  for (const auto& [name, entry] : state.tensors) {
    auto it = metadata.tensors.find(name);
    if (it == metadata.tensors.end()) {
      problems.push_back(fmt::format("tensor '{}' is missing from the checkpoint ({})", name, meta_path));
      continue;
    }
    const TensorMeta& tm = it->second;
    if (tm.dtype != entry_dtype(entry) || tm.shape != entry_shape(entry)) {
      problems.push_back(fmt::format("tensor '{}': expected {} {} (the state's), found {} {} in {}", name,
                                     dtype_name(entry_dtype(entry)), shape_str(entry_shape(entry)),
                                     dtype_name(tm.dtype), shape_str(tm.shape), meta_path));
    }
  }
  DTR_CHECK(problems.empty(), "{}", fmt::join(problems, "; "));

  Files files(metadata, dir);
  std::map<std::string, Tensor> staged;
  for (const auto& [name, entry] : state.tensors) {
    const TensorMeta& tm = metadata.tensors.at(name);
    const Box need = box_to_read(entry);
    Tensor staging = empty(need.shape, {.dtype = tm.dtype, .device = Device::cpu()});
    char* dst = static_cast<char*>(staging.raw_data());
    int64_t covered = 0;
    for (const ChunkMeta& c : tm.chunks) {
      validate_chunk(name, tm, c);
      auto part = intersect(c.box, need);
      if (!part) continue;
      read_chunk_part(name, tm, c, need, *part, dst, files, stats, dir);
      covered += part->numel();
    }
    DTR_CHECK(covered == need.numel(),
              "tensor '{}': the chunks in {} cover {} of the {} elements of the needed box {} (incomplete "
              "checkpoint?)",
              name, meta_path, covered, need.numel(), need.to_string());
    staged.emplace(name, std::move(staging));
  }
  return staged;
}

}  // namespace dtr::checkpoint
