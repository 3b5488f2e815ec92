// dtr-train's command line (dtr-train/cli.h): defaults resolve (gradient
// accumulation, warmup, min lr, the final checkpoint), the flags with a fixed set
// of values parse into their enums (recorded by name in config.json), each bad
// value gives exit code 2 with one line naming its flag, and every number flag
// refuses values out of its type's range, not finite or outside its own range.
// Also the --progress-bar auto decision (dtr-train/terminal.h).
#include "cli.h"
#include "parse_args.h"
#include "terminal.h"

#include <catch2/catch.hpp>

#include <sys/sysmacros.h>

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
  expect_bad({"--reshard-after-forward", "2"}, "--reshard-after-forward must be true, false or host, got '2'");
  const auto host = parse_args({"--reshard-after-forward", "host"});
  REQUIRE(host.config.has_value());
  CHECK(host.config->reshard_after_forward);
  CHECK(host.config->reshard_to_host);
  expect_bad({"--reshard-after-forward", "host", "--estimate-only"},
             "--estimate-only does not model --reshard-after-forward host");
  const auto quantized = parse_args({"--quantize-weights", "--quantize-grads", "4"});
  REQUIRE(quantized.config.has_value());
  CHECK(quantized.config->quantize_weights);
  CHECK(quantized.config->quantize_grads == 4);
  expect_bad({"--quantize-grads", "6"}, "--quantize-grads must be 8 or 4 (bits per value), got 6");
  expect_bad({"--quantize-grads", "16"}, "--quantize-grads");
  expect_bad({"--quantize-weights", "--estimate-only"}, "--estimate-only does not model --quantize-weights");
  expect_bad({"--warmup", "500", "--steps", "100"}, "--warmup");
  expect_bad({"--lr", "0"}, "--lr");
  expect_bad({"--log-every", "0"}, "--log-every");
  expect_bad({"--bogus", "1"}, "--bogus");
}

TEST_CASE("dtr-train --tp divides the batch by the data-parallel ranks", "[train][cli]") {
  const auto r = parse_args({"--tp", "2", "--global-batch", "16"}, 4);
  REQUIRE(r.config.has_value());
  CHECK(r.config->tp == 2);
  CHECK(r.config->data_parallel == 2);
  CHECK(r.config->micro_batch == 8);  // 16 / (4 ranks / --tp 2)
  CHECK(r.config->grad_accum == 1);
  expect_bad({"--tp", "3"}, "--tp 3 does not divide the 4 ranks", 4);
  expect_bad({"--tp", "2", "--global-batch", "6", "--micro-batch", "2"},
             "--global-batch 6 is not divisible by data-parallel ranks (2: 4 / --tp 2) x --micro-batch (2)", 4);
  expect_bad({"--tp", "4", "--global-batch", "5"}, "--global-batch 5 is not divisible by the number of data-parallel "
             "ranks (2: 8 / --tp 4)", 8);
  expect_bad({"--tp", "0"}, "--tp must be", 4);
  const auto split = parse_args({"--tp", "2", "--sequence-parallel", "--loss-parallel"}, 2);
  REQUIRE(split.config.has_value());
  CHECK(split.config->sequence_parallel);
  CHECK(split.config->loss_parallel);
  CHECK_FALSE(r.config->sequence_parallel);
  CHECK_FALSE(r.config->loss_parallel);
  expect_bad({"--sequence-parallel"}, "--sequence-parallel splits the model over tensor-parallel ranks: it needs --tp 2",
             4);
  expect_bad({"--tp", "1", "--loss-parallel"}, "--loss-parallel splits the model over tensor-parallel ranks", 4);
  expect_bad({"--tp", "3", "--estimate-only", "--world-size", "8"}, "--tp 3 does not divide the 8 ranks", 1);
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

TEST_CASE("dtr-train number flags refuse values out of range, not finite or not numbers, naming flag and value",
          "[train][cli]") {
  // Each flag: values it refuses (overflow of its type, outside its own range, not a
  // number of its kind, not finite). The message names the flag and the value as typed.
  const std::vector<std::pair<std::string, std::vector<std::string>>> refused = {
      {"--steps", {"99999999999999999999999", "9223372036854775808", "0", "-1", "10x", "1e3", "1.5", "", " 10", "0x10"}},
      {"--global-batch", {"99999999999999999999999", "0", "-16"}},
      {"--micro-batch", {"99999999999999999999999", "-1"}},
      {"--seq-len", {"99999999999999999999999", "-64"}},
      {"--warmup", {"99999999999999999999999", "-99999999999999999999999", "5.5"}},
      {"--seed", {"-1", "18446744073709551616", "99999999999999999999999", "1234x"}},
      {"--eval-every", {"99999999999999999999999", "-1"}},
      {"--eval-batches", {"99999999999999999999999", "0"}},
      {"--log-every", {"99999999999999999999999", "0"}},
      {"--ckpt-every", {"99999999999999999999999", "-1"}},
      {"--sample-tokens", {"99999999999999999999999", "-1"}},
      {"--top-k", {"99999999999999999999999", "-1"}},
      {"--world-size", {"2147483648", "4294967298", "99999999999999999999999", "-1"}},
      {"--val-fraction", {"inf", "-inf", "nan", "0", "0.6", "1", "-0.1", "1e999"}},
      {"--lr", {"inf", "-inf", "nan", "0", "-1e-3", "1e999", "3e-3x"}},
      {"--min-lr", {"inf", "-inf", "nan", "1e999"}},
      {"--weight-decay", {"inf", "-inf", "nan", "-0.1"}},
      {"--grad-clip", {"inf", "-inf", "nan", "-1"}},
      {"--peak-tflops", {"inf", "-inf", "nan", "0", "-989"}},
      {"--temperature", {"inf", "-inf", "nan", "0", "-1"}},
  };
  for (const auto& [flag, values] : refused) {
    for (const std::string& value : values) {
      // Both spellings, "--flag value" and "--flag=value".
      expect_bad({flag, value, "--estimate-only"}, flag + " must be ");
      expect_bad({flag + "=" + value, "--estimate-only"}, flag + " must be ");
      CHECK_THAT(parse_args({flag, value}).message, Catch::EndsWith(", got '" + value + "'"));
    }
  }
  // What the messages say.
  expect_bad({"--steps", "99999999999999999999999"},
             "--steps must be an integer from 1 to 9223372036854775807, got '99999999999999999999999'");
  expect_bad({"--seed", "-1"}, "--seed must be an integer from 0 to 18446744073709551615, got '-1'");
  expect_bad({"--lr", "inf"}, "--lr must be a finite number > 0, got 'inf'");
  expect_bad({"--grad-clip", "nan"}, "--grad-clip must be a finite number >= 0, got 'nan'");
  expect_bad({"--val-fraction", "0.7"}, "--val-fraction must be a number in (0, 0.5], got '0.7'");
  expect_bad({"--min-lr", "-inf"}, "--min-lr must be a finite number, got '-inf'");
}

TEST_CASE("dtr-train number flags store exactly the value checked, at the ends of their ranges", "[train][cli]") {
  const auto r = parse_args({"--steps", "9223372036854775807", "--seed", "18446744073709551615", "--lr", "0.003",
                             "--val-fraction", "0.5", "--weight-decay", "0", "--grad-clip", "0", "--min-lr", "-1e-300",
                             "--warmup", "-9223372036854775808", "--temperature", "4.9e-324", "--top-k", "+5",
                             "--world-size", "2147483647", "--estimate-only"});
  REQUIRE(r.config.has_value());
  CHECK(r.config->steps == INT64_MAX);
  CHECK(r.config->seed == UINT64_MAX);
  CHECK(r.config->lr == 0.003);  // exact: the same double as the literal
  CHECK(r.config->val_fraction == 0.5);
  CHECK(r.config->weight_decay == 0);
  CHECK(r.config->grad_clip == 0);
  CHECK(r.config->min_lr == 0.003 / 10);  // negative: lr / 10
  CHECK(r.config->warmup == INT64_MAX / 20);  // negative: 5% of the steps
  CHECK(r.config->temperature == 4.9e-324);
  CHECK(r.config->top_k == 5);
  CHECK(r.config->plan_world_size == 2147483647);
  // Decimal, as Python's int() reads it: CLI11 alone would read "010" as octal 8.
  const auto leading_zero = parse_args({"--steps", "010", "--log-every", "08"});
  REQUIRE(leading_zero.config.has_value());
  CHECK(leading_zero.config->steps == 10);
  CHECK(leading_zero.config->log_every == 8);
  // --micro-batch larger than the global batch: refused, not an overflowing ranks x micro-batch.
  expect_bad({"--micro-batch", "4611686018427387904"},
             "--global-batch 16 is not divisible by ranks (2) x --micro-batch");
  const auto planned = parse_args({"--micro-batch", "4611686018427387904", "--estimate-only"});
  REQUIRE(planned.config.has_value());
  CHECK(planned.config->grad_accum == 1);
}

TEST_CASE("progress bar: auto draws the bar only when the output ends on a terminal", "[train][cli]") {
  using dtr::train::ProgressBar;
  using dtr::train::shows_progress_bar;
  using dtr::train::StdoutFacts;
  // Alone: stdout decides.
  CHECK(shows_progress_bar(ProgressBar::if_terminal, {.is_terminal = true}));
  CHECK_FALSE(shows_progress_bar(ProgressBar::if_terminal, {.is_terminal = false}));
  // Under mpirun the rank's stdout is a pseudo-terminal whatever mpirun's stdout is:
  // mpirun's decides.
  CHECK(shows_progress_bar(ProgressBar::if_terminal,
                           {.is_terminal = true, .under_launcher = true, .launcher_on_terminal = true}));
  CHECK_FALSE(shows_progress_bar(ProgressBar::if_terminal,
                                 {.is_terminal = true, .under_launcher = true, .launcher_on_terminal = false}));
  CHECK_FALSE(shows_progress_bar(ProgressBar::if_terminal,
                                 {.is_terminal = false, .under_launcher = true, .launcher_on_terminal = true}));
  // on and off whatever the output.
  for (const bool terminal : {false, true}) {
    for (const bool launcher : {false, true}) {
      const StdoutFacts facts{.is_terminal = terminal, .under_launcher = launcher, .launcher_on_terminal = terminal};
      CHECK(shows_progress_bar(ProgressBar::on, facts));
      CHECK_FALSE(shows_progress_bar(ProgressBar::off, facts));
    }
  }
  // Terminal devices by number: /dev/pts/N, consoles and serial ports, /dev/tty and
  // /dev/console; not /dev/null, /dev/zero or /dev/ptmx.
  using dtr::train::is_terminal_device;
  CHECK(is_terminal_device(makedev(136, 0)));
  CHECK(is_terminal_device(makedev(143, 1048575)));
  CHECK(is_terminal_device(makedev(4, 1)));
  CHECK(is_terminal_device(makedev(5, 0)));
  CHECK(is_terminal_device(makedev(5, 1)));
  CHECK_FALSE(is_terminal_device(makedev(1, 3)));
  CHECK_FALSE(is_terminal_device(makedev(1, 5)));
  CHECK_FALSE(is_terminal_device(makedev(5, 2)));
  CHECK_FALSE(is_terminal_device(makedev(8, 0)));
}
