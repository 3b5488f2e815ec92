// Every option struct of dtr's public API filled the way the documentation shows,
// with designated initializers naming one member, in a user's program built with
// -Wall -Wextra -Werror and no -Wno-missing-field-initializers: GCC warns about
// each omitted member that has no default member initializer, so every member of
// these structs must have one. Compiled by the install_option_structs test only.
// A struct added to the public API for designated initialization goes here too.
#include <dtr/dtr.h>
#include <dtr/nn/tensor_parallel/parallel_style.h>  // not in dtr.h

namespace {

[[maybe_unused]] void fill_every_option_struct() {
  using namespace dtr;
  [[maybe_unused]] TensorOptions tensor{.dtype = DType::f64};
  [[maybe_unused]] LogicalSlice slice{.logical_shape = {4, 2}};
  [[maybe_unused]] distributed::InitOptions init{.bind_cuda_device = false};
  [[maybe_unused]] FromLocalOptions from_local{.run_check = false};
  [[maybe_unused]] nn::LayerOptions layer{.dtype = DType::f64};
  [[maybe_unused]] nn::LinearOptions linear{.bias = false};
  [[maybe_unused]] nn::optim::AdamWOptions adamw{.lr = 3e-3};
  [[maybe_unused]] nn::optim::AdamOptions adam{.weight_decay = 0.1};
  [[maybe_unused]] nn::optim::SGDOptions sgd{.momentum = 0.9};
  [[maybe_unused]] nn::optim::GroupOptions group{.weight_decay = 0.0};
  [[maybe_unused]] nn::optim::WarmupDecayOptions schedule{.peak_lr = 1e-3};
  [[maybe_unused]] nn::TransformerConfig config{.vocab_size = 32};
  [[maybe_unused]] nn::tensor_parallel::ColwiseParallel colwise{.output_layout = Replicate()};
  [[maybe_unused]] nn::tensor_parallel::RowwiseParallel rowwise{.input_layout = Replicate()};
  [[maybe_unused]] fsdp::MixedPrecisionPolicy mp{.param_dtype = DType::bf16};
  [[maybe_unused]] fsdp::OffloadPolicy offload{.offload_params = true};
  [[maybe_unused]] fsdp::FullyShardOptions shard{.reshard_after_forward = false};
  [[maybe_unused]] fsdp::FullyShardOptions shard_mp{.mp_policy = mp};
  [[maybe_unused]] fsdp::QuantizedCommPolicy quantized{.weights = true};
  [[maybe_unused]] fsdp::FullyShardOptions shard_quantized{.quantized_comm = {.gradient_bits = 4}};
  [[maybe_unused]] fsdp::MemoryEstimateOptions estimate{.batch_size = 1};
  [[maybe_unused]] checkpoint::SaveOptions save{.checksum_block_bytes = 1 << 16};
  [[maybe_unused]] checkpoint::StateDictOptions state_dict{.full_state_dict = true};
  [[maybe_unused]] profiler::Options profile{.print_summary = false};
}

}  // namespace
