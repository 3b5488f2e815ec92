#include "dtr/checkpoint/metadata.h"

#include "dtr/base/error.h"
#include "dtr/checkpoint/box.h"
#include "dtr/checkpoint/checksum.h"

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <limits>

namespace dtr::checkpoint {

using nlohmann::json;

json to_json(const ChunkMeta& c) {
  return json{{"offset", c.box.offset},           {"shape", c.box.shape},
              {"file", c.file},                   {"byte_offset", c.byte_offset},
              {"byte_length", c.byte_length},     {"block_bytes", c.block_bytes},
              {"checksums", c.checksums}};
}

namespace {

// `j` as an int64: nlohmann converts a float, or an integer out of range, with a
// plain cast (undefined behaviour for 1e47), so the kind and range come first.
int64_t integer(const json& j, const std::string& what) {
  DTR_CHECK(j.is_number_integer() &&
                !(j.is_number_unsigned() && j.get<uint64_t>() > uint64_t{std::numeric_limits<int64_t>::max()}),
            "{}: expected an integer (64-bit), found {}", what, j.dump());
  return j.get<int64_t>();
}

Shape integers(const json& j, const std::string& what) {
  DTR_CHECK(j.is_array(), "{}: expected an array of integers, found {}", what, j.dump());
  Shape out;
  for (const json& v : j) out.push_back(integer(v, what));
  return out;
}

}  // namespace

ChunkMeta chunk_from_json(const json& j) {
  ChunkMeta c;
  c.box.offset = integers(j.at("offset"), "chunk offset");
  c.box.shape = integers(j.at("shape"), "chunk shape");
  c.file = j.at("file").get<std::string>();
  c.byte_offset = integer(j.at("byte_offset"), "chunk byte_offset");
  c.byte_length = integer(j.at("byte_length"), "chunk byte_length");
  c.block_bytes = integer(j.at("block_bytes"), "chunk block_bytes");
  c.checksums = j.at("checksums").get<std::vector<std::string>>();
  return c;
}

std::string content_checksum(const json& without_checksum) {
  const std::string text = without_checksum.dump();
  return checksum_hex(xxh3_64(text.data(), text.size()));
}

std::string tiling_problem(const std::string& name, const TensorMeta& t) {
  int64_t covered = 0;
  for (const ChunkMeta& c : t.chunks) {
    const Box& a = c.box;
    for (size_t d = 0; d < t.shape.size(); ++d) {
      if (a.offset[d] < 0 || a.shape[d] < 0 || a.offset[d] > t.shape[d] || a.shape[d] > t.shape[d] - a.offset[d]) {
        return fmt::format("tensor '{}': chunk {} lies outside its shape [{}]", name, a.to_string(),
                           fmt::join(t.shape, ", "));
      }
    }
    covered += a.numel();
  }
  // Overlaps, swept along dim 0: a chunk is compared only with the earlier ones whose
  // rows reach its first row (one or two for row-sharded tensors, not all of them).
  if (!t.shape.empty()) {
    std::vector<const Box*> by_start;
    for (const ChunkMeta& c : t.chunks) by_start.push_back(&c.box);
    std::sort(by_start.begin(), by_start.end(), [](const Box* a, const Box* b) { return a->offset[0] < b->offset[0]; });
    std::vector<const Box*> open;
    for (const Box* a : by_start) {
      std::erase_if(open, [&](const Box* b) { return b->offset[0] + b->shape[0] <= a->offset[0]; });
      for (const Box* b : open) {
        if (auto both = intersect(*a, *b)) {
          return fmt::format("tensor '{}': chunks {} and {} overlap in {}", name, b->to_string(), a->to_string(),
                             both->to_string());
        }
      }
      open.push_back(a);
    }
  } else if (t.chunks.size() > 1) {
    return fmt::format("tensor '{}' (a scalar) is stored {} times", name, t.chunks.size());
  }
  const int64_t numel = numel_of(t.shape);
  if (covered != numel) {
    return fmt::format("tensor '{}': its chunks cover {} of its {} elements (a gap)", name, covered, numel);
  }
  return "";
}

json to_json(const Metadata& m) {
  json tensors = json::object();
  for (const auto& [name, t] : m.tensors) {
    json chunks = json::array();
    for (const auto& c : t.chunks) chunks.push_back(to_json(c));
    tensors[name] = json{{"dtype", std::string(dtype_name(t.dtype))}, {"shape", t.shape}, {"chunks", chunks}};
  }
  json j{{"format", "dtr-checkpoint"}, {"version", 1},     {"world_size", m.world_size},
         {"files", m.files},           {"tensors", tensors}, {"user", m.user}};
  j["checksum"] = content_checksum(j);
  return j;
}

Metadata metadata_from_json(const json& j, const std::string& source) {
  try {
    // As JSON values: value("version", 0) would convert 1e27 to int, undefined behaviour.
    const json format = j.value("format", json()), version = j.value("version", json());
    DTR_CHECK(format == "dtr-checkpoint" && version.is_number_integer() && version == 1,
              "expected format dtr-checkpoint version 1, found format {} version {}", format.dump(), version.dump());
    DTR_CHECK(j.contains("checksum") && j["checksum"].is_string(),
              "it has no checksum (written by an older dtr, or edited)");
    json content = j;
    content.erase("checksum");
    const std::string expected = content_checksum(content), found = j["checksum"].get<std::string>();
    DTR_CHECK(found == expected,
              "it fails its checksum (it records {}, its content gives {}): it was edited or damaged after the save",
              found, expected);
    Metadata m;
    const int64_t world_size = integer(j.at("world_size"), "world_size");
    DTR_CHECK(world_size >= 1 && world_size <= std::numeric_limits<int>::max(),
              "world_size: expected a positive int, found {}", world_size);
    m.world_size = static_cast<int>(world_size);
    DTR_CHECK(j.at("files").is_object(), "files: expected an object of file sizes, found {}", j.at("files").dump());
    for (const auto& [file, bytes] : j.at("files").items()) m.files[file] = integer(bytes, "size of file " + file);
    for (const auto& [name, t] : j.at("tensors").items()) {
      TensorMeta tm;
      tm.dtype = parse_dtype(t.at("dtype").get<std::string>());
      tm.shape = integers(t.at("shape"), "shape of tensor '" + name + "'");
      int64_t numel = 1;
      for (int64_t size : tm.shape) {
        DTR_CHECK(size >= 0 && !__builtin_mul_overflow(numel, size, &numel),
                  "tensor '{}': shape [{}] has a negative size or more elements than 64 bits count", name,
                  fmt::join(tm.shape, ", "));
      }
      for (const auto& c : t.at("chunks")) {
        ChunkMeta chunk = chunk_from_json(c);
        DTR_CHECK(chunk.box.shape.size() == tm.shape.size() && chunk.box.offset.size() == tm.shape.size(),
                  "tensor '{}': a chunk of rank {} in a tensor of shape [{}]", name, chunk.box.shape.size(),
                  fmt::join(tm.shape, ", "));
        DTR_CHECK(m.files.contains(chunk.file), "tensor '{}': chunk in unknown file '{}'", name, chunk.file);
        tm.chunks.push_back(std::move(chunk));
      }
      const std::string problem = tiling_problem(name, tm);
      DTR_CHECK(problem.empty(), "{}", problem);
      m.tensors.emplace(name, std::move(tm));
    }
    m.user = j.value("user", json::object());
    return m;
  } catch (const json::exception& e) {
    DTR_FAIL("checkpoint metadata {} is malformed: {}", source, e.what());
  } catch (const Error& e) {
    DTR_FAIL("checkpoint metadata {} is malformed: {}", source, e.what());
  }
}

Metadata read_metadata(const std::filesystem::path& dir) {
  const auto path = dir / kMetadataFile;
  std::ifstream in(path);
  DTR_CHECK(in.good(), "checkpoint metadata {} cannot be opened (no checkpoint in {}?)", path.string(), dir.string());
  json j;
  try {
    in >> j;
  } catch (const json::exception& e) {
    DTR_FAIL("checkpoint metadata {} is not valid JSON (truncated or corrupt?): {}", path.string(), e.what());
  }
  return metadata_from_json(j, path.string());
}

}  // namespace dtr::checkpoint
