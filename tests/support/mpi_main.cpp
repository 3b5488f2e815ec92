// main() of the multi-rank test executables: every rank runs the same Catch2
// session between distributed::init() and finalize(). Failures print on the rank
// that saw them; mpirun's exit code is non-zero when any rank failed.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "dtr/mesh/distributed.h"

int main(int argc, char** argv) {
  dtr::distributed::init();
  int result = Catch::Session().run(argc, argv);
  dtr::distributed::finalize();
  return result;
}
