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

}  // namespace hs
