// Hugging Face import and export (dtr/checkpoint/hf_weights.h, hf_config.h) in one
// process, against models transformers made (tests/fixtures/hf/, written by
// scripts/hf_fixtures.py): a GPT-2 with a tied head, a Llama with grouped-query
// heads and its own head, and a tied Llama saved as sharded files. Loaded into
// nn::Transformer, each gives transformers' logits on the recorded tokens to 1e-5
// of the largest; exported again, every tensor of the file is bit for bit the one
// transformers wrote, and the config reads back the same. Configs dtr does not
// implement, and directories that do not match the model, fail naming what.
#include "dtr/base/error.h"
#include "dtr/checkpoint/hf_config.h"
#include "dtr/checkpoint/hf_weights.h"
#include "dtr/checkpoint/safetensors.h"
#include "dtr/nn/transformer.h"
#include "dtr/tensor/autograd/grad_mode.h"
#include "dtr/tensor/factory.h"

#include "tests/support/hf_fixture.h"

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

using namespace dtr;
namespace ckpt = dtr::checkpoint;
namespace fs = std::filesystem;

namespace {

using testing::recorded_logits;

const fs::path kFixtures = DTR_HF_FIXTURES;

std::shared_ptr<nn::Transformer> load_fixture(const std::string& fixture) {
  auto model = std::make_shared<nn::Transformer>(ckpt::read_hf_config(kFixtures / fixture));
  ckpt::load_hf_pretrained(*model, kFixtures / fixture);
  return model;
}

double logits_error(nn::Transformer& model, const testing::RecordedLogits& want) {
  autograd::NoGradGuard no_grad;
  return testing::relative_logits_error(model(want.tokens), want);
}

// Every tensor of a model directory's safetensors file(s), by name, as raw bytes.
std::map<std::string, std::vector<uint8_t>> tensors_in(const fs::path& dir) {
  std::map<std::string, std::vector<uint8_t>> out;
  for (const auto& file : fs::directory_iterator(dir)) {
    if (file.path().extension() != ".safetensors") continue;
    const auto header = ckpt::read_safetensors_header(file.path());
    for (const auto& [name, entry] : header.tensors) {
      Tensor t = ckpt::read_safetensors_tensor(file.path(), header, name).contiguous();
      std::vector<uint8_t> bytes(t.nbytes());
      std::memcpy(bytes.data(), t.raw_data(), bytes.size());
      out[name] = std::move(bytes);
    }
  }
  return out;
}

fs::path scratch(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("dtr_hf_test_{}_{}", ::getpid(), name);
  fs::remove_all(dir);
  return dir;
}

void write_config(const fs::path& dir, const nlohmann::json& config) {
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << config.dump();
}

nlohmann::json fixture_config(const std::string& fixture) {
  std::ifstream in(kFixtures / fixture / "config.json");
  return nlohmann::json::parse(in);
}

const char* const kFixtureNames[] = {"gpt2_tied", "llama_gqa", "llama_tied_sharded"};

}  // namespace

TEST_CASE("HF GPT-2 and Llama checkpoints load into nn::Transformer and give transformers' logits",
          "[checkpoint][hf]") {
  for (const char* fixture : kFixtureNames) {
    INFO(fixture);
    auto model = load_fixture(fixture);
    CHECK(logits_error(*model, recorded_logits(fixture)) <= 1e-5);
  }
}

TEST_CASE("HF configs map onto TransformerConfig", "[checkpoint][hf]") {
  const auto gpt2 = ckpt::read_hf_config(kFixtures / "gpt2_tied");
  CHECK(gpt2.style == nn::TransformerStyle::gpt2);
  CHECK((gpt2.vocab_size == 61 && gpt2.dim == 24 && gpt2.n_layers == 2 && gpt2.n_heads == 3));
  CHECK((gpt2.max_seq_len == 16 && gpt2.hidden() == 96 && gpt2.tie_weights));
  const auto llama = ckpt::read_hf_config(kFixtures / "llama_gqa");
  CHECK(llama.style == nn::TransformerStyle::llama);
  CHECK((llama.vocab_size == 53 && llama.dim == 32 && llama.n_heads == 4 && llama.kv_heads() == 2));
  CHECK((llama.hidden() == 40 && !llama.tie_weights && llama.norm_eps == 1e-5));
  const auto tied = ckpt::read_hf_config(kFixtures / "llama_tied_sharded");
  CHECK((tied.tie_weights && tied.rope_theta == 500.0 && tied.n_layers == 3 && tied.norm_eps == 1e-6));
}

TEST_CASE("export writes transformers' files back bit for bit, and they import again", "[checkpoint][hf]") {
  for (const char* fixture : kFixtureNames) {
    INFO(fixture);
    auto model = load_fixture(fixture);
    const fs::path out = scratch(fixture);
    ckpt::save_hf_pretrained(*model, out);
    auto exported = tensors_in(out);
    auto original = tensors_in(kFixtures / fixture);
    const auto config = ckpt::read_hf_config(kFixtures / fixture);
    if (config.tie_weights) original.erase("lm_head.weight");  // a tied head is the embedding
    REQUIRE(exported.size() == original.size());
    for (const auto& [name, bytes] : original) {
      INFO(name);
      REQUIRE(exported.contains(name));
      CHECK(exported.at(name) == bytes);
    }
    const auto reread = ckpt::read_hf_config(out);
    CHECK((reread.style == config.style && reread.dim == config.dim && reread.hidden() == config.hidden() &&
           reread.kv_heads() == config.kv_heads() && reread.tie_weights == config.tie_weights &&
           reread.norm_eps == config.norm_eps && reread.rope_theta == config.rope_theta));
    auto again = std::make_shared<nn::Transformer>(reread);
    ckpt::load_hf_pretrained(*again, out);
    CHECK(logits_error(*again, recorded_logits(fixture)) <= 1e-5);
    fs::remove_all(out);
  }
}

TEST_CASE("saving over a sharded save replaces it: the index and its files go", "[checkpoint][hf]") {
  const fs::path dir = scratch("over_sharded");
  fs::copy(kFixtures / "llama_tied_sharded", dir);
  REQUIRE(fs::exists(dir / "model.safetensors.index.json"));
  auto model = load_fixture("llama_tied_sharded");
  ckpt::save_hf_pretrained(*model, dir);
  std::vector<std::string> files;
  for (const auto& f : fs::directory_iterator(dir)) files.push_back(f.path().filename().string());
  std::sort(files.begin(), files.end());
  CHECK(files == std::vector<std::string>{"config.json", "logits.json", "model.safetensors"});
  auto again = std::make_shared<nn::Transformer>(ckpt::read_hf_config(dir));
  ckpt::load_hf_pretrained(*again, dir);
  CHECK(logits_error(*again, recorded_logits("llama_tied_sharded")) <= 1e-5);
  fs::remove_all(dir);
}

TEST_CASE("HF configs dtr does not implement are refused by key", "[checkpoint][hf]") {
  const fs::path dir = scratch("configs");
  auto refused = [&](nlohmann::json config) {
    write_config(dir, config);
    try {
      ckpt::read_hf_config(dir);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  auto llama = fixture_config("llama_gqa");
  auto with = [](nlohmann::json c, const std::string& key, nlohmann::json value) {
    c[key] = std::move(value);
    return c;
  };
  CHECK_THAT(refused(with(llama, "rope_scaling", {{"type", "linear"}, {"factor", 2.0}})),
             Catch::Contains("'rope_scaling'") && Catch::Contains("not supported"));
  CHECK_THAT(refused(with(llama, "rope_parameters", {{"rope_type", "yarn"}, {"factor", 4.0}})),
             Catch::Contains("rope_type \"yarn\" is not supported"));
  CHECK_THAT(refused(with(llama, "attention_bias", true)), Catch::Contains("'attention_bias' = true is not supported"));
  CHECK_THAT(refused(with(llama, "hidden_act", "gelu")), Catch::Contains("'hidden_act' = \"gelu\" is not supported"));
  CHECK_THAT(refused(with(llama, "head_dim", 16)), Catch::Contains("'head_dim' = 16 is not supported"));
  CHECK_THAT(refused(with(llama, "model_type", "mistral")), Catch::Contains("model_type \"mistral\" is not supported"));
  auto gpt2 = fixture_config("gpt2_tied");
  CHECK_THAT(refused(with(gpt2, "activation_function", "relu")),
             Catch::Contains("'activation_function' = \"relu\" is not supported"));
  CHECK_THAT(refused(with(gpt2, "scale_attn_by_inverse_layer_idx", true)),
             Catch::Contains("'scale_attn_by_inverse_layer_idx' = true is not supported"));
  gpt2.erase("n_embd");
  CHECK_THAT(refused(gpt2), Catch::Contains("the config has no 'n_embd'"));
  fs::remove_all(dir);
}

TEST_CASE("load_hf_pretrained names a model that does not match and tensors missing or extra",
          "[checkpoint][hf]") {
  auto config = ckpt::read_hf_config(kFixtures / "llama_gqa");
  config.n_layers = 3;
  nn::Transformer deeper(config);
  CHECK_THROWS_WITH(ckpt::load_hf_pretrained(deeper, kFixtures / "llama_gqa"),
                    Catch::Contains("the model is llama vocab 53 dim 32 layers 3") &&
                        Catch::Contains("config.json llama vocab 53 dim 32 layers 2"));

  // A copy of the GPT-2 fixture whose file lacks one tensor and has one dtr does not know.
  const fs::path dir = scratch("tensors");
  fs::create_directories(dir);
  fs::copy_file(kFixtures / "gpt2_tied" / "config.json", dir / "config.json");
  const fs::path original = kFixtures / "gpt2_tied" / "model.safetensors";
  const auto header = ckpt::read_safetensors_header(original);
  std::vector<ckpt::SafetensorsWriter::Entry> entries;
  for (const auto& [name, entry] : header.tensors) {
    if (name != "transformer.ln_f.bias") entries.push_back({name, entry.dtype, entry.shape});
  }
  entries.push_back({"transformer.h.0.attn.rotary.weight", DType::f32, {2}});
  {
    ckpt::SafetensorsWriter writer(dir / "model.safetensors", entries);
    for (const auto& e : entries) {
      writer.write(e.name, e.name.find("rotary") != std::string::npos
                               ? zeros({2})
                               : ckpt::read_safetensors_tensor(original, header, e.name));
    }
    writer.finish();
  }
  nn::Transformer gpt2(ckpt::read_hf_config(dir));
  CHECK_THROWS_WITH(ckpt::load_hf_pretrained(gpt2, dir),
                    Catch::Contains("missing tensors [transformer.ln_f.bias]") &&
                        Catch::Contains("tensors the model does not have [transformer.h.0.attn.rotary.weight]"));
  fs::remove(dir / "model.safetensors");
  CHECK_THROWS_WITH(ckpt::load_hf_pretrained(gpt2, dir),
                    Catch::Contains("has neither model.safetensors nor model.safetensors.index.json"));
  fs::remove_all(dir);
}
