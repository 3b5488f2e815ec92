#include "dtr/mesh/distributed.h"

#include "dtr/base/error.h"
#include "dtr/base/log.h"
#include "dtr/mesh/mpi/heartbeat.h"
#include "dtr/mesh/mpi/mpi_process_group.h"
#include "dtr/mesh/mpi/mpi_progress.h"
#include "dtr/mesh/mpi/mpi_types.h"
#include "dtr/mesh/watchdog.h"
#include "dtr/tensor/factory.h"
#include "dtr/tensor/profiler.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#if DTR_WITH_CUDA
#include "dtr/tensor/cuda/cuda_runtime.h"
#endif
#if DTR_WITH_NCCL
#include "dtr/mesh/nccl/nccl_process_group.h"
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
  std::vector<int> host_of_rank;        // per world rank
  std::vector<std::string> host_names;  // per host
  MPI_Comm heartbeat = MPI_COMM_NULL;   // dtr/mesh/mpi/heartbeat.h
  std::shared_ptr<mesh::mpi::MpiProcessGroup> world_mpi;
  mesh::ProcessGroupPtr world_cuda;
};

std::mutex g_mutex;
State g_state;

// The world size that a launcher (Open MPI's mpirun, MPICH's Hydra) gave this
// process in its environment; 0 when no launcher started it.
int launcher_world_size() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}) {
    if (const char* value = std::getenv(name)) return std::atoi(value);
  }
  return 0;
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
  Tensor own_gpu = full({1}, cuda::device_count() >= g_state.local_world_size ? 1 : 0, {.dtype = DType::i32, .device = Device::cpu()});
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

// Every rank's host: a host is named by the lowest world rank of its node
// communicator, and hosts are numbered in that order. Collective over the world.
void learn_hosts(State& state, MPI_Comm node) {
  int leader = state.rank;
  MPI_Allreduce(MPI_IN_PLACE, &leader, 1, MPI_INT, MPI_MIN, node);
  std::vector<int> leaders(state.world_size);
  MPI_Allgather(&leader, 1, MPI_INT, leaders.data(), 1, MPI_INT, MPI_COMM_WORLD);
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int length = 0;
  MPI_Get_processor_name(name, &length);
  std::vector<char> names(static_cast<size_t>(state.world_size) * MPI_MAX_PROCESSOR_NAME);
  MPI_Allgather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, names.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR,
                MPI_COMM_WORLD);
  std::vector<int> host_of_leader(state.world_size, -1);
  state.host_of_rank.assign(state.world_size, -1);
  for (int r = 0; r < state.world_size; ++r) {
    int& host = host_of_leader[leaders[r]];
    if (host < 0) {  // leaders[r] <= r: first seen at its own rank
      host = static_cast<int>(state.host_names.size());
      const char* leader_name = names.data() + static_cast<size_t>(leaders[r]) * MPI_MAX_PROCESSOR_NAME;
      state.host_names.emplace_back(leader_name, strnlen(leader_name, MPI_MAX_PROCESSOR_NAME));
    }
    state.host_of_rank[r] = host;
  }
}

// A collective timeout's message names the ranks (and hosts) that no longer
// answer. Needs MPI_THREAD_MULTIPLE (the heartbeats run beside the progress
// engine). The diagnosis owns copies of what it needs: it runs on the watchdog
// thread, without g_mutex. Collective (creates the heartbeat communicator).
void install_timeout_diagnosis(State& state) {
  if (state.thread_level < MPI_THREAD_MULTIPLE) return;
  state.heartbeat = mesh::mpi::create_heartbeat_comm();
  std::vector<std::string> host_of_rank;
  for (int host : state.host_of_rank) host_of_rank.push_back(state.host_names[host]);
  mesh::set_timeout_diagnosis([comm = state.heartbeat, host_of_rank = std::move(host_of_rank)] {
    // Long enough for the other ranks' watchdogs to fire too (their collectives
    // started at about the same time), short against the timeout itself.
    const auto window = std::clamp(mesh::collective_timeout() / 4, std::chrono::milliseconds(1000),
                                   std::chrono::milliseconds(10'000));
    return mesh::mpi::describe_heartbeats(mesh::mpi::exchange_heartbeats(comm, window), host_of_rank, window);
  });
}

// init() with g_mutex held; `api` is the function the user called.
void init_locked(const InitOptions& options, std::string_view api) {
  if (g_state.initialized) return;
  State state;
  int already = 0;
  MPI_Initialized(&already);
  int finalized = 0;
  MPI_Finalized(&finalized);
  DTR_CHECK(!finalized, "{}: MPI was finalized in this process (dtr::distributed::finalize()), and it cannot start again",
            api);
  if (already) {
    MPI_Query_thread(&state.thread_level);
  } else {
    int code = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &state.thread_level);
    DTR_CHECK(code == MPI_SUCCESS, "{}: MPI_Init_thread failed with code {}", api, code);
    state.owns_mpi = true;
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &state.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &state.world_size);
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, state.rank, MPI_INFO_NULL, &node);
  MPI_Comm_rank(node, &state.local_rank);
  MPI_Comm_size(node, &state.local_world_size);
  learn_hosts(state, node);
  MPI_Comm_free(&node);
  set_log_rank(state.rank);
  profiler::set_rank(state.rank);

  mesh::mpi::create_mpi_types();
  mesh::mpi::ProgressEngine::instance().start(state.thread_level);
  MPI_Comm world = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &world);
  state.world_mpi = mesh::mpi::MpiProcessGroup::create(world, "world");
  install_timeout_diagnosis(state);
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

void finalize_at_exit() {
  try {
    finalize();
  } catch (const std::exception& error) {
    DTR_LOG_WARN("distributed finalize at exit: {}", error.what());
  }
}

// The world for `api`, with g_mutex held: a world of one when nothing started it.
void ensure_initialized_locked(std::string_view api) {
  if (g_state.initialized) return;
  const int launched = launcher_world_size();
  DTR_CHECK(launched <= 1,
            "{}: this process is one of {} that a launcher (mpirun) started, but dtr::distributed::init() has not "
            "been called: call it on every rank first, since the ranks form the world together",
            api, launched);
  init_locked({}, api);
  // After init, so that this runs before the statics init() created are destroyed.
  static const bool finalize_registered = std::atexit(finalize_at_exit) == 0;
  DTR_CHECK(finalize_registered, "{}: could not register dtr::distributed::finalize() to run at exit", api);
  DTR_LOG_DEBUG("{}: no dtr::distributed::init() was called; running as a world of one", api);
}

}  // namespace

void init(const InitOptions& options) {
  std::lock_guard lock(g_mutex);
  init_locked(options, "dtr::distributed::init");
}

void ensure_initialized(std::string_view api) {
  std::lock_guard lock(g_mutex);
  ensure_initialized_locked(api);
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
  mesh::set_timeout_diagnosis(nullptr);
  if (g_state.heartbeat != MPI_COMM_NULL) MPI_Comm_free(&g_state.heartbeat);
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
  ensure_initialized_locked("dtr::distributed::rank");
  return g_state.rank;
}

int world_size() {
  std::lock_guard lock(g_mutex);
  ensure_initialized_locked("dtr::distributed::world_size");
  return g_state.world_size;
}

int local_rank() {
  std::lock_guard lock(g_mutex);
  ensure_initialized_locked("dtr::distributed::local_rank");
  return g_state.local_rank;
}

int local_world_size() {
  std::lock_guard lock(g_mutex);
  ensure_initialized_locked("dtr::distributed::local_world_size");
  return g_state.local_world_size;
}

int num_hosts() {
  std::lock_guard lock(g_mutex);
  ensure_initialized_locked("dtr::distributed::num_hosts");
  return static_cast<int>(g_state.host_names.size());
}

int host_of(int rank) {
  std::lock_guard lock(g_mutex);
  ensure_initialized_locked("dtr::distributed::host_of");
  DTR_CHECK(rank >= 0 && rank < g_state.world_size, "dtr::distributed::host_of: rank {} is not in [0, {})", rank,
            g_state.world_size);
  return g_state.host_of_rank[rank];
}

std::string host_name(int host) {
  std::lock_guard lock(g_mutex);
  ensure_initialized_locked("dtr::distributed::host_name");
  DTR_CHECK(host >= 0 && host < static_cast<int>(g_state.host_names.size()),
            "dtr::distributed::host_name: host {} is not in [0, {})", host, g_state.host_names.size());
  return g_state.host_names[host];
}

mesh::ProcessGroupPtr world_group(DeviceType device_type) {
  std::lock_guard lock(g_mutex);
  ensure_initialized_locked("dtr::distributed::world_group");
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
