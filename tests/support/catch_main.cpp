// main() of the one-process test executables.
#include "tests/support/catch_session.h"

int main(int argc, char** argv) { return dtr::testing::run_catch_session(argc, argv); }
