// ctest runs each Catch2 test case by its name (catch_discover_tests), and CMake splits a list at
// ';': a name with a semicolon was registered cut short, matched no test case, and "passed"
// without running (three tests ran nowhere but by hand until this check). No name may hold one.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "test_support.h"

TEST_CASE("no test case name holds a semicolon, which ctest would cut the name at", "[suite]") {
  const std::regex test_case(R"(TEST_CASE\(\s*"([^"]*)\")");
  int files = 0, cases = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(hs::test::source_dir() / "tests")) {
    if (entry.path().extension() != ".cpp") continue;
    ++files;
    std::ifstream in(entry.path());
    std::stringstream text;
    text << in.rdbuf();
    const std::string s = text.str();
    for (auto it = std::sregex_iterator(s.begin(), s.end(), test_case); it != std::sregex_iterator(); ++it) {
      ++cases;
      const std::string name = (*it)[1];
      INFO(entry.path().filename().string() << ": \"" << name << "\"");
      CHECK(name.find(';') == std::string::npos);
    }
  }
  CHECK(files > 10);
  CHECK(cases > 100);
}
