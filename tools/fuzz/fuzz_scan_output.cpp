// Fuzz target: the scan output JSON that `scan --resume` and `merge` read back
// (scan_output_from_text, core/io/scan_io.h), which may have been written on another machine or
// edited. Either it is refused with hs::Error, or the state it gives
//   - holds every aggregate in the shape the model of its "shape" implies (a resumed scan indexes
//     those cells),
//   - writes back (scan_to_json) to JSON that reads again to the same state, bit for bit,
//   - can be resumed (one more value added to every cell) and merged, as it is and as both shards
//     of a two-shard run, each refused with hs::Error or done, never undefined behaviour.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/analysis/scan.h"
#include "core/error.h"
#include "core/io/scan_io.h"

namespace {

std::pair<int, int> expected_shape(const std::string& name, const hs::ScanState& s) {
  if (name == "loss_per_position") return {std::max(s.n_ctx - 1, 1), 1};
  if (name == "patching_resid_pre") return {s.n_layers, s.n_ctx};
  return {s.n_layers, s.n_heads};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  hs::ScanState s;
  try {
    s = hs::scan_output_from_text(text, "fuzz.json");
  } catch (const hs::Error&) {
    return 0;
  }
  for (const std::string& name : hs::scan_aggregate_names()) {
    const auto it = s.grids.find(name);
    if (it == s.grids.end()) __builtin_trap();
    if (std::make_pair(it->second.rows(), it->second.cols()) != expected_shape(name, s)) __builtin_trap();
  }
  if (s.shard_count < 1 || s.shard_index < 0 || s.shard_index >= s.shard_count) __builtin_trap();

  const nlohmann::json written = hs::scan_to_json(s, {});
  try {
    if (hs::scan_to_json(hs::scan_from_json(written, "round trip"), {}) != written) __builtin_trap();
  } catch (const hs::Error&) {
    __builtin_trap();  // what a scan writes, it must read back
  }

  try {
    (void)hs::merge_scans({s}, {"fuzz.json"});
  } catch (const hs::Error&) {
  }
  hs::ScanState a = s, b = s;
  a.merged_shards.clear();
  a.complete = true;
  a.shard_count = 2;
  b = a;
  b.shard_index = 1;
  a.shard_index = 0;
  try {
    (void)hs::merge_scans({a, b}, {"a.json", "b.json"});
  } catch (const hs::Error&) {
  }

  // A resume continues the accumulators from the file's state.
  for (auto& [name, g] : s.grids)
    if (g.rows() > 0 && g.cols() > 0) g.add(g.rows() - 1, g.cols() - 1, 1.0);
  return 0;
}
