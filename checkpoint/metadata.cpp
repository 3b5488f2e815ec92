#include "checkpoint/metadata.h"

#include "base/error.h"

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

json to_json(const Metadata& m) {
  json tensors = json::object();
  for (const auto& [name, t] : m.tensors) {
    json chunks = json::array();
    for (const auto& c : t.chunks) chunks.push_back(to_json(c));
    tensors[name] = json{{"dtype", std::string(dtype_name(t.dtype))}, {"shape", t.shape}, {"chunks", chunks}};
  }
  return json{{"format", "dtr-checkpoint"}, {"version", 1},     {"world_size", m.world_size},
              {"files", m.files},           {"tensors", tensors}, {"user", m.user}};
}

Metadata metadata_from_json(const json& j, const std::string& source) {
  try {
    DTR_CHECK(j.value("format", "") == "dtr-checkpoint" && j.value("version", 0) == 1,
              "expected format dtr-checkpoint version 1, found format '{}' version {}", j.value("format", ""),
              j.value("version", 0));
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
