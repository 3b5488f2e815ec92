// Watchdog: the guard against silent hangs. Every collective registers its Work
// here; a background thread checks them, and a collective still pending after the
// timeout (DTR_COLLECTIVE_TIMEOUT seconds, default 600) ends the process with an
// error naming the group, the op and its sequence number. The process exits with
// status 1; mpirun then takes the whole job down. So a rank that died, left or
// hangs makes every other rank fail within the timeout instead of waiting forever.
// (Not MPI_Abort: with a rank already inside MPI_Finalize, Open MPI 4.1's mpirun
// was seen to hang after MPI_Abort, while a plain non-zero exit always ended the job.)
#pragma once

#include "dtr/mesh/work.h"

#include <chrono>
#include <functional>
#include <string>

namespace dtr::mesh {

// The timeout in force: DTR_COLLECTIVE_TIMEOUT (seconds, may be fractional) read
// at first use, unless set_collective_timeout() was called.
std::chrono::milliseconds collective_timeout();
void set_collective_timeout(std::chrono::milliseconds timeout);

// Starts watching `work` (the watchdog keeps only a weak reference).
void watch(const WorkPtr& work);

// What the watchdog calls after logging a timeout, before std::_Exit(1) (e.g. to
// write a flight record). It should not block.
void set_timeout_handler(std::function<void()> handler);

// What the watchdog adds to a timeout's message: which ranks can still be
// reached. distributed::init installs a heartbeat exchange over MPI
// (dtr/mesh/mpi/heartbeat.h); it runs on the watchdog thread, for a bounded time.
void set_timeout_diagnosis(std::function<std::string()> diagnosis);

// Ends the process as the watchdog does on a timeout: logs `message`, runs the
// timeout handler, exits with status 1. For waits the watchdog cannot see (the
// DTR_DEBUG_COLLECTIVES exchange, which runs before its collective exists).
[[noreturn]] void end_on_timeout(const std::string& message);

// Stops the watchdog thread (distributed::finalize calls it).
void stop_watchdog();

}  // namespace dtr::mesh
