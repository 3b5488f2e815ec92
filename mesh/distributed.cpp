#include "mesh/distributed.h"

#include "base/error.h"
#include "base/log.h"
#include "mesh/mpi/mpi_process_group.h"
#include "mesh/mpi/mpi_progress.h"
#include "mesh/mpi/mpi_types.h"
#include "mesh/watchdog.h"
#include "tensor/factory.h"
#include "tensor/profiler.h"

#include <mpi.h>

#include <cstdlib>
#include <mutex>
#include <string>

#if DTR_WITH_CUDA
#include "tensor/cuda/cuda_runtime.h"
#endif
#if DTR_WITH_NCCL
#include "mesh/nccl/nccl_process_group.h"
#endif

namespace dtr::distributed {

namespace {

struct State {
  bool initialized = false;
  bool owns_mpi = false;
  int thread_level = 0;
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::shared_ptr<mesh::mpi::MpiProcessGroup> world_mpi;
  mesh::ProcessGroupPtr world_cuda;
};

std::mutex g_mutex;
State g_state;

void check_initialized(const char* what) {
  DTR_CHECK(g_state.initialized, "dtr::distributed::{}: call dtr::distributed::init() first", what);
}

// DTR_CUDA_BACKEND: "nccl", "mpi", or unset / "auto" (NCCL where every rank of
// every node has a GPU of its own, since NCCL refuses two ranks on one device).
std::string cuda_backend_setting() {
  const char* env = std::getenv("DTR_CUDA_BACKEND");
  std::string value = env ? env : "auto";
  DTR_CHECK(value == "auto" || value == "nccl" || value == "mpi",
            "DTR_CUDA_BACKEND: expected nccl, mpi or auto, got '{}' (rank {})", value, g_state.rank);
  return value;
}

// Collective over the world (every rank decides alike). Called with g_mutex held.
mesh::ProcessGroupPtr make_world_cuda() {
  const std::string setting = cuda_backend_setting();
#if DTR_WITH_NCCL
  // Through the world group (as the NCCL bootstrap does), so that every MPI call
  // goes through the progress engine's serialisation.
  Tensor own_gpu = full({1}, cuda::device_count() >= g_state.local_world_size ? 1 : 0, {.dtype = DType::i32});
  g_state.world_mpi->all_reduce(own_gpu, mesh::ReduceOp::min())->wait();
  const int every_rank_own_gpu = own_gpu.to_vector<int32_t>()[0];
  if (setting == "nccl") {
    DTR_CHECK(every_rank_own_gpu == 1,
              "DTR_CUDA_BACKEND=nccl: NCCL needs one GPU per rank, but a node runs more ranks than it has GPUs "
              "(this rank {}: {} ranks on its node, {} GPU(s)); use DTR_CUDA_BACKEND=mpi to stage through host memory",
              g_state.rank, g_state.local_world_size, cuda::device_count());
  }
  if (setting != "mpi" && every_rank_own_gpu == 1) {
    return mesh::nccl::create_nccl_group(g_state.world_mpi, "world");
  }
  if (setting == "auto" && g_state.rank == 0) {
    DTR_LOG_INFO("CUDA tensors communicate over MPI through pinned host memory: some node runs more ranks than "
                 "it has GPUs, which NCCL refuses");
  }
#else
  DTR_CHECK(setting != "nccl", "DTR_CUDA_BACKEND=nccl: this build of dtr has no NCCL (rank {})", g_state.rank);
#endif
  return g_state.world_mpi;
}

}  // namespace

void init(const InitOptions& options) {
  std::lock_guard lock(g_mutex);
  if (g_state.initialized) return;
  State state;
  int already = 0;
  MPI_Initialized(&already);
  if (already) {
    MPI_Query_thread(&state.thread_level);
  } else {
    int code = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &state.thread_level);
    DTR_CHECK(code == MPI_SUCCESS, "dtr::distributed::init: MPI_Init_thread failed with code {}", code);
    state.owns_mpi = true;
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &state.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &state.world_size);
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, state.rank, MPI_INFO_NULL, &node);
  MPI_Comm_rank(node, &state.local_rank);
  MPI_Comm_size(node, &state.local_world_size);
  MPI_Comm_free(&node);
  set_log_rank(state.rank);
  profiler::set_rank(state.rank);

  mesh::mpi::create_mpi_types();
  mesh::mpi::ProgressEngine::instance().start(state.thread_level);
  MPI_Comm world = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &world);
  state.world_mpi = mesh::mpi::MpiProcessGroup::create(world, "world");
#if DTR_WITH_CUDA
  if (options.bind_cuda_device && cuda::device_count() > 0) {
    cuda::set_device(state.local_rank % cuda::device_count());
  }
#else
  (void)options;
#endif
  state.initialized = true;
  g_state = std::move(state);
  DTR_LOG_DEBUG("distributed init: rank {} of {}, local rank {} of {}, MPI thread level {}", g_state.rank,
                g_state.world_size, g_state.local_rank, g_state.local_world_size, g_state.thread_level);
}

void finalize() {
  std::lock_guard lock(g_mutex);
  if (!g_state.initialized) return;
  profiler::finalize();  // DTR_PROFILE: write this rank's trace (no communication)
  auto& engine = mesh::mpi::ProgressEngine::instance();
  if (size_t pending = engine.pending_count()) {
    DTR_LOG_WARN("distributed finalize: {} collectives still pending; wait() on them before finalize()", pending);
  }
  mesh::stop_watchdog();
  g_state.world_cuda.reset();
  g_state.world_mpi.reset();
  engine.stop();
  mesh::mpi::free_mpi_types();
  if (g_state.owns_mpi) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  }
  g_state = State{};
}

bool is_initialized() {
  std::lock_guard lock(g_mutex);
  return g_state.initialized;
}

int rank() {
  std::lock_guard lock(g_mutex);
  check_initialized("rank");
  return g_state.rank;
}

int world_size() {
  std::lock_guard lock(g_mutex);
  check_initialized("world_size");
  return g_state.world_size;
}

int local_rank() {
  std::lock_guard lock(g_mutex);
  check_initialized("local_rank");
  return g_state.local_rank;
}

int local_world_size() {
  std::lock_guard lock(g_mutex);
  check_initialized("local_world_size");
  return g_state.local_world_size;
}

mesh::ProcessGroupPtr world_group(DeviceType device_type) {
  std::lock_guard lock(g_mutex);
  check_initialized("world_group");
  switch (device_type) {
    case DeviceType::cpu: return g_state.world_mpi;
    case DeviceType::cuda:
      if (!g_state.world_cuda) g_state.world_cuda = make_world_cuda();
      return g_state.world_cuda;
    case DeviceType::meta: break;
  }
  DTR_FAIL("world_group: no process group for the meta device (it holds no data to communicate)");
}

}  // namespace dtr::distributed
