// The backward engine: runs the graph from given roots to the leaves.
//
// Nodes run once all gradients flowing into them are summed (a dependency
// count over the part of the graph reachable from the roots); among ready
// nodes the most recently created runs first, which follows the reverse of the
// forward order. Gradients for an output that received none are zeros when a
// node's other outputs did receive some; a node none of whose outputs got a
// gradient is skipped. Without retain_graph, every node that ran frees its saved
// tensors afterwards.
//
// Callbacks queued during a backward (queue_callback) run once, in order, after
// the whole graph has run: FSDP waits for its last reduce-scatters there.
//
// Re-entrant backward: a node's apply() may itself call backward() (activation
// checkpointing recomputes a module's forward there and back-propagates through
// the recomputed graph). The inner backward runs its own graph to completion
// before returning; callbacks queued during it are appended to the outer
// backward's and run once, at the end of the outermost backward. in_backward()
// is true throughout.
#pragma once

#include "dtr/tensor/tensor.h"

#include <functional>
#include <vector>

namespace dtr::autograd {

// grads[i] is the gradient of roots[i]; an undefined one means 1 for a one-element root.
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads = {},
              bool retain_graph = false);

// Queues fn to run at the end of the backward now running (an error outside one).
void queue_callback(std::function<void()> fn);
bool in_backward();

}  // namespace dtr::autograd
