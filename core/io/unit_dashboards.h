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

struct UnitDashboardGroup {
  int layer = 0;
  int64_t first = 0, width = 0;  // its units are first .. first + width - 1
  std::string hook_in, hook_out;  // a neuron group's: both its mlp.hook_post
  std::string architecture;       // an SAE's
};
struct UnitDashboardIndex {
  std::filesystem::path folder;
  std::vector<UnitDashboardGroup> groups;  // checked: their widths add up to `units`
  nlohmann::json model;   // the scan's model settings (name, fingerprint, shape)
  nlohmann::json source;  // kind "mlp" | "sae", sae, units, groups [{layer, width, hook | hook_in, hook_out}]
  int64_t units = 0, positions = 0;
  std::string fingerprint() const { return model.value("fingerprint", std::string()); }
};

// Which units of the window a folder describes: a Neurons view's layer, or one SAE (its folder's
// name, hooks, width, architecture and layer, as `scan --units sae:DIR` writes them).
struct DashboardUnitsQuery {
  std::string kind;  // "mlp" | "sae"
  int layer = -1;    // neurons: the layer; an SAE: its layer (-1 when it has none)
  int64_t width = 0;
  std::string hook_in, hook_out, architecture, sae_name;  // an SAE's
};
// The folder's unit number for unit `i` of the query's units, or -1 when the folder is of another
// model (its fingerprint is not `model_fingerprint`), another kind of unit, another layer or SAE,
// or `i` is out of range.
int64_t dashboard_unit(const UnitDashboardIndex& index, const std::string& model_fingerprint,
                       const DashboardUnitsQuery& query, int64_t i);

// Parses one unit's JSON; `source` names it in messages. Throws hs::Error.
UnitDashboard parse_unit_dashboard(std::string_view text, const std::string& source);
// Parses index.json. Throws hs::Error.
UnitDashboardIndex parse_unit_dashboard_index(std::string_view text, const std::string& source);

// The folder's index, and one unit's dashboard from it. Throw hs::Error naming the file.
UnitDashboardIndex read_unit_dashboard_index(const std::filesystem::path& folder);
UnitDashboard read_unit_dashboard(const UnitDashboardIndex& index, int64_t unit);

}  // namespace hs
