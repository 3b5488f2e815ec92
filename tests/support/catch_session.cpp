// Catch2's implementation (its main() left out) and the session every test
// executable's main() runs.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "tests/support/catch_session.h"

namespace dtr::testing {

int run_catch_session(int argc, char** argv) { return Catch::Session().run(argc, argv); }

}  // namespace dtr::testing
