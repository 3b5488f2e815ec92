// The autograd graph: a Node is the backward of one op application. Its
// next_edges point at the nodes that produced its inputs (or at the
// AccumulateGrad node of a leaf), so the graph runs from outputs to leaves.
//
// apply() receives one gradient per output of the op (undefined when no
// gradient flowed into that output and the engine found nothing to pass) and
// returns one gradient per input edge (undefined for inputs that need none).
// Backward formulas run with grad mode off (no double backward).
//
// Hooks:
//   - pre-hooks, per output: see and may replace the gradient of that output
//     before apply() (this is how a non-leaf tensor's register_hook works);
//   - post-hooks: run after apply() with (grad_inputs, grad_outputs).
#pragma once

#include "dtr/tensor/tensor.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace dtr::autograd {

class Node;

struct Edge {
  std::shared_ptr<Node> node;  // null: the input needs no gradient
  uint32_t input_nr = 0;       // which output of `node` this input was
  bool valid() const { return node != nullptr; }
};

// Shape, dtype and device of one output of an op, to make zeros for a gradient
// that did not flow and to check the gradients that do.
struct OutputMeta {
  Shape shape;
  DType dtype = DType::f32;
  Device device;
};

// A gradient hook: gets the gradient, returns a replacement or an undefined
// tensor to keep it.
using GradHook = std::function<Tensor(const Tensor& grad)>;
using PostHook =
    std::function<void(const std::vector<Tensor>& grad_inputs, const std::vector<Tensor>& grad_outputs)>;

class Node : public std::enable_shared_from_this<Node> {
 public:
  Node();
  virtual ~Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  virtual std::string name() const = 0;
  virtual std::vector<Tensor> apply(std::vector<Tensor> grad_outputs) = 0;
  // In place of apply(), for a node with one input: adds the node's gradient for
  // that input into `input_grad`, a gradient the engine has already summed for it
  // and holds the only handle to (dense, of the input's dtype and device), and
  // returns true; or returns false, and apply() runs. For nodes whose gradient is a
  // few rows of a large input (an embedding table tied to an output layer), where
  // apply() would build a whole tensor of zeros around those rows to be added.
  virtual bool accumulate_into(const std::vector<Tensor>& grad_outputs, Tensor& input_grad) {
    (void)grad_outputs;
    (void)input_grad;
    return false;
  }
  // Frees saved tensors once a backward without retain_graph has used them.
  virtual void release_saved() {}

  std::vector<Edge>& next_edges() { return next_edges_; }
  const std::vector<Edge>& next_edges() const { return next_edges_; }
  // Whether input i's gradient is wanted (its edge leads somewhere).
  bool needs_input_grad(size_t i) const { return i < next_edges_.size() && next_edges_[i].valid(); }

  uint32_t add_output(OutputMeta meta);
  const std::vector<OutputMeta>& outputs() const { return outputs_; }
  // Creation order: later nodes run first among the ready ones.
  uint64_t sequence_nr() const { return sequence_nr_; }

  int add_pre_hook(uint32_t output_nr, GradHook hook);
  void remove_pre_hook(int handle);
  void add_post_hook(PostHook hook);

  // Used by the engine.
  std::vector<Tensor> run_pre_hooks(std::vector<Tensor> grads) const;
  void run_post_hooks(const std::vector<Tensor>& grad_inputs, const std::vector<Tensor>& grad_outputs) const;
  bool has_post_hooks() const { return !post_hooks_.empty(); }

 private:
  struct PreHook {
    int handle;
    uint32_t output_nr;
    GradHook fn;
  };
  std::vector<Edge> next_edges_;
  std::vector<OutputMeta> outputs_;
  std::vector<PreHook> pre_hooks_;
  std::vector<PostHook> post_hooks_;
  uint64_t sequence_nr_;
  int next_hook_handle_ = 0;
};

// A tensor an op saves for its backward. Unpacking checks that nothing wrote to
// the tensor's storage in place since it was saved, and that the graph was not
// already freed by an earlier backward.
class SavedTensor {
 public:
  SavedTensor() = default;
  explicit SavedTensor(const Tensor& t);
  Tensor unpack(const Node& owner) const;
  void release();
  bool defined() const { return saved_.defined(); }

 private:
  Tensor saved_;
  uint64_t version_ = 0;
  bool released_ = false;
};

}  // namespace dtr::autograd
