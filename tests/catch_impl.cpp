// Catch2's own implementation, compiled once for both test programs, and the session their mains
// start (Catch declares Session only where its implementation is).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "tests/test_common.h"

int hs::test::run_catch(int argc, char** argv) { return Catch::Session().run(argc, argv); }
