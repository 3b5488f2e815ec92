// Test helper: runs a program with a SIGTERM already pending, as if one had been
// sent the moment the process started. It blocks SIGTERM, sends it to itself (it
// stays pending, and a blocked, pending signal survives exec), and execs
// argv[1..]. A program that installs its handler and unblocks the signal then
// receives it at once; one that never does never sees it.
//   exec_with_pending_sigterm PROGRAM [ARGS...]
#include <csignal>
#include <cstdio>

#include <signal.h>
#include <unistd.h>

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: exec_with_pending_sigterm PROGRAM [ARGS...]\n");
    return 2;
  }
  sigset_t term;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  if (sigprocmask(SIG_BLOCK, &term, nullptr) != 0 || kill(getpid(), SIGTERM) != 0) {
    std::perror("exec_with_pending_sigterm");
    return 2;
  }
  execv(argv[1], argv + 1);
  std::perror("exec_with_pending_sigterm: exec");
  return 2;
}
