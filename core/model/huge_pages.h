// Transparent huge pages, by advice.
#pragma once

#include <cstddef>

namespace hs {

// Asks the kernel for huge pages over the whole aligned huge-page ranges inside [p, p + bytes)
// (madvise MADV_HUGEPAGE): one TLB entry and one page fault per huge page instead of one per
// ordinary page. Advice only; a block without a whole aligned huge-page range inside is left
// alone. Call it before the block is first touched.
void advise_huge_pages(void* p, size_t bytes);

}  // namespace hs
