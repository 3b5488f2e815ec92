// The checkpoint's metadata file (metadata.json, written by rank 0): for every
// tensor its fully qualified name, dtype and global shape, and for each stored
// chunk its box in the global tensor, the file and byte range holding it
// (row-major, little-endian, the dtype's bytes) and the XXH3 checksums of its
// blocks of `block_bytes` bytes (the last one shorter). Also the size of every
// data file (to tell a truncated file from a corrupt one), the user's JSON, and the
// XXH3 checksum of all the rest, so that an edited or damaged metadata file is
// refused rather than trusted. Reading also requires each tensor's chunks to tile
// it exactly (inside it, no overlap, no gap), so no reader fills a tensor from
// overlapping chunks or leaves part of it unwritten.
//
//   {"format": "dtr-checkpoint", "version": 1, "world_size": 4,
//    "files": {"rank_0.bin": 1234, ...},
//    "tensors": {"layers.0.w": {"dtype": "f32", "shape": [8, 4], "chunks": [
//        {"offset": [0, 0], "shape": [2, 4], "file": "rank_0.bin",
//         "byte_offset": 0, "byte_length": 32, "block_bytes": 1048576,
//         "checksums": ["0123456789abcdef"]}, ...]}, ...},
//    "user": {...}, "checksum": "0123456789abcdef"}
#pragma once

#include "dtr/checkpoint/box.h"
#include "dtr/tensor/dtype.h"

#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace dtr::checkpoint {

inline constexpr const char* kMetadataFile = "metadata.json";

struct ChunkMeta {
  Box box;
  std::string file;  // relative to the checkpoint directory
  int64_t byte_offset = 0;
  int64_t byte_length = 0;
  int64_t block_bytes = 0;
  std::vector<std::string> checksums;  // one per block, checksum_hex
};

struct TensorMeta {
  DType dtype = DType::f32;
  Shape shape;  // global
  std::vector<ChunkMeta> chunks;
};

struct Metadata {
  int world_size = 0;
  std::map<std::string, int64_t> files;  // data file -> size in bytes
  std::map<std::string, TensorMeta> tensors;
  nlohmann::json user = nlohmann::json::object();
};

nlohmann::json to_json(const ChunkMeta& chunk);
ChunkMeta chunk_from_json(const nlohmann::json& j);
nlohmann::json to_json(const Metadata& metadata);
// The checksum metadata.json records of the rest of its content: XXH3 of the
// compact dump (keys sorted, so the same for the JSON as written and as read back).
std::string content_checksum(const nlohmann::json& without_checksum);
// "" when the chunks of tensor `name` tile it exactly: each inside it, no two
// overlapping, and together as many elements as it has (so no gap either); else
// what is wrong, naming the chunks.
std::string tiling_problem(const std::string& name, const TensorMeta& tensor);
// Errors name `source` (the file) and what is malformed: a missing or wrong
// checksum, chunks that do not tile their tensor, missing fields.
Metadata metadata_from_json(const nlohmann::json& j, const std::string& source);

// Reads <dir>/metadata.json; errors name the file (missing, unparsable, malformed).
Metadata read_metadata(const std::filesystem::path& dir);

}  // namespace dtr::checkpoint
