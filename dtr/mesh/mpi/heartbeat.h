// Heartbeats: which ranks can still be reached when a collective hangs. Every
// rank whose watchdog fires sends one small message to every other rank, on a
// communicator of its own, and waits a bounded window for theirs. Ranks that are
// alive and reachable are in the same state (their collective hangs too) and
// answer; a rank that died, hangs outside the collective, or sits behind a broken
// link does not. Runs beside the progress engine, so it needs MPI_THREAD_MULTIPLE.
#pragma once

#include <mpi.h>

#include <chrono>
#include <string>
#include <vector>

namespace dtr::mesh::mpi {

// Collective over MPI_COMM_WORLD: the communicator the heartbeats travel on (a
// duplicate whose errors return instead of aborting).
MPI_Comm create_heartbeat_comm();

// Sends a heartbeat to every other rank of `comm` and waits up to `window` for
// each one's; true for the ranks heard from (this rank included). Meant for a
// process about to end: requests still pending are left to the exit.
std::vector<bool> exchange_heartbeats(MPI_Comm comm, std::chrono::milliseconds window);

// "ranks 2, 3 (host b) sent no heartbeat within 1.0 s: unreachable, dead or
// hung; ranks 0, 1 (host a) did", from exchange_heartbeats' answer and each
// rank's host name.
std::string describe_heartbeats(const std::vector<bool>& heard, const std::vector<std::string>& host_of_rank,
                                std::chrono::milliseconds window);

}  // namespace dtr::mesh::mpi
