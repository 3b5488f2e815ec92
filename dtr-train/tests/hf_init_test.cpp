// dtr-train's --init-from and --export-hf (dtr-train/trainer.h) in one process:
// one step of fine-tuning, with a learning rate of 1e-5, from the byte-level Llama
// transformers wrote (tests/fixtures/hf/llama_bytes) exports every tensor of
// transformers' file, under its name, within 1e-4 of transformers' values (so the
// run started from them, not from a fresh init) and not all equal (so the export
// is of the trained model); and the flags' errors.
#include "cli.h"
#include "parse_args.h"
#include "trainer.h"

#include "dtr/checkpoint/safetensors.h"
#include "dtr/mesh/distributed.h"

#include <catch2/catch.hpp>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

namespace fs = std::filesystem;
namespace ckpt = dtr::checkpoint;

using dtr::train::testing::parse_args;

namespace {

const fs::path kFixture = fs::path(DTR_HF_FIXTURES) / "llama_bytes";

std::vector<double> values(const fs::path& file, const ckpt::SafetensorsHeader& header, const std::string& name) {
  return ckpt::read_safetensors_tensor(file, header, name).to(dtr::DType::f64).to_vector<double>();
}

}  // namespace

TEST_CASE("dtr-train --init-from fine-tunes transformers' weights and --export-hf writes them back",
          "[train][hf]") {
  dtr::distributed::ensure_initialized("hf_init_test");
  const fs::path out = fs::temp_directory_path() / ("dtr_train_hf_test_" + std::to_string(::getpid()));
  fs::remove_all(out);
  const auto cli = parse_args({"--init-from", kFixture.string(), "--export-hf", (out / "hf").string(), "--steps", "1",
                          "--global-batch", "2", "--seq-len", "32", "--lr", "1e-5", "--warmup", "0",
                          "--eval-every", "0", "--eval-batches", "1", "--sample-tokens", "0", "--progress-bar",
                          "off", "--no-final-checkpoint", "--out", (out / "run").string()}, 1);
  REQUIRE(cli.config.has_value());
  REQUIRE(dtr::train::run_training(*cli.config) == 0);

  const fs::path theirs = kFixture / "model.safetensors", ours = out / "hf" / "model.safetensors";
  const auto their_header = ckpt::read_safetensors_header(theirs), our_header = ckpt::read_safetensors_header(ours);
  REQUIRE(our_header.tensors.size() == their_header.tensors.size());
  double largest_change = 0;
  for (const auto& [name, entry] : their_header.tensors) {
    INFO(name);
    REQUIRE(our_header.tensors.contains(name));
    const auto want = values(theirs, their_header, name), got = values(ours, our_header, name);
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < got.size(); ++i) largest_change = std::max(largest_change, std::abs(got[i] - want[i]));
  }
  CHECK(largest_change > 0);
  CHECK(largest_change <= 1e-4);
  fs::remove_all(out);
}

TEST_CASE("dtr-train --init-from errors name the flag", "[train][hf][cli]") {
  const auto missing = parse_args({"--init-from", "/nonexistent/model"}, 1);
  REQUIRE_FALSE(missing.config.has_value());
  CHECK(missing.exit_code == 2);
  CHECK_THAT(missing.message, Catch::Contains("--init-from /nonexistent/model: no config.json there"));
  const auto both = parse_args({"--init-from", kFixture.string(), "--model", "small"}, 1);
  REQUIRE_FALSE(both.config.has_value());
  CHECK(both.exit_code == 2);
  CHECK_THAT(both.message, Catch::Contains("--model excludes --init-from"));
  const auto onto_out = parse_args({"--init-from", kFixture.string(), "--out", "runs/x", "--export-hf", "runs/x/"}, 1);
  REQUIRE_FALSE(onto_out.config.has_value());
  CHECK_THAT(onto_out.message, Catch::Contains("--export-hf runs/x/ is --out"));
}
