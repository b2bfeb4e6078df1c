// Reading the unit dashboards `scan --units` writes (docs/scan.md, "Unit dashboards"): the
// folder's index.json and one unit's u{unit}.json. The folder may come from anywhere, so every
// field is checked: a message names the file and the field, nothing is trusted for a size.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace hs {

struct UnitDashboardExample {
  int64_t index = 0;        // input index
  int position = 0, first = 0;
  std::vector<std::string> tokens;  // display text
  std::vector<float> values;        // the unit's activation at each
  float max_value = 0.0f;
};

struct UnitDashboardQuantile {
  double quantile_low = 0, quantile_high = 0;
  float act_low = 0, act_high = 0;
  int64_t size = 0;
  std::vector<UnitDashboardExample> examples;
};

struct UnitDashboard {
  int64_t unit = 0;
  int index = 0, layer = 0;
  std::string hook;
  float act_max = 0.0f;
  double frac_nonzero = 0.0;
  int64_t active_count = 0, positions = 0;
  std::vector<double> bin_edges;     // bar_heights.size() + 1 (or empty)
  std::vector<int64_t> bar_heights;
  struct Logit {
    int32_t token = 0;
    std::string text;
    float value = 0.0f;
  };
  std::vector<Logit> top_logits, bottom_logits;
  std::vector<UnitDashboardExample> examples_top;
  std::vector<UnitDashboardQuantile> examples_quantiles;
};

struct UnitDashboardIndex {
  std::filesystem::path folder;
  nlohmann::json model;   // the scan's model settings (name, fingerprint, shape)
  nlohmann::json source;  // kind "mlp" | "sae", sae, units, groups [{layer, width, hook | hook_in, hook_out}]
  int64_t units = 0, positions = 0;
  std::string fingerprint() const { return model.value("fingerprint", std::string()); }
};

// Parses one unit's JSON; `source` names it in messages. Throws hs::Error.
UnitDashboard parse_unit_dashboard(std::string_view text, const std::string& source);
// Parses index.json. Throws hs::Error.
UnitDashboardIndex parse_unit_dashboard_index(std::string_view text, const std::string& source);

// The folder's index, and one unit's dashboard from it. Throw hs::Error naming the file.
UnitDashboardIndex read_unit_dashboard_index(const std::filesystem::path& folder);
UnitDashboard read_unit_dashboard(const UnitDashboardIndex& index, int64_t unit);

}  // namespace hs
