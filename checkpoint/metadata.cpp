#include "checkpoint/metadata.h"

#include "base/error.h"
#include "checkpoint/box.h"
#include "checkpoint/checksum.h"

#include <algorithm>
#include <fstream>

namespace dtr::checkpoint {

using nlohmann::json;

json to_json(const ChunkMeta& c) {
  return json{{"offset", c.box.offset},           {"shape", c.box.shape},
              {"file", c.file},                   {"byte_offset", c.byte_offset},
              {"byte_length", c.byte_length},     {"block_bytes", c.block_bytes},
              {"checksums", c.checksums}};
}

ChunkMeta chunk_from_json(const json& j) {
  ChunkMeta c;
  c.box.offset = j.at("offset").get<Shape>();
  c.box.shape = j.at("shape").get<Shape>();
  c.file = j.at("file").get<std::string>();
  c.byte_offset = j.at("byte_offset").get<int64_t>();
  c.byte_length = j.at("byte_length").get<int64_t>();
  c.block_bytes = j.at("block_bytes").get<int64_t>();
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
      if (a.offset[d] < 0 || a.shape[d] < 0 || a.offset[d] + a.shape[d] > t.shape[d]) {
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
    DTR_CHECK(j.value("format", "") == "dtr-checkpoint" && j.value("version", 0) == 1,
              "expected format dtr-checkpoint version 1, found format '{}' version {}", j.value("format", ""),
              j.value("version", 0));
    DTR_CHECK(j.contains("checksum") && j["checksum"].is_string(),
              "it has no checksum (written by an older dtr, or edited)");
    json content = j;
    content.erase("checksum");
    const std::string expected = content_checksum(content), found = j["checksum"].get<std::string>();
    DTR_CHECK(found == expected,
              "it fails its checksum (it records {}, its content gives {}): it was edited or damaged after the save",
              found, expected);
    Metadata m;
    m.world_size = j.at("world_size").get<int>();
    m.files = j.at("files").get<std::map<std::string, int64_t>>();
    for (const auto& [name, t] : j.at("tensors").items()) {
      TensorMeta tm;
      tm.dtype = parse_dtype(t.at("dtype").get<std::string>());
      tm.shape = t.at("shape").get<Shape>();
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
