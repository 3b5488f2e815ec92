// safetensors export and import (dtr/checkpoint/safetensors.h) at world sizes
// 1-4: a sharded model's export imports bit for bit into a plain model and a
// differently sharded one; the file is checked by an independent reader written
// here (8-byte length, JSON header, contiguous offsets covering the data,
// values); a pretrained file (written here, bf16) initialises a sharded model
// with each rank reading its own rows; malformed files fail naming the file.
//
// The hidden test [ckpt_consolidated] checks the output of
// `dtr-ckpt consolidate` on the reference checkpoint (tests/CMakeLists.txt).
#include "dtr/checkpoint/full_state_dict.h"
#include "dtr/checkpoint/safetensors.h"
#include "dtr/dtensor/dtensor.h"
#include "dtr/fsdp/fully_shard.h"
#include "dtr/mesh/distributed.h"
#include "tests/support/mpi_test_util.h"
#include "dtr/nn/optim/adamw.h"
#include "dtr/nn/transformer.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/elementwise.h"

#include "tests/support/tiny_transformer.h"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

using namespace dtr;
namespace ckpt = dtr::checkpoint;
namespace fs = std::filesystem;
using dtr::testing::world;

using dtr::testing::make_model;
using dtr::testing::make_sharded;
using dtr::testing::tiny_config;

using dtr::testing::bytes_of;

namespace {

void require_same_tensors(const nn::StateDict& got, const nn::StateDict& want) {
  REQUIRE(got.size() == want.size());
  for (const auto& [name, t] : want) {
    INFO(name);
    REQUIRE(got.contains(name));
    REQUIRE(bytes_of(got.at(name)) == bytes_of(t));
  }
}

fs::path test_file(const std::string& name) {
  fs::path dir = fs::current_path() / "safetensors_tests";
  if (distributed::rank() == 0) fs::create_directories(dir);
  world()->barrier()->wait();
  return dir / fmt::format("{}_np{}.safetensors", name, distributed::world_size());
}

const ckpt::StateDictOptions kFullOnCpu{.full_state_dict = true, .cpu_offload = true};

// An independent safetensors reader: only the format's definition, nlohmann and
// std::ifstream. Returns the tensors' raw bytes by name and checks the layout.
struct Parsed {
  nlohmann::json header;
  std::map<std::string, std::vector<uint8_t>> data;
};

Parsed parse_independently(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  std::vector<uint8_t> all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  REQUIRE(all.size() >= 8);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | all[static_cast<size_t>(i)];  // little-endian
  REQUIRE(8 + n <= all.size());
  Parsed p;
  p.header = nlohmann::json::parse(std::string(all.begin() + 8, all.begin() + 8 + static_cast<int64_t>(n)));
  REQUIRE(p.header.is_object());
  const size_t data_start = 8 + n;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  const std::map<std::string, size_t> esize{{"F32", 4}, {"F64", 8}, {"BF16", 2}, {"F16", 2},
                                            {"I32", 4}, {"I64", 8}, {"U8", 1}};
  for (const auto& [name, v] : p.header.items()) {
    if (name == "__metadata__") {
      for (const auto& [k, s] : v.items()) REQUIRE(s.is_string());
      continue;
    }
    INFO(name);
    REQUIRE(esize.contains(v.at("dtype").get<std::string>()));
    uint64_t numel = 1;
    for (const auto& d : v.at("shape")) numel *= d.get<uint64_t>();
    const auto off = v.at("data_offsets").get<std::vector<uint64_t>>();
    REQUIRE(off.size() == 2);
    REQUIRE(off[1] - off[0] == numel * esize.at(v.at("dtype").get<std::string>()));
    ranges.emplace_back(off[0], off[1]);
    p.data[name] = std::vector<uint8_t>(all.begin() + static_cast<int64_t>(data_start + off[0]),
                                        all.begin() + static_cast<int64_t>(data_start + off[1]));
  }
  std::sort(ranges.begin(), ranges.end());
  uint64_t at = 0;
  for (const auto& [b, e] : ranges) {
    REQUIRE(b == at);  // contiguous, no gap, no overlap
    at = e;
  }
  REQUIRE(data_start + at == all.size());  // the tensors cover the data exactly
  return p;
}

// The meshes the exported models are sharded over: all ranks, and 2x2 HSDP at 4 ranks.
std::vector<mesh::DeviceMesh> sharding_meshes() {
  std::vector<mesh::DeviceMesh> out{mesh::DeviceMesh{}};
  if (distributed::world_size() == 4) {
    out.push_back(mesh::init_device_mesh(DeviceType::cpu, {2, 2}, {"replicate", "shard"}));
  }
  return out;
}

}  // namespace

TEST_CASE("safetensors export of a sharded model imports bit for bit into plain and differently sharded models") {
  const auto want = make_model(5)->state_dict();
  const fs::path file = test_file("roundtrip");
  auto model = make_sharded(5);
  ckpt::save_safetensors(*model, file, {{"step", "42"}});
  REQUIRE(fs::exists(file));
  REQUIRE_FALSE(fs::exists(file.string() + ".tmp"));

  auto header = ckpt::read_safetensors_header(file);
  REQUIRE(header.metadata.at("step") == "42");
  REQUIRE(header.tensors.size() == want.size());

  auto plain = make_model(6);
  ckpt::load_safetensors(*plain, file);
  require_same_tensors(plain->state_dict(), want);

  for (const auto& mesh : sharding_meshes()) {
    auto other = make_sharded(7, mesh);
    ckpt::load_safetensors(*other, file);
    require_same_tensors(ckpt::get_model_state_dict(*other, kFullOnCpu), want);
  }
  // Exported from an unsharded model: the same bytes.
  const fs::path file2 = test_file("roundtrip_plain");
  ckpt::save_safetensors(*make_model(5), file2, {{"step", "42"}});
  if (distributed::rank() == 0) {
    std::ifstream a(file, std::ios::binary), b(file2, std::ios::binary);
    std::string sa((std::istreambuf_iterator<char>(a)), {}), sb((std::istreambuf_iterator<char>(b)), {});
    REQUIRE(sa == sb);
  }
}

TEST_CASE("safetensors file written here is read by an independent parser with the model's names and values") {
  const auto want = make_model(8)->state_dict();
  const fs::path file = test_file("independent");
  ckpt::save_safetensors(*make_sharded(8), file, {{"producer", "dtr"}});
  if (distributed::rank() == 0) {
    Parsed p = parse_independently(file);
    REQUIRE(p.header.at("__metadata__").at("producer") == "dtr");
    REQUIRE(p.data.size() == want.size());
    for (const auto& [name, t] : want) {
      INFO(name);
      REQUIRE(p.data.contains(name));  // PyTorch-style dotted fqn
      REQUIRE(p.header.at(name).at("dtype") == "F32");
      REQUIRE(p.header.at(name).at("shape").get<Shape>() == t.sizes());
      REQUIRE(p.data.at(name) == bytes_of(t));
    }
    REQUIRE(p.data.contains("layers.0.attn.wq.weight"));
  }
  world()->barrier()->wait();
}

TEST_CASE("safetensors pretrained file in bf16 initialises a sharded model, each rank reading its rows") {
  auto source = make_model(9);
  const fs::path file = test_file("pretrained_bf16");
  // A "pretrained" file from elsewhere: bf16, written directly, in reverse name order.
  if (distributed::rank() == 0) {
    auto named = source->named_parameters();
    std::vector<ckpt::SafetensorsWriter::Entry> entries;
    for (auto it = named.rbegin(); it != named.rend(); ++it) {
      entries.push_back({it->first, DType::bf16, it->second->sizes()});
    }
    ckpt::SafetensorsWriter writer(file, entries);
    for (auto it = named.rbegin(); it != named.rend(); ++it) {
      writer.write(it->first, it->second->detach().to(DType::bf16));
    }
    writer.finish();
  }
  world()->barrier()->wait();
  for (const auto& mesh : sharding_meshes()) {
    auto model = make_sharded(10, mesh);
    ckpt::load_safetensors(*model, file);
    auto got = ckpt::get_model_state_dict(*model, kFullOnCpu);
    for (auto& [name, p] : source->named_parameters()) {
      INFO(name);
      REQUIRE(bytes_of(got.at(name)) == bytes_of(p->detach().to(DType::bf16).to(DType::f32)));
    }
  }
  // read_safetensors_box reads exactly a box of rows and columns.
  auto header = ckpt::read_safetensors_header(file);
  const std::string name = "layers.0.attn.wq.weight";
  Tensor full = ckpt::read_safetensors_tensor(file, header, name);
  Tensor part = ckpt::read_safetensors_box(file, header, name, ckpt::Box{{3, 2}, {5, 7}});
  REQUIRE(bytes_of(part) == bytes_of(full.narrow(0, 3, 5).narrow(1, 2, 7)));
}

TEST_CASE("safetensors malformed, truncated or mismatched files fail naming the file and the tensor") {
  const fs::path good = test_file("good");
  auto model = make_sharded(12);
  ckpt::save_safetensors(*model, good);
  fs::path bad;
  int variant = 0;
  // A mutated copy of `good`, in a new file each time (other ranks may still read the previous one).
  auto write_bad = [&](auto&& mutate) {
    bad = test_file(fmt::format("bad{}", variant++));
    if (distributed::rank() == 0) {
      std::ifstream in(good, std::ios::binary);
      std::string s((std::istreambuf_iterator<char>(in)), {});
      mutate(s);
      std::ofstream(bad, std::ios::binary | std::ios::trunc) << s;
    }
    world()->barrier()->wait();
  };
  write_bad([](std::string& s) { s.resize(s.size() - 4); });
  REQUIRE_THROWS_WITH(ckpt::read_safetensors_header(bad),
                      Catch::Contains(bad.string()) && Catch::Contains("truncated"));
  REQUIRE_THROWS_WITH(ckpt::load_safetensors(*model, bad), Catch::Contains(bad.string()));
  write_bad([](std::string& s) { s[0] = static_cast<char>(0xff), s[5] = 1; });
  REQUIRE_THROWS_WITH(ckpt::read_safetensors_header(bad), Catch::Contains("header length"));
  write_bad([](std::string& s) {
    auto at = s.find("\"F32\"");
    s.replace(at, 5, "\"I16\"");
  });
  REQUIRE_THROWS_WITH(ckpt::read_safetensors_header(bad), Catch::Contains("unsupported safetensors dtype \"I16\""));

  // A different model's file: the mismatched tensor is named with both shapes.
  nn::TransformerConfig c = tiny_config();
  c.vocab_size = 40;
  manual_seed(1);
  auto other = std::make_shared<nn::Transformer>(c);
  const fs::path wrong = test_file("wrong_model");
  ckpt::save_safetensors(*other, wrong);
  auto before = ckpt::get_model_state_dict(*model, kFullOnCpu);
  REQUIRE_THROWS_WITH(ckpt::load_safetensors(*model, wrong),
                      Catch::Contains("mismatched") && Catch::Contains("[32, 16]") && Catch::Contains("[40, 16]"));
  require_same_tensors(ckpt::get_model_state_dict(*model, kFullOnCpu), before);  // nothing loaded
}

// The output of `dtr-ckpt consolidate` on the 4-rank reference checkpoint
// (tests/checkpoint/checkpoint_test.cpp, seed 41, one AdamW step) holds the full model
// and optimizer state: it loads into a model and matches a single process.
TEST_CASE("safetensors consolidated by dtr-ckpt loads into a model and holds the optimizer state", "[.ckpt_consolidated]") {
  const fs::path file = fs::current_path() / "ckpt_consolidated_fsdp.safetensors";
  REQUIRE(fs::exists(file));
  auto want = make_model(41);
  auto want_opt = std::make_unique<nn::optim::AdamW>(want->parameters(), nn::optim::AdamWOptions{.lr = 1e-2});
  for (auto& p : want->parameters()) p->set_grad(mul(p->detach(), Scalar(0.1)));
  want_opt->step();
  auto header = ckpt::read_safetensors_header(file);
  REQUIRE(header.metadata.at("dtr_world_size") == "4");
  for (const auto& mesh : sharding_meshes()) {
    auto model = make_sharded(3, mesh);
    ckpt::load_safetensors(*model, file, /*strict=*/false);
    require_same_tensors(ckpt::get_model_state_dict(*model, kFullOnCpu), want->state_dict());
  }
  auto named = want->named_parameters();
  for (size_t i = 0; i < named.size(); ++i) {
    for (const auto& [key, t] : want_opt->state(i).tensors) {
      INFO(named[i].first << "." << key);
      REQUIRE(bytes_of(ckpt::read_safetensors_tensor(file, header, "optim." + named[i].first + "." + key)) ==
              bytes_of(t));
    }
  }
}
