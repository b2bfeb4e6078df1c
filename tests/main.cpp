#include "tests/test_common.h"

int main(int argc, char** argv) { return hs::test::run_catch(argc, argv); }
