// Distributed checkpoints (checkpoint/) at world sizes 1-4: save and load at
// the same size bit for bit, HSDP writing each shard once, resharding between
// meshes, loading into a plain unsharded model, resuming training with
// bit-identical losses, and the failure cases (corrupt, truncated or missing
// files, wrong model, a save interrupted before its commit).
//
// Resharding across world sizes uses a CTest fixture: the hidden test
// [ckpt_reference] writes checkpoints at 4 ranks into the working directory
// (mpi_checkpoint_reference_np4), and the hidden tests [ckpt_reshard] load them
// at 1, 2, 3 and 4 ranks (mpi_checkpoint_reshard_np*). By hand:
//   mpirun -np 4 tests/dtr_mpi_tests "[ckpt_reference]"
//   mpirun -np 3 tests/dtr_mpi_tests "[ckpt_reshard]"
#include "dtr/checkpoint/checkpoint.h"
#include "dtr/checkpoint/model_checkpoint.h"
#include "dtr/fsdp/fully_shard.h"
#include "dtr/mesh/distributed.h"
#include "tests/support/mpi_test_util.h"
#include "dtr/nn/optim/adamw.h"
#include "dtr/nn/optim/lr_schedule.h"
#include "dtr/nn/transformer.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/elementwise.h"
#include "dtr/tensor/ops/nn.h"

#include "tests/support/tiny_transformer.h"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

using namespace dtr;
using dtr::testing::kGlobalBatch;
using dtr::testing::kSeq;
namespace ckpt = dtr::checkpoint;
namespace fs = std::filesystem;
using dtr::testing::bytes_of;
using dtr::testing::values_of;
using dtr::testing::world;

using dtr::testing::make_model;
using dtr::testing::make_optimizer;
using dtr::testing::make_sharded;
using dtr::testing::prime;
using dtr::testing::tiny_config;

namespace {


mesh::DeviceMesh hsdp_mesh() { return mesh::init_device_mesh(DeviceType::cpu, {2, 2}, {"replicate", "shard"}); }

fs::path test_dir(const std::string& name) {
  fs::path dir = fs::current_path() / "ckpt_tests" / fmt::format("{}_np{}", name, distributed::world_size());
  if (distributed::rank() == 0) {
    fs::remove_all(dir);
    fs::remove_all(ckpt::staging_directory(dir));
    fs::create_directories(dir.parent_path());
  }
  world()->barrier()->wait();
  return dir;
}

// `t` laid out like parameter `p`, unsharded.
Tensor full_tensor_of(const nn::Parameter& p, const Tensor& t) {
  return p.is_sharded() ? DTensor(t.detach(), *p.sharding()).full_tensor() : t;
}

Tensor full_tensor_of(const nn::Parameter& p) { return full_tensor_of(p, p); }

// Every full parameter and optimizer state of `got` equals `want`'s, bit for bit.
void require_same_training_state(nn::Module& got, nn::optim::Optimizer& got_opt, nn::Module& want,
                                 nn::optim::Optimizer& want_opt) {
  auto g = got.named_parameters(), w = want.named_parameters();
  REQUIRE(g.size() == w.size());
  for (size_t i = 0; i < g.size(); ++i) {
    INFO(g[i].first);
    REQUIRE(g[i].first == w[i].first);
    REQUIRE(bytes_of(full_tensor_of(g[i].second)) == bytes_of(full_tensor_of(w[i].second)));
    const auto& gs = got_opt.state(i);
    const auto& ws = want_opt.state(i);
    REQUIRE(gs.step == ws.step);
    REQUIRE(gs.tensors.size() == ws.tensors.size());
    for (const auto& [name, t] : ws.tensors) {
      INFO(name);
      const Tensor& mine = gs.tensors.at(name);
      // Optimizer state is sharded like its parameter.
      REQUIRE(bytes_of(full_tensor_of(g[i].second, mine)) == bytes_of(full_tensor_of(w[i].second, t)));
    }
  }
  REQUIRE(got_opt.lr() == want_opt.lr());
}

ckpt::CheckpointState training_state(nn::Module& model, nn::optim::Optimizer& opt) {
  ckpt::CheckpointState s;
  s.add_model(model);
  s.add_optimizer(opt, model);
  return s;
}

// Loads `dir` into model and a fresh optimizer for it.
std::unique_ptr<nn::optim::AdamW> load_training_state(const fs::path& dir, nn::Module& model,
                                                      ckpt::LoadResult* result = nullptr) {
  auto opt = make_optimizer(model);
  ckpt::CheckpointState s;
  s.add_model(model);
  s.add_optimizer_for_load(*opt, model, ckpt::read_metadata(dir));
  auto r = ckpt::load(dir, s);
  if (result) *result = r;
  s.restore_optimizer(*opt, model);
  return opt;
}

std::vector<std::vector<uint8_t>> local_bytes(nn::Module& model) {
  std::vector<std::vector<uint8_t>> out;
  for (auto& p : model.parameters()) out.push_back(bytes_of(p));
  return out;
}

}  // namespace

TEST_CASE("checkpoint save and load at the same world size restore model, optimizer and extra state bit for bit") {
  const fs::path dir = test_dir("same_size");
  auto model = make_sharded(1);
  auto opt = make_optimizer(*model);
  prime(*model, *opt);
  prime(*model, *opt);
  auto s = training_state(*model, *opt);
  s.extra["step"] = 2;
  s.extra["tokens_seen"] = int64_t{123456789012};
  s.extra["data"] = {{"epoch", 1}, {"position", 48}};
  s.extra["lr_schedule_step"] = 2;
  Generator gen(99);
  gen.next_fill(1000);
  s.extra["rng"] = ckpt::generator_to_json(gen.state());
  ckpt::save(dir, s);

  // Layout: one file per rank, the metadata, no temporary directory left.
  for (int r = 0; r < distributed::world_size(); ++r) REQUIRE(fs::exists(dir / fmt::format("rank_{}.bin", r)));
  REQUIRE(fs::exists(dir / "metadata.json"));
  REQUIRE_FALSE(fs::exists(ckpt::staging_directory(dir)));

  auto fresh = make_sharded(2);
  ckpt::CheckpointState r;
  r.add_model(*fresh);
  auto fresh_opt = make_optimizer(*fresh);
  r.add_optimizer_for_load(*fresh_opt, *fresh, ckpt::read_metadata(dir));
  auto result = ckpt::load(dir, r);
  r.restore_optimizer(*fresh_opt, *fresh);
  require_same_training_state(*fresh, *fresh_opt, *model, *opt);
  REQUIRE(r.extra.at("step") == 2);
  REQUIRE(r.extra.at("tokens_seen").get<int64_t>() == 123456789012);
  REQUIRE(r.extra.at("data").at("position") == 48);
  REQUIRE(ckpt::generator_from_json(r.extra.at("rng")) == gen.state());
  // Each rank reads its own shards only.
  int64_t local_bytes_total = 0;
  for (auto& p : fresh->parameters()) local_bytes_total += static_cast<int64_t>(p->nbytes()) * 3;  // param + 2 moments
  REQUIRE(result.bytes_read == local_bytes_total);
}

TEST_CASE("checkpoint on a 2x2 HSDP mesh writes each shard once and reshards to a 1-D mesh and back", "[.np4]") {
  testing::require_four_ranks();
  const fs::path dir = test_dir("hsdp");
  auto model = make_sharded(3, hsdp_mesh());
  auto opt = make_optimizer(*model);
  prime(*model, *opt);
  ckpt::save(dir, training_state(*model, *opt));

  // Replicas at coordinate 1 on the replicate dim (ranks 2, 3) write nothing.
  auto meta = ckpt::read_metadata(dir);
  REQUIRE(meta.files.at("rank_2.bin") == 0);
  REQUIRE(meta.files.at("rank_3.bin") == 0);
  REQUIRE(meta.files.at("rank_0.bin") > 0);
  for (const auto& [name, t] : meta.tensors) {
    INFO(name);
    REQUIRE(t.chunks.size() <= 2);
    for (const auto& c : t.chunks) REQUIRE((c.file == "rank_0.bin" || c.file == "rank_1.bin"));
  }

  auto flat = make_sharded(4);
  auto flat_opt = load_training_state(dir, *flat);
  require_same_training_state(*flat, *flat_opt, *model, *opt);

  // An empty replica file is still part of the checkpoint: its loss is an error.
  if (distributed::rank() == 0) fs::remove(dir / "rank_3.bin");
  world()->barrier()->wait();
  auto other = make_sharded(9);
  REQUIRE_THROWS_WITH(load_training_state(dir, *other),
                      Catch::Contains("rank_3.bin") && Catch::Contains("no tensor data") && Catch::Contains("is missing"));

  // And a 1-D checkpoint into HSDP.
  const fs::path dir2 = test_dir("flat_to_hsdp");
  ckpt::save(dir2, training_state(*flat, *flat_opt));
  auto hsdp = make_sharded(5, hsdp_mesh());
  auto hsdp_opt = load_training_state(dir2, *hsdp);
  require_same_training_state(*hsdp, *hsdp_opt, *model, *opt);
}

TEST_CASE("checkpoint of a sharded model loads into a plain unsharded model on every rank") {
  const fs::path dir = test_dir("to_plain");
  auto model = make_sharded(6);
  auto opt = make_optimizer(*model);
  prime(*model, *opt);
  ckpt::save(dir, training_state(*model, *opt));

  auto plain = make_model(7);
  auto plain_opt = load_training_state(dir, *plain);
  require_same_training_state(*plain, *plain_opt, *model, *opt);

  // And a plain model's checkpoint (written once, by rank 0) into a sharded one.
  const fs::path dir2 = test_dir("from_plain");
  ckpt::save(dir2, training_state(*plain, *plain_opt));
  auto meta = ckpt::read_metadata(dir2);
  for (int r = 1; r < distributed::world_size(); ++r) REQUIRE(meta.files.at(fmt::format("rank_{}.bin", r)) == 0);
  auto sharded = make_sharded(8);
  auto sharded_opt = load_training_state(dir2, *sharded);
  require_same_training_state(*sharded, *sharded_opt, *model, *opt);
}

TEST_CASE("checkpoint of a model and its optimizer in one call: save, load sharded, plain, or parameters alone") {
  const fs::path dir = test_dir("one_call");
  auto model = make_sharded(9);
  auto opt = make_optimizer(*model);
  prime(*model, *opt);
  prime(*model, *opt);
  ckpt::save(dir, *model, *opt, {{"step", 2}, {"data", {{"position", 48}}}});

  auto resumed = make_sharded(10);  // other initial values
  auto resumed_opt = make_optimizer(*resumed);
  const nlohmann::json extra = ckpt::load(dir, *resumed, *resumed_opt);
  require_same_training_state(*resumed, *resumed_opt, *model, *opt);
  CHECK(extra == nlohmann::json{{"step", 2}, {"data", {{"position", 48}}}});  // the optimizer's own keys stay inside

  auto plain = make_model(11);
  auto plain_opt = make_optimizer(*plain);
  ckpt::load(dir, *plain, *plain_opt);
  require_same_training_state(*plain, *plain_opt, *model, *opt);

  auto weights_only = make_model(12);
  CHECK(ckpt::load(dir, *weights_only).at("step") == 2);
  auto want = model->named_parameters();
  auto got = weights_only->named_parameters();
  for (size_t i = 0; i < got.size(); ++i) {
    INFO(got[i].first);
    REQUIRE(bytes_of(got[i].second) == bytes_of(full_tensor_of(want[i].second)));
  }

  const fs::path refused = test_dir("one_call_refused");
  REQUIRE_THROWS_WITH(ckpt::save(refused, *model, *opt, {{"optim", 1}}), Catch::Contains("has a key \"optim\""));
  REQUIRE_THROWS_WITH(ckpt::save(refused, *model, nlohmann::json::array()),
                      Catch::Contains("must be a JSON object"));
}

namespace {

// Steps [from, to) of FSDP training; the loss of each (averaged over ranks).
std::vector<double> train_steps(nn::Module& model, nn::optim::Optimizer& opt, int from, int to) {
  const int n = distributed::world_size(), me = distributed::rank();
  const int64_t local = kGlobalBatch / n;
  auto schedule = nn::optim::warmup_cosine({.peak_lr = 1e-2, .min_lr = 1e-3, .warmup_steps = 3, .total_steps = 10});
  std::vector<double> losses;
  for (int step = from; step < to; ++step) {
    nn::optim::apply_lr_schedule(opt, schedule, step);
    auto [tokens, targets] = testing::token_batch(step, me * local, (me + 1) * local, kSeq);
    Tensor logits = model(tokens);
    Tensor loss = cross_entropy(logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}));
    loss.backward();
    opt.step();
    opt.zero_grad();
    Tensor global = full({1}, loss.item(), {.dtype = DType::f64});
    world()->all_reduce(global, mesh::ReduceOp::avg())->wait();
    losses.push_back(values_of(global)[0]);
  }
  return losses;
}

}  // namespace

TEST_CASE("checkpoint resume: steps 6-10 after loading the step-5 checkpoint give bit-identical losses") {
  const fs::path dir = test_dir("resume");
  auto model = make_sharded(11);
  auto opt = make_optimizer(*model);
  auto first = train_steps(*model, *opt, 0, 5);
  auto s = training_state(*model, *opt);
  s.extra["step"] = 5;
  s.extra["rng"] = ckpt::generator_to_json(default_generator().state());
  ckpt::save(dir, s);
  auto rest = train_steps(*model, *opt, 5, 10);

  manual_seed(12345);  // the resumed job starts elsewhere; the checkpoint brings it back
  auto resumed = make_sharded(12);
  auto resumed_opt = make_optimizer(*resumed);
  ckpt::CheckpointState r;
  r.add_model(*resumed);
  r.add_optimizer_for_load(*resumed_opt, *resumed, ckpt::read_metadata(dir));
  ckpt::load(dir, r);
  r.restore_optimizer(*resumed_opt, *resumed);
  default_generator().set_state(ckpt::generator_from_json(r.extra.at("rng")));
  const int step = r.extra.at("step").get<int>();
  REQUIRE(step == 5);
  auto again = train_steps(*resumed, *resumed_opt, step, 10);
  REQUIRE(again == rest);
  REQUIRE(first.size() == 5);
  require_same_training_state(*resumed, *resumed_opt, *model, *opt);
}

namespace {

// A saved FSDP checkpoint and a fresh model whose load is expected to fail.
struct BrokenCase {
  fs::path dir;
  std::shared_ptr<nn::Transformer> model;
  ckpt::Metadata meta;
};

BrokenCase saved_case(const std::string& name) {
  BrokenCase c{test_dir(name), make_sharded(21), {}};
  auto opt = make_optimizer(*c.model);
  prime(*c.model, *opt);
  ckpt::save(c.dir, training_state(*c.model, *opt));
  c.meta = ckpt::read_metadata(c.dir);
  return c;
}

// The name of the tensor whose first chunk starts `file`.
std::string first_tensor_in(const ckpt::Metadata& meta, const std::string& file) {
  for (const auto& [name, t] : meta.tensors) {
    for (const auto& c : t.chunks) {
      if (c.file == file && c.byte_offset == 0) return name;
    }
  }
  return "";
}

// Loading the model alone into a fresh model fails with a message containing
// every string in `expected`; the fresh model's parameters are untouched.
void require_load_fails(const fs::path& dir, const std::vector<std::string>& expected,
                        const std::function<void(ckpt::CheckpointState&)>& edit = {}) {
  auto fresh = make_sharded(22);
  auto before = local_bytes(*fresh);
  ckpt::CheckpointState s;
  s.add_model(*fresh);
  if (edit) edit(s);
  std::string message;
  try {
    ckpt::load(dir, s);
  } catch (const Error& e) {
    message = e.what();
  }
  INFO(message);
  REQUIRE_FALSE(message.empty());
  for (const auto& want : expected) REQUIRE(message.find(want) != std::string::npos);
  REQUIRE(local_bytes(*fresh) == before);
}

}  // namespace

TEST_CASE("checkpoint load of a corrupted byte fails on every rank naming tensor and file, loading nothing") {
  auto c = saved_case("corrupt");
  const std::string victim = first_tensor_in(c.meta, "rank_0.bin");
  REQUIRE_FALSE(victim.empty());
  if (distributed::rank() == 0) {
    std::fstream f(c.dir / "rank_0.bin", std::ios::in | std::ios::out | std::ios::binary);
    char byte = 0;
    f.seekg(1);
    f.read(&byte, 1);
    byte = static_cast<char>(byte ^ 0x10);
    f.seekp(1);
    f.write(&byte, 1);
  }
  world()->barrier()->wait();
  require_load_fails(c.dir, {"checksum mismatch", "'" + victim + "'", "rank_0.bin"});
}

TEST_CASE("checkpoint load of a truncated file fails on every rank naming tensor and file, loading nothing") {
  auto c = saved_case("truncated");
  const int last = distributed::world_size() - 1;
  const std::string file = fmt::format("rank_{}.bin", last);
  REQUIRE(c.meta.files.at(file) > 0);
  if (distributed::rank() == 0) fs::resize_file(c.dir / file, static_cast<uintmax_t>(c.meta.files.at(file) / 2));
  world()->barrier()->wait();
  require_load_fails(c.dir, {"truncated", file, "tensor '"});
}

TEST_CASE("checkpoint load with a missing rank file fails on every rank naming tensor and file, loading nothing") {
  auto c = saved_case("missing_file");
  if (distributed::rank() == 0) fs::remove(c.dir / "rank_0.bin");
  world()->barrier()->wait();
  require_load_fails(c.dir, {"is missing", "rank_0.bin", "'" + first_tensor_in(c.meta, "rank_0.bin") + "'"});
}

TEST_CASE("checkpoint load into the wrong model fails naming the missing key or the mismatched shape") {
  auto c = saved_case("wrong_model");
  require_load_fails(c.dir, {"'extra.weight' is missing from the checkpoint", "metadata.json"},
                     [](ckpt::CheckpointState& s) { s.tensors["extra.weight"] = zeros({2, 2}); });
  const std::string key = c.meta.tensors.begin()->first;
  require_load_fails(c.dir, {"'" + key + "'", "expected f32 [3, 5]", "metadata.json"},
                     [&](ckpt::CheckpointState& s) { s.tensors[key] = zeros({3, 5}); });
  require_load_fails(c.dir, {"'" + key + "'", "expected f64"}, [&](ckpt::CheckpointState& s) {
    s.tensors[key] = zeros(c.meta.tensors.begin()->second.shape, {.dtype = DType::f64});
  });
}

TEST_CASE("checkpoint save failing before its commit leaves the previous checkpoint loadable and no staging") {
  const fs::path dir = test_dir("interrupted");
  auto model = make_sharded(31);
  auto opt = make_optimizer(*model);
  prime(*model, *opt);
  ckpt::save(dir, training_state(*model, *opt));
  auto saved = make_sharded(32);  // a copy of the first checkpoint's state
  auto saved_opt = load_training_state(dir, *saved);

  prime(*model, *opt);
  REQUIRE_THROWS_WITH(ckpt::save(dir, training_state(*model, *opt),
                                 {.at_phase =
                                      [](ckpt::SavePhase phase) {
                                        if (phase == ckpt::SavePhase::committing) {
                                          throw std::runtime_error("simulated crash");
                                        }
                                      }}),
                      Catch::Contains("simulated crash"));
  REQUIRE_FALSE(fs::exists(ckpt::staging_directory(dir)));  // a failed save removes what it wrote
  auto reloaded = make_sharded(33);
  auto reloaded_opt = load_training_state(dir, *reloaded);
  require_same_training_state(*reloaded, *reloaded_opt, *saved, *saved_opt);

  // The next save replaces it (a killed save's leftover staging: tests/checkpoint/checkpoint_kill_test.sh).
  ckpt::save(dir, training_state(*model, *opt));
  REQUIRE_FALSE(fs::exists(ckpt::staging_directory(dir)));
  auto latest = make_sharded(34);
  auto latest_opt = load_training_state(dir, *latest);
  require_same_training_state(*latest, *latest_opt, *model, *opt);
}

// --- Resharding across world sizes (CTest fixture; see the top of the file) ---

namespace {

constexpr uint64_t kReferenceSeed = 41;

fs::path reference_dir(const std::string& kind) { return fs::current_path() / ("ckpt_reference_" + kind + "_np4"); }

}  // namespace

TEST_CASE("checkpoint reference: FSDP and HSDP checkpoints written at world size 4", "[.ckpt_reference]") {
  REQUIRE(distributed::world_size() == 4);
  for (std::string kind : {"fsdp", "hsdp"}) {
    auto model = kind == "fsdp" ? make_sharded(kReferenceSeed) : make_sharded(kReferenceSeed, hsdp_mesh());
    auto opt = make_optimizer(*model);
    prime(*model, *opt);
    auto s = training_state(*model, *opt);
    s.extra["step"] = 1;
    // Small checksum blocks, so readers at other sizes read parts of chunks.
    ckpt::save(reference_dir(kind), s, {.checksum_block_bytes = 64});
  }
}

TEST_CASE("checkpoint written at 4 ranks (FSDP and HSDP) loads at this world size bit for bit", "[.ckpt_reshard]") {
  // The reference values: the same init and step in one process.
  auto want = make_model(kReferenceSeed);
  auto want_opt = make_optimizer(*want);
  prime(*want, *want_opt);
  for (std::string kind : {"fsdp", "hsdp"}) {
    INFO(kind);
    const fs::path dir = reference_dir(kind);
    REQUIRE(fs::exists(dir / "metadata.json"));  // written by mpi_checkpoint_reference_np4
    REQUIRE(ckpt::read_metadata(dir).world_size == 4);

    auto model = make_sharded(50);
    ckpt::LoadResult result;
    auto opt = load_training_state(dir, *model, &result);
    require_same_training_state(*model, *opt, *want, *want_opt);
    int64_t total = 0;
    for (const auto& [file, bytes] : ckpt::read_metadata(dir).files) total += bytes;
    if (distributed::world_size() > 1) REQUIRE(result.bytes_read < total);  // only the needed ranges

    auto plain = make_model(51);
    auto plain_opt = load_training_state(dir, *plain);
    require_same_training_state(*plain, *plain_opt, *want, *want_opt);

    if (distributed::world_size() == 4) {
      auto hsdp = make_sharded(52, hsdp_mesh());
      auto hsdp_opt = load_training_state(dir, *hsdp);
      require_same_training_state(*hsdp, *hsdp_opt, *want, *want_opt);
    }
  }
}
