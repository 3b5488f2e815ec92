// A program that provokes a collective that can never complete, to check that the
// watchdog ends the job with an error naming the collective instead of hanging.
// CTest runs it under mpirun with DTR_COLLECTIVE_TIMEOUT=2 and looks for the
// watchdog's message in the output.
//   collective_fault_probe hang        the last rank sleeps instead of joining an all_reduce
//   collective_fault_probe early_exit  the last rank dies (exits without finalize) before it
//   collective_fault_probe loop        every rank all-reduces in a loop for up to 120 s,
//                                      printing "looping" once (a test then cuts a host off)
//   collective_fault_probe hang_nccl   as hang, on CUDA tensors over NCCL (exit 77, skipped,
//                                      where a node has fewer GPUs than ranks or no NCCL)
// A hung rank is caught by the watchdog on the others; a dead rank is caught by
// mpirun itself (it ends the job when a rank exits without MPI_Finalize) or by the
// watchdog, whichever comes first. Either way the job ends instead of hanging.
#include "dtr/mesh/distributed.h"
#include "dtr/tensor/factory.h"

#if DTR_WITH_NCCL
#include "dtr/tensor/cuda/cuda_runtime.h"
#endif

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode != "hang" && mode != "early_exit" && mode != "loop" && mode != "hang_nccl") {
    std::fprintf(stderr, "usage: collective_fault_probe hang|early_exit|loop|hang_nccl\n");
    return 2;
  }
  dtr::distributed::init();
  auto world = dtr::distributed::world_group();
  if (mode == "hang_nccl") {
#if DTR_WITH_NCCL
    if (dtr::cuda::device_count() < dtr::distributed::local_world_size()) {
      std::printf("skipped: NCCL needs one GPU per rank (%d GPU(s), %d ranks on this node)\n",
                  dtr::cuda::device_count(), dtr::distributed::local_world_size());
      dtr::distributed::finalize();
      return 77;
    }
    auto nccl = dtr::distributed::world_group(dtr::DeviceType::cuda);
    dtr::Tensor t = dtr::ones({1024}).to(dtr::Device::cuda(dtr::cuda::current_device()));
    nccl->all_reduce(t)->wait();  // #1 on every rank
    if (nccl->rank() == nccl->size() - 1) {
      std::this_thread::sleep_for(std::chrono::seconds(60));
      std::_Exit(0);
    }
    nccl->all_reduce(t)->wait();  // #2: its DTR_DEBUG_COLLECTIVES check waits for the last rank
    std::fprintf(stderr, "the all_reduce completed without the last rank: the probe is broken\n");
    return 3;
#else
    std::printf("skipped: this build has no NCCL\n");
    dtr::distributed::finalize();
    return 77;
#endif
  }
  if (mode == "loop") {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    for (int i = 0; std::chrono::steady_clock::now() < end; ++i) {
      dtr::Tensor t = dtr::ones({1024});
      world->all_reduce(t)->wait();
      if (i == 0 && world->rank() == 0) {
        std::printf("looping\n");
        std::fflush(stdout);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    std::fprintf(stderr, "the loop ran for 120 s: no host was cut off\n");
    return 3;
  }
  const bool odd_one_out = world->rank() == world->size() - 1;
  world->barrier()->wait();  // sequence #1 on every rank
  if (odd_one_out) {
    if (mode == "hang") std::this_thread::sleep_for(std::chrono::seconds(60));
    std::_Exit(0);
  }
  dtr::Tensor t = dtr::ones({1024});
  world->all_reduce(t)->wait();  // #2: never completes
  std::fprintf(stderr, "the all_reduce completed without the last rank: the probe is broken\n");
  return 3;
}
