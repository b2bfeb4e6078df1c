// The memory held by the activation caches' position blocks (position_rows.h), process-wide.
//
// How a run's memory is kept alive is checked with it (a cache extended key after key must not
// keep its predecessors' blocks: tests/core/test_position_blocks.cpp), and the typing benchmark
// reports it beside the resident set (tools/bench/hs_bench_keys.cpp --long), so that growth of
// the resident set that the live blocks do not show reads as memory nobody uses.
#pragma once

#include <cstddef>

namespace hs {

struct PositionBlockStats {
  size_t live_blocks = 0;    // blocks some PositionRows or PatternRows still holds
  size_t live_bytes = 0;     // their bytes (small blocks: with their shared pointer's bookkeeping)
  size_t pooled_blocks = 0;  // freed large blocks kept for a later run (position_rows.cpp: BlockPool)
  size_t pooled_bytes = 0;
  size_t fresh_large_blocks = 0;  // large blocks allocated anew so far, not taken from the pool
};
PositionBlockStats position_block_stats();

}  // namespace hs
