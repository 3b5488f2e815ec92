#include "dtr/mesh/mpi/heartbeat.h"

#include "dtr/base/error.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>
#include <thread>

namespace dtr::mesh::mpi {

namespace {

constexpr int kTag = 7;

// "ranks 0, 1 (host a), rank 4 (host c)": `ranks` grouped by host, in rank order.
std::string ranks_on_hosts(const std::vector<int>& ranks, const std::vector<std::string>& host_of_rank) {
  std::vector<std::pair<std::string, std::vector<int>>> groups;
  for (int r : ranks) {
    const std::string& host = host_of_rank.at(static_cast<size_t>(r));
    if (groups.empty() || groups.back().first != host) groups.push_back({host, {}});
    groups.back().second.push_back(r);
  }
  std::vector<std::string> parts;
  for (const auto& [host, members] : groups) {
    parts.push_back(fmt::format("rank{} {} (host {})", members.size() == 1 ? "" : "s", fmt::join(members, ", "), host));
  }
  return fmt::format("{}", fmt::join(parts, ", "));
}

}  // namespace

MPI_Comm create_heartbeat_comm() {
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  return comm;
}

std::vector<bool> exchange_heartbeats(MPI_Comm comm, std::chrono::milliseconds window) {
  int rank = 0, size = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  // Static: the sends may still be in flight when the process exits.
  static int beat = 1;
  std::vector<int> received(static_cast<size_t>(size), 0);
  std::vector<MPI_Request> receives(static_cast<size_t>(size), MPI_REQUEST_NULL);
  std::vector<bool> heard(static_cast<size_t>(size), false);
  heard[static_cast<size_t>(rank)] = true;
  for (int r = 0; r < size; ++r) {
    if (r == rank) continue;
    MPI_Request send = MPI_REQUEST_NULL;
    MPI_Isend(&beat, 1, MPI_INT, r, kTag, comm, &send);
    MPI_Request_free(&send);
    MPI_Irecv(&received[static_cast<size_t>(r)], 1, MPI_INT, r, kTag, comm, &receives[static_cast<size_t>(r)]);
  }
  const auto deadline = std::chrono::steady_clock::now() + window;
  int missing = size - 1;
  while (missing > 0 && std::chrono::steady_clock::now() < deadline) {
    for (int r = 0; r < size; ++r) {
      MPI_Request& request = receives[static_cast<size_t>(r)];
      if (request == MPI_REQUEST_NULL) continue;
      int done = 0;
      if (MPI_Test(&request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) continue;
      if (done) {
        heard[static_cast<size_t>(r)] = true;
        --missing;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return heard;
}

std::string describe_heartbeats(const std::vector<bool>& heard, const std::vector<std::string>& host_of_rank,
                                std::chrono::milliseconds window) {
  std::vector<int> silent, answered;
  for (int r = 0; r < static_cast<int>(heard.size()); ++r) (heard[static_cast<size_t>(r)] ? answered : silent).push_back(r);
  const double seconds = std::chrono::duration<double>(window).count();
  if (silent.empty()) {
    return fmt::format("every rank answered a heartbeat within {:.1f} s (all reachable: look for a rank that issued "
                       "different collectives)",
                       seconds);
  }
  return fmt::format("{} sent no heartbeat within {:.1f} s: unreachable, dead or hung; {} did",
                     ranks_on_hosts(silent, host_of_rank), seconds, ranks_on_hosts(answered, host_of_rank));
}

}  // namespace dtr::mesh::mpi
