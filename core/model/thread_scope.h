// Sets the calling thread's OpenMP team size for one piece of work and restores it afterwards.
// Eigen's products follow it too (it reads omp_get_max_threads() unless Eigen::setNbThreads was
// called). OpenMP's setting is per calling thread, so concurrent runs do not disturb each other.
#pragma once

#include <omp.h>

namespace hs {

class ThreadScope {
 public:
  explicit ThreadScope(int n) : saved_(omp_get_max_threads()) { omp_set_num_threads(n); }
  ~ThreadScope() { omp_set_num_threads(saved_); }
  ThreadScope(const ThreadScope&) = delete;
  ThreadScope& operator=(const ThreadScope&) = delete;

 private:
  int saved_;
};

// libgomp keeps the helper threads of every thread that ever ran a team of two or more, and once
// those outnumber the cores it stops letting helpers spin between parallel regions: each region
// then wakes its helpers from sleep, often onto its master's core, and a forward pass slows down
// badly (docs/benchmarks.md, session 9). So one thread runs the multi-threaded work (the
// app's run thread); any other thread that had to use a team (a load, a scan, a long analysis)
// hands its helpers back when done. Cheap, and a no-op for a thread that never had a team.
// (LLVM's libomp, in a clang build, keeps one helper pool for the whole process instead; there a
// soft pause only puts the pool to sleep, and nothing per thread needs handing back.)
inline void release_thread_team() { omp_pause_resource_all(omp_pause_soft); }

}  // namespace hs
