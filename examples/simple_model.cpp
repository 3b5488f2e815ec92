// simple_model: the shortest complete use of dtr. The seed documents' SimpleModel
// (Linear 1024 -> 1024, ReLU, Linear 1024 -> 10) sharded with fully_shard over the
// ranks and trained with Adam on synthetic data, each rank on its slice of the batch.
//   mpirun -np 2 build/release/examples/simple_model [steps=30]
// Exits 1 unless the loss (averaged over the ranks) fell below half its start.
#include <dtr/dtr.h>
#include <dtr/nn/simple_model.h>

#include <fmt/format.h>

#include <cstdlib>

int main(int argc, char** argv) {
  using namespace dtr;
  distributed::init();  // under mpirun, or alone as one rank
  const int rank = distributed::rank(), n = distributed::world_size(), steps = argc > 1 ? std::atoi(argv[1]) : 30;
  manual_seed(0);  // the same initial model and data on every rank
  nn::SimpleModel model;
  for (auto& [name, child] : model.named_children()) {
    if (child->num_parameters() > 0) fsdp::fully_shard(*child);  // fc1, fc2: a parameter group each
  }
  fsdp::fully_shard(model);  // then the root
  nn::optim::Adam opt(model.parameters(), {.lr = 1e-3});  // updates this rank's shards only
  const int64_t local = 32;
  Tensor x = randn({local * n, 1024}).narrow(0, rank * local, local);  // this rank's rows of the global batch
  Tensor labels = argmax(x.narrow(1, 0, 10), 1);                        // class: the largest of the first 10 features
  double first = 0, last = 0;
  for (int step = 0; step < steps; ++step) {
    Tensor loss = cross_entropy(model(x), labels);
    opt.zero_grad();
    loss.backward();  // gradients are reduce-scattered into the shards' .grad
    opt.step();
    Tensor mean = full({1}, loss.item(), {.dtype = DType::f64});
    distributed::world_group()->all_reduce(mean, mesh::ReduceOp::avg())->wait();
    last = mean.item();
    if (step == 0) first = last;
    if (rank == 0 && (step % 5 == 0 || step == steps - 1)) fmt::print("step {:3d}  loss {:.4f}\n", step, last);
  }
  distributed::finalize();
  return last < 0.5 * first ? 0 : 1;
}
