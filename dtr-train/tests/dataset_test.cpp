// dtr-train's TokenDataset (dtr-train/dataset.h): byte-level files and llm.c
// shards read through mmap, windows and the train/validation split, and clear
// errors for a wrong magic, a wrong version and truncated shards.
#include "dataset.h"

#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using dtr::train::TokenDataset;

namespace {

fs::path temp_file(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("dtr_train_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir / name;
}

void write_bytes(const fs::path& p, const std::string& bytes) {
  std::ofstream(p, std::ios::binary) << bytes;
}

std::string open_error_of(const std::string& path) {
  try {
    TokenDataset::open(path);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("TokenDataset reads any file as byte tokens with windows and a split", "[train][dataset]") {
  const fs::path p = temp_file("text.txt");
  write_bytes(p, "hello, world\xff");
  const TokenDataset ds = TokenDataset::open(p.string());
  REQUIRE(ds.format() == dtr::train::TokenFormat::bytes);
  REQUIRE(ds.vocab_size() == 256);
  REQUIRE(ds.size() == 13);
  REQUIRE(ds.token(0) == 'h');
  REQUIRE(ds.token(12) == 255);
  REQUIRE(ds.num_windows(4) == 3);  // (13 - 1) / 4
  std::vector<int64_t> in, tgt;
  ds.window(1, 4, in, tgt);
  REQUIRE(in == std::vector<int64_t>{'o', ',', ' ', 'w'});
  REQUIRE(tgt == std::vector<int64_t>{',', ' ', 'w', 'o'});
  const auto [train, val] = ds.split(0.25);
  REQUIRE(train.size() == 10);
  REQUIRE(val.size() == 3);
  REQUIRE(val.token(0) == 'l');
  REQUIRE_THROWS(ds.token(13));
  REQUIRE_THROWS(ds.window(3, 4, in, tgt));
}

TEST_CASE("TokenDataset reads llm.c shards as uint16 GPT-2 tokens", "[train][dataset]") {
  const fs::path p = temp_file("shard.bin");
  const std::vector<uint16_t> tokens = {50256, 15496, 11, 995, 0, 40000};  // ids above 32767 too
  dtr::train::write_llmc_shard(p.string(), tokens);
  const TokenDataset ds = TokenDataset::open(p.string());
  REQUIRE(ds.format() == dtr::train::TokenFormat::llmc);
  REQUIRE(ds.vocab_size() == 50257);
  REQUIRE(ds.size() == 6);
  for (size_t i = 0; i < tokens.size(); ++i) REQUIRE(ds.token(static_cast<int64_t>(i)) == tokens[i]);
  // The same file read as bytes: header and all.
  REQUIRE(TokenDataset::open(p.string(), dtr::train::DataFormat::bytes).size() == 1024 + 12);
  // Named otherwise, it is a shard only when asked (--data-format llmc).
  const fs::path renamed = temp_file("shard.tokens");
  fs::copy_file(p, renamed, fs::copy_options::overwrite_existing);
  REQUIRE(TokenDataset::open(renamed.string()).format() == dtr::train::TokenFormat::bytes);
  REQUIRE(TokenDataset::open(renamed.string(), dtr::train::DataFormat::llmc).size() == 6);
}

TEST_CASE("TokenDataset names a wrong magic, a wrong version and truncated llm.c shards", "[train][dataset]") {
  const fs::path bad_magic = temp_file("magic.bin");
  write_bytes(bad_magic, std::string(2048, 'x'));
  CHECK_THAT(open_error_of(bad_magic.string()), Catch::Contains("magic number is") && Catch::Contains("20240520") &&
                                               Catch::Contains("magic.bin"));

  const fs::path shard = temp_file("ok.bin");
  dtr::train::write_llmc_shard(shard.string(), std::vector<uint16_t>(100, 7));
  std::string bytes;
  {
    std::ifstream in(shard, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  const fs::path cut = temp_file("cut.bin");
  write_bytes(cut, bytes.substr(0, bytes.size() - 3));
  CHECK_THAT(open_error_of(cut.string()), Catch::Contains("truncated") && Catch::Contains("100 tokens"));

  const fs::path header_only = temp_file("short.bin");
  write_bytes(header_only, bytes.substr(0, 500));
  CHECK_THAT(open_error_of(header_only.string()), Catch::Contains("shorter than the 1024-byte header"));

  std::string v2 = bytes;
  v2[4] = 2;
  const fs::path version = temp_file("v2.bin");
  write_bytes(version, v2);
  CHECK_THAT(open_error_of(version.string()), Catch::Contains("version 2"));

  // A token id outside the GPT-2 vocabulary anywhere in the file, here the last of
  // 100 (what the validation split would read), is found when the file is opened.
  std::vector<uint16_t> ids(100, 7);
  ids.back() = 65535;
  const fs::path bad_id = temp_file("bad_id.bin");
  dtr::train::write_llmc_shard(bad_id.string(), ids);
  CHECK_THAT(open_error_of(bad_id.string()), Catch::Contains("bad_id.bin: token 99 (byte offset 1222) is 65535, outside "
                                                        "the GPT-2 vocabulary [0, 50257)"));

  CHECK_THAT(open_error_of(temp_file("missing.txt").string()), Catch::Contains("cannot open"));
}
