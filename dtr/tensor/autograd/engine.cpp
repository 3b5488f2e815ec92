#include "dtr/tensor/autograd/engine.h"

#include "dtr/tensor/autograd/accumulate_grad.h"
#include "dtr/tensor/autograd/autograd_meta.h"
#include "dtr/tensor/autograd/function.h"
#include "dtr/tensor/autograd/grad_mode.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/ops/elementwise.h"

#include <queue>
#include <unordered_map>
#include <unordered_set>

namespace dtr::autograd {

namespace {

struct BackwardState {
  bool running = false;
  std::vector<std::function<void()>> callbacks;
};
thread_local BackwardState t_state;

struct LaterFirst {
  bool operator()(const Node* a, const Node* b) const { return a->sequence_nr() < b->sequence_nr(); }
};

// Number of edges into each node reachable from the roots.
std::unordered_map<Node*, int> count_dependencies(const std::vector<Node*>& roots) {
  std::unordered_map<Node*, int> deps;
  std::unordered_set<Node*> seen(roots.begin(), roots.end());
  std::vector<Node*> stack(roots.begin(), roots.end());
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next_edges()) {
      if (!e.valid()) continue;
      ++deps[e.node.get()];
      if (seen.insert(e.node.get()).second) stack.push_back(e.node.get());
    }
  }
  return deps;
}

void accumulate(std::vector<Tensor>& buffer, uint32_t slot, const Tensor& grad) {
  if (!grad.defined()) return;
  if (!buffer[slot].defined()) {
    buffer[slot] = grad;
  } else {
    buffer[slot] = buffer[slot] + grad;
  }
}

// For a node with one input and no post hooks (which would need the gradient it
// passes on): the gradient already summed for that input, when the engine holds
// it alone and it has the input's shape, dtype and device, for
// Node::accumulate_into; else null.
Tensor* summed_input_gradient(const Node& node, std::unordered_map<Node*, std::vector<Tensor>>& buffers) {
  if (node.next_edges().size() != 1 || !node.next_edges()[0].valid() || node.has_post_hooks()) return nullptr;
  const Edge& e = node.next_edges()[0];
  auto it = buffers.find(e.node.get());
  if (it == buffers.end()) return nullptr;
  Tensor& g = it->second[e.input_nr];
  const OutputMeta& meta = e.node->outputs()[e.input_nr];
  const bool fits = held_alone(g) && g.sizes() == meta.shape && g.dtype() == meta.dtype && g.device() == meta.device;
  return fits ? &g : nullptr;
}

// Gradients for outputs that got none become zeros (when any output got one).
bool fill_missing(const Node& node, std::vector<Tensor>& grads) {
  bool any = false;
  for (const Tensor& g : grads) any = any || g.defined();
  if (!any) return false;
  for (size_t i = 0; i < grads.size(); ++i) {
    if (grads[i].defined()) continue;
    const OutputMeta& m = node.outputs()[i];
    grads[i] = zeros(m.shape, {.dtype = m.dtype, .device = m.device});
  }
  return true;
}

// A Node may be a user's own (dtr/tensor/autograd/function.h), so what it returns is
// checked with errors that say what apply() must return.
void check_gradients(const Node& node, const std::vector<Tensor>& grad_inputs) {
  DTR_CHECK(grad_inputs.size() == node.next_edges().size() || grad_inputs.empty(),
            "backward: {}::apply returned {} gradients for its {} inputs; return one per input given to "
            "set_history, in that order (an undefined Tensor for an input that gets none)",
            node.name(), grad_inputs.size(), node.next_edges().size());
  for (size_t i = 0; i < grad_inputs.size(); ++i) {
    const Edge& e = node.next_edges()[i];
    if (!e.valid() || !grad_inputs[i].defined()) continue;
    const OutputMeta& expected = e.node->outputs()[e.input_nr];
    DTR_CHECK(grad_inputs[i].sizes() == expected.shape,
              "backward: {}::apply returned a gradient of shape {} for input {}, whose shape is {}; return "
              "each input's gradient in that input's shape (autograd::sum_to undoes broadcasting)",
              node.name(), shape_str(grad_inputs[i].sizes()), i, shape_str(expected.shape));
  }
}

void run_graph(const std::vector<Edge>& root_edges, const std::vector<Tensor>& root_grads,
               bool retain_graph) {
  std::vector<Node*> roots;
  for (const Edge& e : root_edges) roots.push_back(e.node.get());
  std::unordered_map<Node*, int> deps = count_dependencies(roots);
  std::unordered_map<Node*, std::vector<Tensor>> buffers;
  auto buffer_of = [&](Node* n) -> std::vector<Tensor>& {
    auto [it, inserted] = buffers.try_emplace(n);
    if (inserted) it->second.resize(n->outputs().size());
    return it->second;
  };
  for (size_t i = 0; i < root_edges.size(); ++i) {
    accumulate(buffer_of(root_edges[i].node.get()), root_edges[i].input_nr, root_grads[i]);
  }
  std::priority_queue<Node*, std::vector<Node*>, LaterFirst> ready;
  std::unordered_set<Node*> queued;
  for (Node* r : roots) {
    if (deps[r] == 0 && queued.insert(r).second) ready.push(r);
  }
  std::vector<std::shared_ptr<Node>> executed;
  NoGradGuard no_grad;
  while (!ready.empty()) {
    Node* node = ready.top();
    ready.pop();
    std::vector<Tensor> grads = std::move(buffer_of(node));
    buffers.erase(node);
    grads = node->run_pre_hooks(std::move(grads));
    std::vector<Tensor> grad_inputs;
    if (fill_missing(*node, grads)) {
      Tensor* summed = summed_input_gradient(*node, buffers);
      if (summed && node->accumulate_into(grads, *summed)) {
        // Added in place: nothing to pass on.
      } else if (node->has_post_hooks()) {
        grad_inputs = node->apply(grads);
        check_gradients(*node, grad_inputs);
        node->run_post_hooks(grad_inputs, grads);
      } else {
        // Without post hooks the node gets the only handles to its gradients, so that
        // AccumulateGrad can keep one as .grad instead of copying it.
        grad_inputs = node->apply(std::move(grads));
        check_gradients(*node, grad_inputs);
      }
    }
    executed.push_back(node->shared_from_this());
    for (size_t i = 0; i < node->next_edges().size(); ++i) {
      const Edge& e = node->next_edges()[i];
      if (!e.valid()) continue;
      if (i < grad_inputs.size()) accumulate(buffer_of(e.node.get()), e.input_nr, grad_inputs[i]);
      if (--deps[e.node.get()] == 0) ready.push(e.node.get());
    }
  }
  if (!retain_graph) {
    for (const auto& n : executed) n->release_saved();
  }
}

}  // namespace

void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, bool retain_graph) {
  DTR_CHECK(grads.empty() || grads.size() == roots.size(),
            "backward: {} gradients given for {} tensors", grads.size(), roots.size());
  std::vector<Edge> edges;
  std::vector<Tensor> root_grads;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& root = roots[i];
    Edge edge = gradient_edge(root);
    DTR_CHECK(edge.valid(),
              "backward: tensor {} (shape {}) does not require grad and has no grad_fn", i,
              shape_str(root.sizes()));
    Tensor g = i < grads.size() ? grads[i] : Tensor();
    if (!g.defined()) {
      DTR_CHECK(root.numel() == 1,
                "backward: a gradient can be implied only for a one-element tensor; tensor {} has "
                "shape {}, so pass its gradient",
                i, shape_str(root.sizes()));
      g = ones_like(root);
    }
    DTR_CHECK(g.sizes() == root.sizes(), "backward: gradient {} has shape {}, expected {}", i,
              shape_str(g.sizes()), shape_str(root.sizes()));
    edges.push_back(std::move(edge));
    root_grads.push_back(std::move(g));
  }
  // A backward called from inside a running one (a node's apply: activation
  // checkpointing's recomputation) runs its own graph to the end; the callbacks
  // it queues join the outer backward's, which runs them once it is done.
  if (t_state.running) {
    run_graph(edges, root_grads, retain_graph);
    return;
  }
  t_state.running = true;
  t_state.callbacks.clear();
  try {
    run_graph(edges, root_grads, retain_graph);
    // Callbacks may queue more callbacks; run until none are left.
    for (size_t i = 0; i < t_state.callbacks.size(); ++i) {
      auto fn = std::move(t_state.callbacks[i]);
      fn();
    }
  } catch (...) {
    t_state.running = false;
    t_state.callbacks.clear();
    throw;
  }
  t_state.running = false;
  t_state.callbacks.clear();
}

void queue_callback(std::function<void()> fn) {
  DTR_CHECK(t_state.running, "queue_callback: only callable while a backward is running");
  t_state.callbacks.push_back(std::move(fn));
}

bool in_backward() { return t_state.running; }

}  // namespace dtr::autograd
