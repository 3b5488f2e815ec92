#include "stop_signal.h"

#include <csignal>

#include <signal.h>

namespace dtr::train {

namespace {

volatile std::sig_atomic_t g_stop_signal = 0;

constexpr int kSignals[] = {SIGINT, SIGTERM, SIGUSR1};
struct sigaction g_previous[3];
struct sigaction g_previous_pipe;

extern "C" void on_stop_signal(int signal) {
  // Only a second Ctrl-C forces the exit: launchers may deliver SIGTERM more than
  // once while terminating a job (and escalate to SIGKILL themselves).
  if (g_stop_signal != 0 && signal == SIGINT) {
    // Second signal: the default action now (sigaction and raise are async-signal-safe).
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(signal, &dfl, nullptr);
    raise(signal);
    return;
  }
  if (g_stop_signal == 0) g_stop_signal = signal;
}

}  // namespace

StopSignalScope::StopSignalScope() {
  g_stop_signal = 0;
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // system calls in MPI and file I/O resume after the handler
  for (int i = 0; i < 3; ++i) sigaction(kSignals[i], &action, &g_previous[i]);
  // A launcher tearing the job down may close rank 0's stdout before the
  // checkpoint is saved: a failed write must not kill the process (SIGPIPE).
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  sigaction(SIGPIPE, &ignore, &g_previous_pipe);
  sigset_t ours;
  sigemptyset(&ours);
  for (int s : kSignals) sigaddset(&ours, s);
  sigprocmask(SIG_UNBLOCK, &ours, nullptr);
}

void end_graceful_stop() {
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  for (int s : kSignals) sigaction(s, &dfl, nullptr);
}

StopSignalScope::~StopSignalScope() {
  for (int i = 0; i < 3; ++i) sigaction(kSignals[i], &g_previous[i], nullptr);
  sigaction(SIGPIPE, &g_previous_pipe, nullptr);
}

int stop_signal() { return g_stop_signal; }

const char* stop_signal_name(int signal) {
  switch (signal) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGUSR1: return "SIGUSR1";
    default: return "a signal";
  }
}

}  // namespace dtr::train
