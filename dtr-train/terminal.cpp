#include "terminal.h"

#include <fmt/format.h>

#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace dtr::train {

namespace {

// The parent of process `pid` ("pid (comm) state ppid ..." in /proc/<pid>/stat;
// comm may hold spaces and parentheses), or 0 when unknown.
pid_t parent_of(pid_t pid) {
  std::ifstream file(fmt::format("/proc/{}/stat", pid));
  std::string stat;
  std::getline(file, stat);
  const size_t comm_end = stat.rfind(')');
  if (comm_end == std::string::npos) return 0;
  std::istringstream rest(stat.substr(comm_end + 1));
  char state = 0;
  pid_t parent = 0;
  rest >> state >> parent;
  return rest ? parent : 0;
}

// Whether the stdout of the nearest ancestor whose stdout is not this process's
// own (the launcher, past any wrapper that shares the rank's stdout) is a terminal.
bool launcher_stdout_is_terminal() {
  struct stat own {};
  if (fstat(STDOUT_FILENO, &own) != 0) return false;
  pid_t pid = getppid();
  for (int depth = 0; depth < 32 && pid > 0; ++depth) {
    struct stat theirs {};
    if (stat(fmt::format("/proc/{}/fd/1", pid).c_str(), &theirs) != 0) return false;
    if (theirs.st_dev != own.st_dev || theirs.st_ino != own.st_ino) {
      return S_ISCHR(theirs.st_mode) && is_terminal_device(theirs.st_rdev);
    }
    pid = parent_of(pid);
  }
  return false;
}

}  // namespace

bool is_terminal_device(dev_t device) {
  const unsigned kind = major(device);
  return (kind >= 136 && kind <= 143) || kind == 4 || kind == 3 || (kind == 5 && minor(device) <= 1);
}

StdoutFacts probe_stdout() {
  StdoutFacts facts;
  facts.is_terminal = isatty(STDOUT_FILENO) != 0;
  facts.under_launcher = std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMIX_RANK") != nullptr;
  // mpirun --output-filename copies each rank's output to files as well: lines there.
  if (facts.is_terminal && facts.under_launcher && std::getenv("OMPI_MCA_orte_output_filename") == nullptr) {
    facts.launcher_on_terminal = launcher_stdout_is_terminal();
  }
  return facts;
}

bool shows_progress_bar(ProgressBar bar, const StdoutFacts& facts) {
  switch (bar) {
    case ProgressBar::if_terminal:
      return facts.is_terminal && (!facts.under_launcher || facts.launcher_on_terminal);
    case ProgressBar::on:
      return true;
    case ProgressBar::off:
      break;
  }
  return false;
}

}  // namespace dtr::train
