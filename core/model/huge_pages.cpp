#include "core/model/huge_pages.h"

#include <sys/mman.h>

#include <cstdint>

namespace hs {

void advise_huge_pages(void* p, size_t bytes) {
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  const uintptr_t lo = (reinterpret_cast<uintptr_t>(p) + kHuge - 1) / kHuge * kHuge;
  const uintptr_t hi = (reinterpret_cast<uintptr_t>(p) + bytes) / kHuge * kHuge;
  if (lo < hi) madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_HUGEPAGE);
}

}  // namespace hs
