// OpenMP thread management: ThreadScope restores the caller's setting, and release_thread_team
// hands back the helper threads a thread's team left behind (the app keeps one team, on its run
// thread: see core/model/thread_scope.h).
#include <catch2/catch.hpp>

#include <omp.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <thread>

#include "core/model/thread_scope.h"

namespace {

// The threads of this process, as the kernel lists them.
int thread_count() {
  int n = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

}  // namespace

TEST_CASE("ThreadScope sets the team size for its scope and restores the caller's", "[threads]") {
  const int before = omp_get_max_threads();
  {
    const hs::ThreadScope scope(1);
    CHECK(omp_get_max_threads() == 1);
  }
  CHECK(omp_get_max_threads() == before);
}

TEST_CASE("release_thread_team hands back the helper threads a team left behind", "[threads]") {
#ifdef KMP_VERSION_MAJOR
  // LLVM's libomp (a clang build, such as test.sh's sanitized stage) keeps one pool of helper
  // threads for the whole process, taken by whichever thread starts a team, and its soft pause puts
  // them to sleep rather than ending them: nothing is left behind per thread. What must hold there
  // is what the release is for under libgomp: teams started on new threads, one after another, do
  // not add threads.
  auto team_on_new_thread = [] {
    std::thread worker([] {
      const hs::ThreadScope scope(2);
      std::atomic<int> members{0};
#pragma omp parallel
      members += 1;
      REQUIRE(members == 2);
      hs::release_thread_team();
    });
    worker.join();
    return thread_count();
  };
  const int after_first = team_on_new_thread();
  for (int i = 0; i < 4; ++i) CHECK(team_on_new_thread() == after_first);
#else
  // libgomp. On a thread of its own, so that no team of the test runner's main thread is involved.
  int with_team = 0, after_release = 0, alone = 0;
  std::thread worker([&] {
    alone = thread_count();
    {
      const hs::ThreadScope scope(2);
      std::atomic<int> members{0};
#pragma omp parallel
      members += 1;
      REQUIRE(members == 2);
    }
    with_team = thread_count();  // the helper stays, asleep, for this thread's next region
    hs::release_thread_team();
    // The helper exits on its own schedule; give it a moment.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while ((after_release = thread_count()) > alone && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    hs::release_thread_team();  // a thread without a team: nothing happens
  });
  worker.join();
  CHECK(with_team == alone + 1);
  CHECK(after_release == alone);
#endif
}
