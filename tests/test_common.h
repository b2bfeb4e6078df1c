// What the core tests (tests/core/test_support.h) and the GUI tests (tests/ui/ui_test_support.h)
// share: the folder a test process writes its files in, whether the build is sanitized, and the
// test runner their mains start.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <system_error>

namespace hs::test {

// The ASan + UBSan build, where a few tests size their work down (a sample of lengths, a shorter
// prompt) to what the sanitizers run in reasonable time; the Release build runs them in full.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kSanitized = true;
#elif defined(__has_feature)
inline constexpr bool kSanitized = __has_feature(address_sanitizer);
#else
inline constexpr bool kSanitized = false;
#endif

// A folder of this process's own under the temp dir, made on first use and removed with
// everything in it when the process exits: ctest runs each test case as a process of its own,
// and a run must leave the temp dir as it found it, even after a failed REQUIRE skipped a test's
// own clean-up.
inline const std::filesystem::path& scratch_dir() {
  struct Folder {
    pid_t owner = ::getpid();
    std::filesystem::path path = std::filesystem::temp_directory_path() / ("headscope_test_" + std::to_string(owner));
    Folder() {
      std::filesystem::remove_all(path);  // left by a killed process that had the same pid
      std::filesystem::create_directories(path);
    }
    ~Folder() {
      if (::getpid() != owner) return;  // a forked child exiting leaves its parent's files alone
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  };
  static const Folder folder;
  return folder.path;
}

// Runs the test cases named on the command line (Catch2's session, tests/catch_impl.cpp).
int run_catch(int argc, char** argv);

// A copy of the model folder `from` in `to` (replaced if it exists). With `flip_from_end` > 0, the
// lowest bit of the byte that many bytes before the end of the copy's model.safetensors is flipped:
// the same family, shape and name, one weight different (tests of a model's fingerprint).
inline void copy_model_folder(const std::filesystem::path& from, const std::filesystem::path& to,
                              std::uintmax_t flip_from_end = 0) {
  std::filesystem::remove_all(to);
  std::filesystem::create_directories(to.parent_path());
  std::filesystem::copy(from, to, std::filesystem::copy_options::recursive);
  if (flip_from_end == 0) return;
  const std::filesystem::path weights = to / "model.safetensors";
  std::fstream f(weights, std::ios::in | std::ios::out | std::ios::binary);
  const auto at = static_cast<std::streamoff>(std::filesystem::file_size(weights) - flip_from_end);
  char byte = 0;
  f.seekg(at);
  f.read(&byte, 1);
  byte = static_cast<char>(byte ^ 1);
  f.seekp(at);
  f.write(&byte, 1);
  if (!f.good()) throw std::runtime_error("could not change a byte of " + weights.string());
}

}  // namespace hs::test
