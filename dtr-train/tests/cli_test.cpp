// dtr-train's command line (dtr-train/cli.h): defaults resolve (gradient
// accumulation, warmup, min lr, the final checkpoint), the flags with a fixed set
// of values parse into their enums (recorded by name in config.json), and each bad
// value gives exit code 2 with one line naming its flag.
#include "cli.h"
#include "parse_args.h"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

using dtr::train::testing::parse_args;

namespace {

void expect_bad(std::vector<std::string> args, const std::string& flag, int world = 2) {
  INFO("args: " << Catch::StringMaker<std::vector<std::string>>::convert(args));
  const auto r = parse_args(std::move(args), world);
  REQUIRE_FALSE(r.config.has_value());
  REQUIRE(r.exit_code == 2);
  CHECK_THAT(r.message, Catch::Contains(flag));
  CHECK(r.message.find('\n') == std::string::npos);
}

}  // namespace

TEST_CASE("dtr-train flags resolve gradient accumulation, warmup and min lr", "[train][cli]") {
  const auto r = parse_args({"--global-batch", "32", "--micro-batch", "4", "--steps", "200", "--lr", "1e-3"}, 2);
  REQUIRE(r.config.has_value());
  REQUIRE(r.config->grad_accum == 4);  // 32 / (2 * 4)
  REQUIRE(r.config->warmup == 10);
  REQUIRE(r.config->min_lr == Approx(1e-4));
  const auto d = parse_args({}, 4);
  REQUIRE(d.config.has_value());
  REQUIRE(d.config->micro_batch == 4);  // 16 / 4 ranks
  REQUIRE(d.config->grad_accum == 1);
  REQUIRE(d.config->on_nonfinite == dtr::train::OnNonfinite::stop);  // a non-finite step ends the run
  const auto flags = parse_args({"--activation-checkpointing", "on", "--reshard-after-forward", "false",
                            "--mixed-precision", "bf16"});
  REQUIRE(flags.config.has_value());
  REQUIRE(flags.config->activation_checkpointing);
  REQUIRE_FALSE(flags.config->reshard_after_forward);
  REQUIRE(flags.config->mixed_precision == dtr::train::MixedPrecision::bf16);
  REQUIRE(flags.config->final_checkpoint);  // on unless asked otherwise
  const auto no_final = parse_args({"--no-final-checkpoint"});
  REQUIRE(no_final.config.has_value());
  REQUIRE_FALSE(no_final.config->final_checkpoint);
  const auto help = parse_args({"--help"});
  REQUIRE_FALSE(help.config.has_value());
  REQUIRE(help.exit_code == 0);
  CHECK_THAT(help.message, Catch::Contains("--global-batch") && Catch::Contains("--reshard-after-forward") &&
                               Catch::Contains("--no-final-checkpoint"));
}

TEST_CASE("dtr-train bad flags give exit code 2 and one line naming the flag", "[train][cli]") {
  expect_bad({"--steps", "-3"}, "--steps");
  expect_bad({"--steps", "0"}, "--steps");
  expect_bad({"--steps", "many"}, "--steps");
  expect_bad({"--on-nonfinite", "ignore"}, "--on-nonfinite");
  expect_bad({"--data", "/tmp"}, "--data: /tmp is a directory");
  expect_bad({"--global-batch", "10", "--micro-batch", "4"}, "--global-batch");
  expect_bad({"--global-batch", "9"}, "--global-batch", 2);
  expect_bad({"--model", "huge"}, "--model");
  expect_bad({"--data", "/no/such/dir/file.txt"}, "--data");
  expect_bad({"--schedule", "step"}, "--schedule");
  expect_bad({"--mixed-precision", "fp16"}, "--mixed-precision");
  expect_bad({"--activation-checkpointing", "sometimes"}, "--activation-checkpointing");
  expect_bad({"--reshard-after-forward", "2"}, "--reshard-after-forward");
  expect_bad({"--warmup", "500", "--steps", "100"}, "--warmup");
  expect_bad({"--lr", "0"}, "--lr");
  expect_bad({"--log-every", "0"}, "--log-every");
  expect_bad({"--bogus", "1"}, "--bogus");
}

TEST_CASE("dtr-train flags with a fixed set of values parse into their enums once", "[train][cli]") {
  using namespace dtr::train;
  const auto d = parse_args({});
  REQUIRE(d.config.has_value());
  CHECK(d.config->model.preset == ModelPreset::tiny);
  CHECK(d.config->data_format == DataFormat::by_extension);
  CHECK(d.config->schedule == Schedule::cosine);
  CHECK(d.config->mixed_precision == MixedPrecision::none);
  CHECK(d.config->device == ComputeDevice::cpu);
  CHECK(d.config->progress_bar == ProgressBar::if_terminal);
  const auto r = parse_args({"--model", "gpt2-124m", "--data-format", "llmc", "--schedule", "constant", "--on-nonfinite",
                        "skip", "--progress-bar", "off"});
  REQUIRE(r.config.has_value());
  CHECK(r.config->model.preset == ModelPreset::gpt2_124m);
  CHECK(r.config->data_format == DataFormat::llmc);
  CHECK(r.config->schedule == Schedule::constant);
  CHECK(r.config->on_nonfinite == OnNonfinite::skip);
  CHECK(r.config->progress_bar == ProgressBar::off);
  // config.json and checkpoints record the names the flags take.
  const nlohmann::json j = to_json(*r.config);
  CHECK(j["model"] == "gpt2-124m");
  CHECK(j["data_format"] == "llmc");
  CHECK(j["schedule"] == "constant");
  CHECK(j["on_nonfinite"] == "skip");
  CHECK(j["mixed_precision"] == "none");
  CHECK(j["device"] == "cpu");
  CHECK(j["progress_bar"] == "off");
  CHECK(to_json(*d.config)["progress_bar"] == "auto");
  // A bad value names the flag and every accepted value.
  expect_bad({"--data-format", "parquet"}, "--data-format must be auto, bytes or llmc, got 'parquet'");
  expect_bad({"--progress-bar", "sometimes"}, "--progress-bar must be auto, on or off, got 'sometimes'");
  expect_bad({"--device", "gpu"}, "--device must be cpu or cuda, got 'gpu'");
  expect_bad({"--model", "huge"},
             "--model: unknown model 'huge' (expected tiny, small, gpt2-124m, llama-7b or a JSON config file)");
}
