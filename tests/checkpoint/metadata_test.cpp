// Checkpoint metadata (dtr/checkpoint/metadata.h) as a reader meets it: the JSON
// to_json writes reads back; an edit anywhere (here the step in the user's JSON)
// or a missing checksum is refused; chunks that overlap, leave a gap or lie
// outside their tensor are refused even when their element counts add up.
#include "dtr/checkpoint/metadata.h"

#include <catch2/catch.hpp>

#include <string>

using namespace dtr;
using namespace dtr::checkpoint;

namespace {

// An [8, 2] f32 tensor in chunks of rows given as (first row, rows).
Metadata rows_metadata(const std::vector<std::pair<int64_t, int64_t>>& chunks) {
  Metadata m;
  m.world_size = 2;
  m.files = {{"rank_0.bin", 64}};
  TensorMeta t;
  t.dtype = DType::f32;
  t.shape = {8, 2};
  int64_t byte = 0;
  for (auto [first, rows] : chunks) {
    t.chunks.push_back({.box = {.offset = {first, 0}, .shape = {rows, 2}},
                        .file = "rank_0.bin",
                        .byte_offset = byte,
                        .byte_length = rows * 8,
                        .block_bytes = 1 << 20,
                        .checksums = {"0123456789abcdef"}});
    byte += rows * 8;
  }
  m.tensors.emplace("w", std::move(t));
  m.user = {{"step", 20}};
  return m;
}

std::string error_of(const nlohmann::json& j) {
  try {
    metadata_from_json(j, "metadata.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("checkpoint metadata reads back what was written, checksum included", "[checkpoint]") {
  const nlohmann::json j = to_json(rows_metadata({{0, 4}, {4, 4}}));
  REQUIRE(j.contains("checksum"));
  const Metadata m = metadata_from_json(nlohmann::json::parse(j.dump(1)), "metadata.json");
  REQUIRE(m.tensors.at("w").chunks.size() == 2);
  REQUIRE(m.user.at("step") == 20);
}

TEST_CASE("checkpoint metadata accepts a 2-D tiling whose chunks share rows but not elements", "[checkpoint]") {
  Metadata m = rows_metadata({{0, 4}, {4, 4}});
  // Rows 0-3 split by column (as a 2-D mesh shards them), rows 4-7 whole.
  std::vector<ChunkMeta>& chunks = m.tensors.at("w").chunks;
  chunks[0].box.shape = {4, 1};
  ChunkMeta right = chunks[0];
  right.box.offset = {0, 1};
  chunks.insert(chunks.begin() + 1, right);
  REQUIRE(tiling_problem("w", m.tensors.at("w")).empty());
  REQUIRE(metadata_from_json(to_json(m), "metadata.json").tensors.at("w").chunks.size() == 3);
  // The same with the right column one row too low: it overlaps rows 4-7.
  chunks[1].box.offset = {1, 1};
  CHECK_THAT(tiling_problem("w", m.tensors.at("w")),
             Catch::Contains("chunks [1:5, 1:2] and [4:8, 0:2] overlap in [4:5, 1:2]"));
}

TEST_CASE("checkpoint metadata that was edited or lacks its checksum is refused", "[checkpoint]") {
  nlohmann::json edited = to_json(rows_metadata({{0, 4}, {4, 4}}));
  edited["user"]["step"] = 26;
  CHECK_THAT(error_of(edited), Catch::Contains("metadata.json is malformed: it fails its checksum") &&
                                   Catch::Contains("edited or damaged after the save"));
  nlohmann::json unsigned_copy = to_json(rows_metadata({{0, 4}, {4, 4}}));
  unsigned_copy.erase("checksum");
  CHECK_THAT(error_of(unsigned_copy), Catch::Contains("it has no checksum"));
}

TEST_CASE("checkpoint metadata whose chunks do not tile their tensor exactly is refused", "[checkpoint]") {
  // Rows 0-3 and 2-5: 8 elements of rows, as many as the tensor's, but overlapping
  // with rows 6-7 missing: counting elements alone accepted this.
  CHECK_THAT(error_of(to_json(rows_metadata({{0, 4}, {2, 4}}))),
             Catch::Contains("tensor 'w': chunks [0:4, 0:2] and [2:6, 0:2] overlap in [2:4, 0:2]"));
  // A chunk listed twice.
  CHECK_THAT(error_of(to_json(rows_metadata({{0, 4}, {4, 4}, {4, 4}}))), Catch::Contains("overlap"));
  CHECK_THAT(error_of(to_json(rows_metadata({{0, 4}, {4, 2}}))),
             Catch::Contains("tensor 'w': its chunks cover 12 of its 16 elements (a gap)"));
  CHECK_THAT(error_of(to_json(rows_metadata({{0, 4}, {6, 4}}))), Catch::Contains("lies outside its shape [8, 2]"));
}
