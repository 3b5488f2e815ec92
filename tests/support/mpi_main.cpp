// main() of the multi-rank test executables: every rank runs the same Catch2
// session between distributed::init() and finalize(). Failures print on the rank
// that saw them; mpirun's exit code is non-zero when any rank failed.
#include "dtr/mesh/distributed.h"
#include "tests/support/catch_session.h"

int main(int argc, char** argv) {
  dtr::distributed::init();
  int result = dtr::testing::run_catch_session(argc, argv);
  dtr::distributed::finalize();
  return result;
}
