// dtr-train: the main training program (see trainer.h for what a run does and
// cli.h for the flags). Run under mpirun: `mpirun -np 2 dtr-train`.
#include "cli.h"
#include "estimate.h"
#include "stop_signal.h"
#include "trainer.h"

#include "dtr/kernels/cpu/cpu_level.h"
#include "dtr/mesh/distributed.h"

#include <cstdio>
#include <exception>

int main(int argc, char** argv) {
  // First: a stop signal during start-up is kept for the first step boundary.
  const dtr::train::StopSignalScope stop_signals;
  dtr::distributed::init();
  const int rank = dtr::distributed::rank();
  dtr::train::CliResult cli = dtr::train::parse_cli(argc, argv, dtr::distributed::world_size());
  int code = cli.exit_code;
  if (cli.config) {
    // A DTR_CPU_CAPABILITY that names no level, or one this node's CPU cannot run, is an
    // input error like a bad flag. Nodes may differ, so each rank checks and speaks for
    // itself (a rank that exits makes mpirun end the job).
    try {
      dtr::kernels::cpu::active_cpu_level();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "dtr-train (rank %d): %s\n", rank, e.what());
      std::fflush(stderr);
      std::_Exit(2);
    }
  }
  if (!cli.config) {
    // Every rank parsed the same argv and agrees; rank 0 speaks.
    if (rank == 0) std::fprintf(code == 0 ? stdout : stderr, "%s\n", cli.message.c_str());
  } else {
    try {
      code = cli.config->estimate_only ? dtr::train::run_estimate(*cli.config, rank)
                                       : dtr::train::run_training(*cli.config);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "dtr-train (rank %d): error: %s\n", rank, e.what());
      std::fflush(stderr);
      std::_Exit(1);  // the other ranks may be inside a collective: end this one now, mpirun ends the job
    }
  }
  dtr::distributed::finalize();
  return code;
}
