// Runs Catch2's test session. Catch2's implementation is compiled once
// (catch_session.cpp) for every test executable; each kind of main() is its own
// small file (catch_main.cpp, mpi_main.cpp, tests/cpu_levels/main.cpp) calling this.
#pragma once

namespace dtr::testing {

// Catch::Session().run(argc, argv): the tests that the command line selects; the
// number of failed tests, or 255 at most.
int run_catch_session(int argc, char** argv);

}  // namespace dtr::testing
