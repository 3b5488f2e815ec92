#include "dtr/tensor/autograd/node.h"

#include <algorithm>
#include <atomic>

namespace dtr::autograd {

namespace {
std::atomic<uint64_t> g_next_sequence_nr{0};
}

Node::Node() : sequence_nr_(g_next_sequence_nr++) {}

uint32_t Node::add_output(OutputMeta meta) {
  outputs_.push_back(std::move(meta));
  return static_cast<uint32_t>(outputs_.size() - 1);
}

int Node::add_pre_hook(uint32_t output_nr, GradHook hook) {
  int handle = next_hook_handle_++;
  pre_hooks_.push_back({handle, output_nr, std::move(hook)});
  return handle;
}

void Node::remove_pre_hook(int handle) {
  std::erase_if(pre_hooks_, [&](const PreHook& h) { return h.handle == handle; });
}

void Node::add_post_hook(PostHook hook) { post_hooks_.push_back(std::move(hook)); }

std::vector<Tensor> Node::run_pre_hooks(std::vector<Tensor> grads) const {
  for (const PreHook& h : pre_hooks_) {
    Tensor& g = grads[h.output_nr];
    if (!g.defined()) continue;
    Tensor replaced = h.fn(g);
    if (replaced.defined()) g = std::move(replaced);
  }
  return grads;
}

void Node::run_post_hooks(const std::vector<Tensor>& grad_inputs,
                          const std::vector<Tensor>& grad_outputs) const {
  for (const PostHook& h : post_hooks_) h(grad_inputs, grad_outputs);
}

SavedTensor::SavedTensor(const Tensor& t) : saved_(t) {
  if (t.defined()) version_ = t.storage().version();
}

Tensor SavedTensor::unpack(const Node& owner) const {
  DTR_CHECK(!released_,
            "{}: trying to backward through the graph a second time (its saved tensors were freed "
            "after the first backward); pass retain_graph = true to the first backward",
            owner.name());
  if (saved_.defined()) {
    DTR_CHECK(saved_.storage().version() == version_,
              "{}: a tensor saved for backward (shape {}) was modified by an in-place op after it "
              "was saved (version {} now, {} when saved)",
              owner.name(), shape_str(saved_.sizes()), saved_.storage().version(), version_);
  }
  return saved_;
}

void SavedTensor::release() {
  saved_ = Tensor();
  released_ = true;
}

}  // namespace dtr::autograd
