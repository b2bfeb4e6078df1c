// Transparent huge pages, by advice.
#pragma once

#include <cstddef>

namespace hs {

// Asks the kernel for 2 MB pages over the whole 2 MB ranges inside [p, p + bytes) (madvise
// MADV_HUGEPAGE): one TLB entry and one page fault per 2 MB instead of per 4 KB. Advice only; a
// block without a whole aligned 2 MB range inside is left alone. Call it before the block is
// first touched.
void advise_huge_pages(void* p, size_t bytes);

}  // namespace hs
