// Ops on DTensors: each takes DTensors and returns a DTensor whose placements
// follow from the inputs' by a sharding propagation rule, like PyTorch DTensor's
// op dispatch. An op redistributes its inputs to the placements its rule picks
// (differentiably), runs the local op of tensor/ops on the local tensors and
// wraps the local result; the rule's decision is cached per (op, arguments,
// input specs) (dtr/dtensor/sharding/rule_cache.h). Gradients flow to the inputs
// with the usual convention (a DTensor's gradient has its placements, Partial
// becoming Replicate).
//
// Rules, per mesh dim (the result's placements follow):
//   unary, scalar ops, cast   placements kept; Partial(sum) is kept by linear ops
//                             (neg, mul/div by a scalar, cast between floating
//                             dtypes) and reduced to Replicate before the others
//   binary (broadcasting)     a Shard of a non-broadcast dim in either input wins:
//                             the other input is sharded the same way (or made
//                             Replicate where it lacks that dim / has size 1);
//                             Partial + Partial and Partial -/* Replicate stay Partial
//                             (add, sub; mul, div by a Replicate divisor)
//   matmul (a [.., m, k] . b [k, n], or equal-batch [.., m, k] . [.., k, n])
//                             Shard(batch or m) . Replicate -> Shard(same dim)
//                             Replicate . Shard(n)          -> Shard(last)
//                             Shard(k) . Shard(k)           -> Partial(sum)
//                             Partial . Replicate (either side) -> Partial(sum)
//                             Replicate . Replicate         -> Replicate
//   linear(x, W [out, in], b) as matmul(x, W^T) + b: W Shard(0) gives Shard(last)
//                             with b Shard(0); Shard(in) gives Partial with the
//                             bias turned Partial so it is added once
//   sum / mean over dims      a sharded reduced dim gives Partial(sum) (mean
//                             divides by the global count); other shards move
//                             with their dim
//   softmax / log_softmax / layer_norm / rms_norm
//                             shards of dims other than the normalised one are
//                             kept; that dim, and Partial, become Replicate;
//                             weight and bias are Replicate
//   embedding(table [V, D], indices)
//                             table Shard(0) (row-sharded vocab): indices
//                             Replicate, each rank looks up its rows and zeroes
//                             the rest -> Partial(sum); table Shard(1) -> Shard(last);
//                             table Replicate with indices Shard(d) -> Shard(d)
//   reshape / view            a Shard(d) whose dim survives the reshape (same size,
//                             same product of the dims before it) moves to the
//                             new position; Partial(sum) is kept
// Where no rule applies (e.g. matmul with 1-D or broadcast batch operands, a
// reshape that splits or merges a sharded dim), the inputs are redistributed to
// Replicate, a warning naming the op is logged once, and the result is Replicate.
//
// All DTensor inputs of an op must be on the same mesh (an error names both);
// dtypes and shapes must be what the local op requires (its errors apply).
#pragma once

#include "dtr/dtensor/dtensor.h"
#include "dtr/tensor/ops/elementwise.h"

#include <cstdint>
#include <vector>

namespace dtr::dtensor {

// --- unary (floating-only ones as in dtr/tensor/ops/elementwise.h) ---
DTensor neg(const DTensor& x);
DTensor abs(const DTensor& x);
DTensor exp(const DTensor& x);
DTensor log(const DTensor& x);
DTensor sqrt(const DTensor& x);
DTensor rsqrt(const DTensor& x);
DTensor square(const DTensor& x);
DTensor tanh(const DTensor& x);
DTensor sigmoid(const DTensor& x);
DTensor relu(const DTensor& x);
DTensor gelu(const DTensor& x, GeluApproximation approximate = GeluApproximation::none);
DTensor silu(const DTensor& x);

// --- with a scalar ---
DTensor add(const DTensor& a, Scalar b);
DTensor mul(const DTensor& a, Scalar b);
DTensor div(const DTensor& a, Scalar b);
DTensor pow(const DTensor& a, Scalar b);

// --- binary, with broadcasting ---
DTensor add(const DTensor& a, const DTensor& b);
DTensor sub(const DTensor& a, const DTensor& b);
DTensor mul(const DTensor& a, const DTensor& b);
DTensor div(const DTensor& a, const DTensor& b);
DTensor maximum(const DTensor& a, const DTensor& b);
DTensor minimum(const DTensor& a, const DTensor& b);

// A copy in `dtype`, like Tensor::to(dtype).
DTensor to(const DTensor& x, DType dtype);

// --- matrix products ---
DTensor matmul(const DTensor& a, const DTensor& b);
// x [..., in] . weight^T [in, out] + bias [out]; bias may be undefined (DTensor{}).
DTensor linear(const DTensor& x, const DTensor& weight, const DTensor& bias = {});

// --- reductions (dims may be negative; empty dims: every dim) ---
DTensor sum(const DTensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
DTensor mean(const DTensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);

// --- normalisation (over `dim` for softmax, over the last dim for the norms) ---
DTensor softmax(const DTensor& x, int64_t dim = -1);
DTensor log_softmax(const DTensor& x, int64_t dim = -1);
// weight and bias: [x.size(-1)] DTensors, or undefined for none.
DTensor layer_norm(const DTensor& x, const DTensor& weight = {}, const DTensor& bias = {}, double eps = 1e-5);
DTensor rms_norm(const DTensor& x, const DTensor& weight = {}, double eps = 1e-6);

// Rows of table [V, D] by i64 indices (any shape); result indices.shape + [D].
DTensor embedding(const DTensor& table, const DTensor& indices);

// --- shape ---
// The global shape changes to `shape` (-1 infers one dim); local data is reshaped
// (a view when possible). view is the same op (torch's view refuses layouts that
// need a copy; locally a copy is made then, as reshape does).
DTensor reshape(const DTensor& x, Shape shape);
DTensor view(const DTensor& x, Shape shape);

}  // namespace dtr::dtensor
