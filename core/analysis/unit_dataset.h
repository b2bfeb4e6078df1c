// Unit dashboards from a data set (`scan --units mlp|sae:DIR`, docs/scan.md "Unit dashboards"):
// for every unit (an MLP neuron or an SAE/transcoder latent) over every position of every text
// prompt, how often it is active (activation > 0), its maximum, a histogram of its positive
// activations, its top activating contexts and a uniform sample of its active positions from
// which the quantile examples are drawn at output.
//
// Everything is exactly mergeable, so shards, resumed runs and one process give the same state
// bit for bit:
// - counts and histograms are integers, and the histogram's bins do not depend on the data (a
//   positive float's bin is read from its exponent and top two mantissa bits);
// - the maximum is a max; the top list is ordered by (activation desc, input index, position), a
//   total order, so the top k of the union of two lists is the top k of the whole;
// - the sample is a bottom-k sample of active positions by a hash of (input index, position).
// The per-position work is O(active units): an inactive unit is skipped after one comparison, an
// active one costs a counter, a bin and two threshold comparisons unless it enters a list.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "core/tensor/eigen.h"

namespace hs {

// One context kept for a unit: the window of tokens around `position` and the unit's activation
// over it.
struct UnitExample {
  float act = 0.0f;              // the unit's activation at `position`
  int64_t index = 0;             // input index (line number - 1)
  int32_t position = 0;
  int32_t first = 0;             // the position of tokens[0]
  uint64_t hash = 0;             // the sampling key of (index, position)
  std::vector<int32_t> tokens;   // positions first .. first + size - 1 (at most the window)
  std::vector<float> acts;       // the unit's activation at each of them
};

class UnitDatasetStats {
 public:
  static constexpr int kTopK = 20;
  static constexpr int kDefaultSamples = 32;
  static constexpr int kDefaultWindow = 12;   // tokens per example: up to 8 before .. 3 after
  static constexpr int kAfter = 3;            // tokens kept after the position
  // Histogram bins: 4 per octave over [2^kMinExp, 2^kMaxExp); bin 0 also takes anything smaller,
  // the last bin anything larger.
  static constexpr int kMinExp = -16, kMaxExp = 16, kBinsPerOctave = 4;
  static constexpr int kBins = (kMaxExp - kMinExp) * kBinsPerOctave;

  UnitDatasetStats() = default;
  UnitDatasetStats(int64_t n_units, int samples = kDefaultSamples, int window = kDefaultWindow);

  bool empty() const { return n_units_ == 0; }
  int64_t n_units() const { return n_units_; }
  int sample_capacity() const { return samples_; }
  int window() const { return window_; }
  int64_t positions() const { return positions_; }

  // One prompt's activations of units first_unit .. first_unit + acts.cols() - 1, acts [pos,
  // units]. Call once per group of units per prompt; count_positions once per prompt.
  void add(int64_t index, std::span<const int32_t> tokens, int64_t first_unit, const RowMatrixXf& acts);
  void count_positions(int64_t n) { positions_ += n; }

  void merge(const UnitDatasetStats& other);

  // Per unit.
  int64_t active(int64_t u) const { return active_[static_cast<size_t>(u)]; }
  float act_max(int64_t u) const { return max_[static_cast<size_t>(u)]; }
  const int64_t* histogram(int64_t u) const { return hist_.data() + u * kBins; }
  const std::vector<UnitExample>& top(int64_t u) const { return top_[static_cast<size_t>(u)]; }
  const std::vector<UnitExample>& sample(int64_t u) const { return sample_[static_cast<size_t>(u)]; }
  // The bin of a positive activation, and a bin's lower edge.
  static int bin_of(float x);
  static double bin_low(int b);

  nlohmann::json state() const;
  static UnitDatasetStats from_state(const nlohmann::json& j, int64_t n_units);

 private:
  UnitExample make_example(int64_t index, std::span<const int32_t> tokens, int p, float act, uint64_t hash,
                           const RowMatrixXf& acts, int col) const;

  int64_t n_units_ = 0;
  int samples_ = 0, window_ = 0;
  int64_t positions_ = 0;
  std::vector<int64_t> active_;                 // [unit]
  std::vector<float> max_;                      // [unit] 0 before any active position
  std::vector<int64_t> hist_;                   // [unit, kBins]
  std::vector<std::vector<UnitExample>> top_;   // [unit] sorted, at most kTopK
  std::vector<std::vector<UnitExample>> sample_;  // [unit] by (hash, index, position), at most samples_
};

}  // namespace hs

namespace hs {

class ActivationCache;
class Model;
struct Sae;

// The units a scan describes (`--units`): "mlp" (every layer's neurons, mlp.hook_post), "mlp:L"
// (layer L's) or "sae:DIR" (the latents of an SAE folder, or of every layer of a transcoder set).
// Units are numbered group after group (layer order).
struct UnitSource {
  struct Group {
    int layer = 0;
    int64_t first_unit = 0, width = 0;
    std::shared_ptr<const Sae> sae;  // null: neurons
  };
  std::string kind;                  // "mlp" or "sae"
  std::string sae_name;              // the folder's name
  std::vector<Group> groups;
  int64_t n_units = 0;
  // What resume and merge compare (no paths: shards run on other machines).
  nlohmann::json identity() const;
  // This prompt's activations of a group's units, [pos, width].
  RowMatrixXf activations(const ActivationCache& cache, const Group& g) const;
};
// Throws hs::Error naming what is wrong: an unknown spec, a layer the model lacks, an SAE folder
// that cannot be read or does not fit the model.
UnitSource resolve_unit_source(const Model& model, const std::string& spec);

}  // namespace hs

namespace hs {

// Writes the dashboards (docs/scan.md "Unit dashboards") to `folder`: index.json and one JSON per
// unit, u{unit}.json, in Neuronpedia's feature-dashboard layout. The folder is written as a
// temporary beside it and renamed into place when complete (an older one is replaced).
// `settings` is the scan's settings (model, units).
void write_unit_dashboards(const Model& model, const UnitSource& source, const UnitDatasetStats& stats,
                           const nlohmann::json& settings, const std::filesystem::path& folder);

// One unit's dashboard JSON (what write_unit_dashboards writes for unit u).
nlohmann::json unit_dashboard_json(const Model& model, const UnitSource& source, const UnitDatasetStats& stats,
                                   int64_t u);

// The folder beside a scan output: OUT.json -> OUT.units (OUT.npz -> OUT.units).
std::filesystem::path unit_dashboards_folder(const std::filesystem::path& out);

}  // namespace hs
