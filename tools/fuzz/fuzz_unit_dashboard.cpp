// Fuzz target: the unit dashboards the app reads (core/io/unit_dashboards.h), a folder that may
// come from anywhere. The input is tried as one unit's JSON and as the folder's index.json: either
// it is refused with hs::Error, or what it gives holds together (the histogram's edges one more
// than its bars, each example's values one per token and its position inside its window).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/error.h"
#include "core/io/unit_dashboards.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const hs::UnitDashboard d = hs::parse_unit_dashboard(text, "u0.json");
    if (!d.bar_heights.empty() && d.bin_edges.size() != d.bar_heights.size() + 1) __builtin_trap();
    const auto check = [](const hs::UnitDashboardExample& e) {
      if (e.values.size() != e.tokens.size() || e.position < e.first ||
          e.position - e.first >= static_cast<int>(e.tokens.size()))
        __builtin_trap();
    };
    for (const auto& e : d.examples_top) check(e);
    for (const auto& q : d.examples_quantiles)
      for (const auto& e : q.examples) check(e);
  } catch (const hs::Error&) {
  }
  try {
    const hs::UnitDashboardIndex x = hs::parse_unit_dashboard_index(text, "index.json");
    if (x.units < 0 || !x.source.is_object()) __builtin_trap();
  } catch (const hs::Error&) {
  }
  return 0;
}
