// dtr-train's model files (dtr-train/config.h): a valid file gives exactly
// its values; a value of the wrong type or outside its range is an error naming
// the field and the value, never silently changed (-5 for ffn_hidden used to
// become the default, 128.9 for dim became 128, a negative norm_eps trained NaN).
#include "config.h"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>

#include <unistd.h>

namespace {

std::string write_model_file(const std::string& json) {
  static int count = 0;
  const auto path = std::filesystem::temp_directory_path() /
                    ("dtr_config_test_" + std::to_string(::getpid()) + "_" + std::to_string(count++) + ".json");
  std::ofstream(path) << json;
  return path.string();
}

std::string error_of(const std::string& json) {
  const std::string path = write_model_file(json);
  try {
    dtr::train::model_config(path, 256);
  } catch (const std::invalid_argument& e) {
    std::filesystem::remove(path);
    return e.what();
  }
  std::filesystem::remove(path);
  return "";
}

}  // namespace

TEST_CASE("a model file gives exactly its values", "[train][config]") {
  const std::string path = write_model_file(
      R"({"style": "gpt2", "dim": 64, "n_layers": 3, "n_heads": 4, "n_kv_heads": 2, "ffn_hidden": 96,
          "max_seq_len": 32, "vocab_size": 300, "tie_weights": true, "dropout": 0.1, "norm_eps": 1e-6,
          "rope_theta": 500.0})");
  const dtr::nn::TransformerConfig c = dtr::train::model_config(path, 256);
  std::filesystem::remove(path);
  CHECK(c.style == dtr::nn::TransformerStyle::gpt2);
  CHECK(c.dim == 64);
  CHECK(c.n_layers == 3);
  CHECK(c.n_heads == 4);
  CHECK(c.n_kv_heads == 2);
  CHECK(c.ffn_hidden == 96);
  CHECK(c.max_seq_len == 32);
  CHECK(c.vocab_size == 300);
  CHECK(c.tie_weights);
  CHECK(c.dropout == 0.1);
  CHECK(c.norm_eps == 1e-6);
  CHECK(c.rope_theta == 500.0);
}

TEST_CASE("a model file value of the wrong type or range is an error naming the field", "[train][config]") {
  struct Case {
    const char* json;
    const char* expected;
  };
  for (const Case& c : {
           Case{R"({"ffn_hidden": -5})", "'ffn_hidden' must be an integer >= 0 (0: the style's default), got -5"},
           Case{R"({"dim": 128.9})", "'dim' must be an integer >= 1, got 128.9"},
           Case{R"({"dim": 0})", "'dim' must be an integer >= 1, got 0"},
           Case{R"({"n_layers": "4"})", "'n_layers' must be an integer >= 1, got \"4\""},
           Case{R"({"n_kv_heads": -1})", "'n_kv_heads' must be an integer >= 0 (0: as many as n_heads), got -1"},
           Case{R"({"max_seq_len": 18446744073709551615})", "'max_seq_len' must be an integer >= 1"},
           Case{R"({"norm_eps": -1})", "'norm_eps' must be a number > 0, got -1"},
           Case{R"({"norm_eps": 0})", "'norm_eps' must be a number > 0, got 0"},
           Case{R"({"rope_theta": "big"})", "'rope_theta' must be a number > 0, got \"big\""},
           Case{R"({"dropout": 1.0})", "'dropout' must be a number in [0, 1), got 1.0"},
           Case{R"({"dropout": -0.1})", "'dropout' must be a number in [0, 1), got -0.1"},
           Case{R"({"tie_weights": 1})", "'tie_weights' must be true or false, got 1"},
           Case{R"({"style": "bert"})", "'style' must be \"llama\" or \"gpt2\", got \"bert\""},
           Case{R"({"style": 1})", "'style' must be \"llama\" or \"gpt2\", got 1"},
       }) {
    INFO(c.json);
    const std::string error = error_of(c.json);
    CHECK_THAT(error, Catch::Contains(c.expected));
    CHECK_THAT(error, Catch::StartsWith("model file "));
  }
}
