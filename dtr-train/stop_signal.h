// Graceful stop for dtr-train: SIGINT (Ctrl-C), SIGTERM and SIGUSR1 ask the job
// to save a checkpoint at the next step boundary and exit cleanly. main() installs
// the handlers first thing, so a signal that arrives during start-up (MPI init,
// loading data, resuming) stops the job at its first step boundary too.
//
// The handler only records the signal number (async-signal-safe); the training
// loop reads it with stop_signal() once per step and all ranks agree on it in a
// collective (any rank's signal stops every rank at the same step, so a signal
// delivered to one rank is enough and no rank is left waiting in a collective).
// A second SIGINT (Ctrl-C twice) while a stop is pending restores the default
// action and re-raises it: the process ends at once (mpirun then ends the job).
// Repeated SIGTERM/SIGUSR1 are ignored (launchers may send SIGTERM twice and
// escalate to SIGKILL themselves), and SIGPIPE is ignored while the scope lives.
//
// How signals reach the ranks under Open MPI 4's mpirun: SIGUSR1 sent to mpirun
// is forwarded to every rank as is; SIGINT/SIGTERM sent to mpirun make it
// terminate the job: SIGTERM to every rank after odls_base_sigkill_timeout
// seconds (default 1) and SIGKILL the same time later, so give a large model
// time to save with `mpirun --mca odls_base_sigkill_timeout 30` (mpirun itself
// then exits non-zero). SIGTERM/SIGINT sent to any one rank's process
// (`kill -TERM <pid>`) stop the job with every rank exiting 0.
#pragma once

namespace dtr::train {

// Installs the handlers for the lifetime of the object and restores the previous
// dispositions after; clears any pending stop request on construction. It also
// unblocks the three signals (a launcher may start the process with them blocked),
// so one sent before the process started is handled now.
class StopSignalScope {
 public:
  StopSignalScope();
  ~StopSignalScope();
  StopSignalScope(const StopSignalScope&) = delete;
  StopSignalScope& operator=(const StopSignalScope&) = delete;
};

// The signal number received on this process since the scope began, or 0.
int stop_signal();

// From now on SIGINT, SIGTERM and SIGUSR1 take their default action again (they
// end the process at once): for the work after the last checkpoint.
void end_graceful_stop();

// "SIGINT", "SIGTERM", "SIGUSR1", else "a signal".
const char* stop_signal_name(int signal);

}  // namespace dtr::train
