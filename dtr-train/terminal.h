// Whether dtr-train's output ends on a terminal: what --progress-bar auto decides
// on (a bar redrawn with '\r' belongs on a terminal, not in a log file).
//
// Run alone, that is isatty(stdout). Under mpirun it is not: Open MPI gives each
// rank's stdout a pseudo-terminal of its own and copies what the rank writes to
// mpirun's stdout, whatever that is (a terminal, a pipe, a file), so isatty is true
// on the rank even for `mpirun ... > log` (ORTE's odls sets usepty from a build-time
// default, OPAL_ENABLE_PTY_SUPPORT; stderr is a pipe; see open-mpi/ompi issue
// #7868, "mpiexec always reports stdout as a terminal"). Nothing in the rank's
// environment tells where mpirun's stdout goes, so under a launcher (the
// OMPI_COMM_WORLD_SIZE or PMIX_RANK environment variable set) it is looked up
// instead: the nearest ancestor process whose stdout is not the rank's own is the
// launcher (mpirun on its own host; an orted daemon, whose stdout is no terminal,
// on other hosts), and the output ends on a terminal when that stdout is a terminal
// device. Whatever cannot be read (no /proc, another user's process) counts as no
// terminal: progress lines only; so does mpirun --output-filename (which copies the
// output to files as well; OMPI_MCA_orte_output_filename set).
#pragma once

#include "config.h"

#include <sys/types.h>

namespace dtr::train {

// What --progress-bar auto looks at.
struct StdoutFacts {
  bool is_terminal = false;           // isatty(stdout)
  bool under_launcher = false;        // started by mpirun (or another PMIx launcher)
  bool launcher_on_terminal = false;  // the launcher's stdout is a terminal (false when unknown)
};

// Those facts for this process (reads the environment and, under a launcher, /proc).
StdoutFacts probe_stdout();

// Whether to redraw a progress bar between the progress lines: always with on,
// never with off; with auto when stdout is a terminal and, under a launcher, the
// launcher's stdout is one too.
bool shows_progress_bar(ProgressBar bar, const StdoutFacts& facts);

// Whether the character device `device` is a terminal, by its Linux device number:
// a Unix98 pseudo-terminal (/dev/pts/N: majors 136-143, as terminal emulators,
// ssh, tmux and screen give), a virtual console or serial port (major 4), /dev/tty
// or /dev/console (major 5, minors 0 and 1), or a legacy BSD pseudo-terminal (3).
bool is_terminal_device(dev_t device);

}  // namespace dtr::train
