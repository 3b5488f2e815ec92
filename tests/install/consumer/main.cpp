// Uses the installed dtr as a user's project would, through <dtr/dtr.h>:
//   consumer                builds a tensor and checks a value computed by hand,
//                           and reaches the checkpoint code (its JSON metadata
//                           header and the xxhash library the package config links);
//   consumer HF_DIR         under mpirun, builds the Hugging Face model in HF_DIR on
//                           the meta device, fully_shards it over the ranks, loads
//                           its weights, checks its logits against the ones
//                           transformers recorded (HF_DIR/logits.json, 1e-5 of the
//                           largest) and trains it 5 AdamW steps, each rank on its
//                           half of the batch, requiring the loss to fall.
#include <dtr/checkpoint/checksum.h>
#include <dtr/checkpoint/metadata.h>
#include <dtr/dtr.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace {

bool basics() {
  dtr::Tensor t = dtr::arange(6).view({2, 3}).t().contiguous();  // [[0,3],[1,4],[2,5]]
  std::vector<float> v = t.to_vector<float>();
  bool ok = v == std::vector<float>{0, 3, 1, 4, 2, 5};
  // XXH3-64 of no bytes (a published test vector).
  ok = ok && dtr::checkpoint::checksum_hex(dtr::checkpoint::xxh3_64("", 0)) == "2d06800538d394c2";
  dtr::checkpoint::Metadata m;
  ok = ok && dtr::checkpoint::to_json(m).at("format") == "dtr-checkpoint";
  std::printf("consumer: %s\n", ok ? "ok" : "wrong values");
  return ok;
}

bool fine_tune(const std::filesystem::path& dir) {
  using namespace dtr;
  distributed::init();
  const int rank = distributed::rank(), ranks = distributed::world_size();
  nn::TransformerConfig config = checkpoint::read_hf_config(dir);
  config.device = Device::meta();
  auto model = std::make_shared<nn::Transformer>(config);
  for (auto& block : model->layers()) fsdp::fully_shard(*block);
  fsdp::fully_shard(*model);
  model->to_empty(Device::cpu());
  checkpoint::load_hf_pretrained(*model, dir);

  std::ifstream in(dir / "logits.json");
  const auto recorded = nlohmann::json::parse(in);
  std::vector<int64_t> tokens;
  for (const auto& row : recorded.at("tokens")) {
    for (const auto& id : row) tokens.push_back(id.get<int64_t>());
  }
  const auto rows = static_cast<int64_t>(recorded.at("tokens").size()), seq = static_cast<int64_t>(tokens.size()) / rows;
  const auto want = recorded.at("logits").get<std::vector<float>>();
  double error = 0, scale = 0;
  {
    NoGradGuard no_grad;
    const std::vector<float> got = (*model)(from_vector(tokens, {rows, seq})).contiguous().to_vector<float>();
    for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
      error = std::max(error, std::abs(static_cast<double>(got[i]) - want[i]));
      scale = std::max(scale, std::abs(static_cast<double>(want[i])));
    }
  }
  bool ok = error <= 1e-5 * scale;

  // This rank's rows of an 8-row batch whose targets are the next token.
  std::vector<int64_t> inputs, targets;
  const int64_t batch = 8, local = batch / ranks;
  for (int64_t b = rank * local; b < (rank + 1) * local; ++b) {
    for (int64_t t = 0; t < seq; ++t) {
      inputs.push_back((b * 3 + t) % config.vocab_size);
      targets.push_back((b * 3 + t + 1) % config.vocab_size);
    }
  }
  const Tensor x = from_vector(inputs, {local, seq}), y = from_vector(targets, {local, seq});
  nn::optim::AdamW opt(model->parameters(), {.lr = 1e-2});
  std::vector<double> losses;
  for (int step = 0; step < 5; ++step) {
    Tensor loss = cross_entropy((*model)(x).reshape({-1, config.vocab_size}), y.reshape({-1}));
    loss.backward();
    opt.step();
    opt.zero_grad();
    Tensor global = full({1}, loss.item(), {.dtype = DType::f64});
    distributed::world_group()->all_reduce(global, mesh::ReduceOp::avg())->wait();
    losses.push_back(global.item());
  }
  ok = ok && std::isfinite(losses.back()) && losses.back() < losses.front();
  if (rank == 0) {
    std::printf("consumer: %s on %d ranks: logits within %.1e of transformers', loss %.4f -> %.4f: %s\n",
                dir.filename().c_str(), ranks, error / scale, losses.front(), losses.back(), ok ? "ok" : "FAIL");
  }
  distributed::finalize();
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) return fine_tune(argv[1]) ? 0 : 1;
  return basics() ? 0 : 1;
}
