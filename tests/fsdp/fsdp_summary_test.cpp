// fsdp::summarize at world sizes 1-4: the printed tree names every module with
// its global parameter count and bytes, marks the FSDP groups, and shows each
// group's shard on this rank (padded size, elements held, padding: computed here
// from the shapes and torch.chunk's split), mixed precision, reshard setting and
// explicit prefetch lists.
#include "dtr/fsdp/fully_shard.h"
#include "dtr/fsdp/summary.h"
#include "dtr/fsdp/wrap_policy.h"
#include "dtr/mesh/distributed.h"
#include "dtr/nn/transformer.h"

#include "tests/support/tiny_transformer.h"

#include <catch2/catch.hpp>
#include <fmt/format.h>

using namespace dtr;

namespace {

bool has_line(const std::string& text, const std::string& line) {
  return text.find(line) != std::string::npos;
}

}  // namespace

TEST_CASE("model summary lists modules, groups and this rank's shard sizes") {
  nn::TransformerConfig c;
  c.vocab_size = 30;  // 30 rows: uneven over 4 ranks
  c.dim = 16;
  c.n_layers = 2;
  c.n_heads = 2;
  c.max_seq_len = 16;
  auto model = std::make_shared<nn::Transformer>(c);
  fsdp::FullyShardOptions options;
  options.mp_policy.param_dtype = DType::bf16;
  options.mp_policy.reduce_dtype = DType::f32;
  auto handles = fsdp::apply_fully_shard(*model, fsdp::module_type_policy<nn::TransformerBlock>(), options);
  nn::Module& block0 = handles[0].module();
  nn::Module& block1 = handles[1].module();
  handles[0].set_modules_to_forward_prefetch({&block1});
  handles[1].set_modules_to_backward_prefetch({&block0});

  const std::string text = fsdp::summarize(*model).to_string();
  if (distributed::rank() == 0) WARN(text);
  const int64_t n = distributed::world_size(), r = distributed::rank();

  // Independently: a [rows, cols] parameter is split in chunks of ceil(rows / n) rows.
  struct Expected {
    int64_t padded = 0, held = 0;
  };
  auto add = [&](Expected& e, int64_t rows, int64_t cols) {
    const int64_t chunk = (rows + n - 1) / n;
    e.padded += chunk * cols;
    e.held += std::clamp<int64_t>(rows - r * chunk, 0, chunk) * cols;
  };
  // hidden: round_up(2 * 64 / 3, 32) = 64. Block: 2 norms [16], wq wk wv wo [16, 16], up gate [64, 16], down [16, 64].
  Expected block;
  add(block, 16, 1);
  for (int i = 0; i < 4; ++i) add(block, 16, 16);
  add(block, 16, 1);
  add(block, 64, 16);
  add(block, 64, 16);
  add(block, 16, 64);
  // Root: embedding [30, 16], final norm [16], output [30, 16].
  Expected root;
  add(root, 30, 16);
  add(root, 16, 1);
  add(root, 30, 16);

  const int64_t block_params = 2 * 16 + 4 * 256 + 3 * 1024, root_params = 480 + 16 + 480;
  REQUIRE(has_line(text, fmt::format("Model summary: {} params, 3 FSDP groups", 2 * block_params + root_params)));
  REQUIRE(has_line(text, fmt::format("(root) (Transformer): {} params, {} B", 2 * block_params + root_params,
                                     4 * (2 * block_params + root_params))));
  REQUIRE(has_line(text, fmt::format("\n  layers (ModuleList): {} params", 2 * block_params)));
  REQUIRE(has_line(text, fmt::format("\n    layers.0 (TransformerBlock): {} params, {} B ({:.1f} KiB) [FSDP group]",
                                     block_params, 4 * block_params, 4.0 * block_params / 1024)));
  REQUIRE(has_line(text, "\n      layers.0.attn (Attention): 1024 params, 4096 B (4.0 KiB)\n"));
  REQUIRE(has_line(text, "\n        layers.0.ffn.down (Linear): 1024 params, 4096 B (4.0 KiB)\n"));
  for (const auto& [path, indent, e, tensors] :
       {std::tuple{std::string("layers.0"), std::string("      "), block, 9},
        std::tuple{std::string("layers.1"), std::string("      "), block, 9},
        std::tuple{std::string("(root)"), std::string("  "), root, 3}}) {
    INFO(path);
    REQUIRE(has_line(text, fmt::format("{}group: {} tensors, shard_numel_padded={} ({} B bf16) holds={} padding={} "
                                       "on rank {} of {}; shard dtype f32",
                                       indent, tensors, e.padded, 2 * e.padded, e.held, e.padded - e.held, r, n)));
  }
  REQUIRE(handles[0].shard_numel_padded() == block.padded);
  REQUIRE(handles[2].shard_numel_padded() == root.padded);
  REQUIRE(has_line(text, "      mp_policy param=bf16 reduce=f32 output=- cast_inputs=1; reshard_after_forward=default(true); "
                         "prefetch forward=[layers.1] backward=implicit\n"));
  REQUIRE(has_line(text, "      mp_policy param=bf16 reduce=f32 output=- cast_inputs=1; reshard_after_forward=default(true); "
                         "prefetch forward=implicit backward=[layers.0]\n"));
  REQUIRE(has_line(text, "  mp_policy param=bf16 reduce=f32 output=- cast_inputs=1; reshard_after_forward=default(false, "
                         "root); prefetch forward=implicit backward=implicit\n"));
}

TEST_CASE("model summary names a group's quantized communication policy") {
  auto model = std::make_shared<nn::Transformer>(testing::tiny_config());
  for (auto& layer : model->layers()) {
    fsdp::fully_shard(*layer, {.quantized_comm = {.weights = true, .gradient_bits = 4, .host_size = 1}});
  }
  fsdp::fully_shard(*model, {.quantized_comm = {.gradient_bits = 8, .error_feedback = false}});
  const std::string text = fsdp::summarize(*model).to_string();
  REQUIRE(has_line(text, "prefetch forward=implicit backward=implicit; quantized_comm weights=int8 grads=int4 "
                         "host_size=1\n"));
  REQUIRE(has_line(text, "prefetch forward=implicit backward=implicit; quantized_comm weights=- grads=int8 (no error "
                         "feedback) host_size=hosts\n"));
}
