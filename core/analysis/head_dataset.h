// What each head does over a data set (`scan --heads`, docs/scan.md "Heads over a data set"):
// per head, where its attention goes by relative distance, which tokens it reads from (keys) and
// at which tokens it looks away from the BOS sink (queries), how spread its attention is, and
// example contexts from every decile of its output norm ||z_h W_O[h]||, each with its pattern row.
//
// Everything is exactly mergeable, so shards and resumed runs give one process's result bit for
// bit:
// - attention mass is summed as integers in units of 2^-32 (each float32 weight rounded once to
//   that grid, at most 1.2e-10 off): integer sums do not depend on the order of additions, which
//   sums of doubles do;
// - the entropy distribution is a histogram of integer counts;
// - the examples are a bottom-k sample: every eligible (prompt, position) gets a 64-bit hash of its
//   input index and position, and the `samples` smallest hashes are kept. The union of two shards'
//   samples, cut back to the smallest, is the sample of the whole, whatever the split;
// - only the output norm's mean is a floating-point accumulator (MomentGrid, to rounding).
//
// Queries are the positions q >= 1 of each prompt: query 0 has one key, so its pattern is [1]
// whatever the head does (as for the attention_entropy aggregate).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/analysis/moment_grid.h"

namespace hs {

class ActivationCache;
class Model;

// One token's totals for one head, as the dashboard lists them.
struct HeadTokenMass {
  int32_t token = 0;
  std::string text;     // the token as the views show it (visible whitespace)
  double mass = 0.0;    // total attention mass (see HeadDatasetStats::key_tokens / query_tokens)
  int64_t count = 0;    // how often the token occurred in that role
};

// A sampled context: the tokens up to and including the query position.
struct HeadSample {
  uint64_t hash = 0;
  int64_t index = 0;             // input index (line number - 1)
  int position = 0;              // the query position in its prompt
  int first = 0;                 // the position of tokens[0] (the window starts there)
  std::vector<int32_t> tokens;   // positions first .. position
};

// One example of a head's decile: a sample, the head's output norm there and its pattern row over
// the sample's window (pattern[i] is the attention from `position` to key first + i; the mass on
// keys before the window is 1 - sum(pattern)).
struct HeadExample {
  const HeadSample* sample = nullptr;
  float norm = 0.0f;
  std::vector<float> pattern;
};

struct HeadDecile {
  int decile = 0;                    // 0 .. 9, lowest norms first
  float norm_low = 0.0f, norm_high = 0.0f;  // the range of the sample's norms in this decile
  std::vector<HeadExample> examples;  // the decile's members, smallest hash first (reproducible)
};

class HeadDatasetStats {
 public:
  static constexpr int kEntropyBins = 40;      // over [0, ln n_ctx]
  static constexpr int kDefaultSamples = 200;  // positions kept for examples
  static constexpr int kDefaultWindow = 64;    // tokens of context kept per example (and pattern entries)
  static constexpr double kMassUnit = 4294967296.0;  // 2^32 units per unit of attention

  HeadDatasetStats() = default;
  HeadDatasetStats(int n_layers, int n_heads, int n_ctx, int samples = kDefaultSamples, int window = kDefaultWindow);

  bool empty() const { return n_layers_ == 0; }
  int n_layers() const { return n_layers_; }
  int n_heads() const { return n_heads_; }
  int n_ctx() const { return n_ctx_; }
  int sample_capacity() const { return samples_; }
  int window() const { return window_; }

  // One prompt's run: `index` is its input index (the sampling key; the same in every shard),
  // `bos` whether position 0 is a prepended BOS (its key is then left out of the key-token
  // totals and counted as the sink in the query totals). Single-threaded; the products are small.
  void add_prompt(const Model& model, int64_t index, const ActivationCache& cache, bool bos);

  // The statistics of the union of both data sets. Throws hs::Error for another shape or
  // sampling setup.
  void merge(const HeadDatasetStats& other);

  // ---- what the dashboard and the JSON show ----
  int64_t queries() const { return queries_; }  // query positions counted (the same for every head)
  // Attention mass at each distance d = query - key, 0 .. n_ctx - 1, summed over every query,
  // divided by queries(): the mean attention a query pays at distance d. Sums to 1 over d.
  std::vector<double> distance_profile(int l, int h) const;
  // Mean distance: sum_d d * profile[d].
  double mean_distance(int l, int h) const;
  // The per-query entropy (nats) as a histogram: kEntropyBins counts over [0, ln n_ctx].
  const int64_t* entropy_histogram(int l, int h) const;
  double entropy_bin_width() const;
  // Mean output norm ||z_h W_O[h]|| over every query (NaN before any).
  double mean_output_norm(int l, int h) const;
  double output_norm_std(int l, int h) const;
  // Tokens by the total attention they receive as keys from queries q >= 1 (the BOS key of a BOS
  // prompt left out: as a sink it would top every list), largest first; count = occurrences at
  // any position but a prepended BOS (every position is a key of some query q >= 1).
  std::vector<HeadTokenMass> key_tokens(int l, int h, int top) const;
  // Tokens by the total attention their queries pay to keys other than the BOS sink (with BOS; all
  // of it without), largest first; count = occurrences as a query (positions >= 1).
  std::vector<HeadTokenMass> query_tokens(int l, int h, int top) const;
  // The sample, sorted by hash, and each head's deciles of it by output norm.
  const std::vector<HeadSample>& samples() const { return sample_; }
  std::vector<HeadDecile> deciles(int l, int h) const;
  // A token's display text (visible whitespace), for any token the stats have seen.
  std::string token_text(int32_t token) const;

  // The JSON of docs/scan.md "heads": per head the profile, entropy histogram, top tokens and
  // decile examples (`top` tokens, `per_decile` examples).
  nlohmann::json summary(const std::vector<std::string>& head_labels, int top = 20, int per_decile = 3) const;
  // Everything, exactly (integers as integers, floats bit for bit), for resume and merge.
  nlohmann::json state() const;
  static HeadDatasetStats from_state(const nlohmann::json& j, int n_layers, int n_heads, int n_ctx);

 private:
  int head_index(int l, int h) const { return l * n_heads_ + h; }
  int slot_of(int32_t token, const std::string& text);
  void add_slot_totals(const HeadDatasetStats& other);

  int n_layers_ = 0, n_heads_ = 0, n_ctx_ = 0, samples_ = 0, window_ = 0;
  int64_t queries_ = 0;
  std::vector<uint64_t> distance_;        // [head, n_ctx] mass in 2^-32 units
  std::vector<int64_t> entropy_;          // [head, kEntropyBins]
  MomentGrid norm_;                       // [layer, head] over every query's output norm
  // Tokens seen, each a slot: the per-head totals are dense over slots.
  std::vector<int32_t> slot_token_;
  std::vector<std::string> slot_text_;
  std::unordered_map<int32_t, int> token_slot_;
  std::vector<int64_t> key_count_, query_count_;             // [slot]
  std::vector<std::vector<uint64_t>> key_mass_, query_mass_;  // [head][slot] in 2^-32 units
  // The bottom-k sample, sorted by (hash, index, position); per sample, per head: the norm and
  // the pattern row over the window (window_ floats, left-aligned, zero past the sample's tokens).
  std::vector<HeadSample> sample_;
  std::vector<std::vector<float>> sample_norm_;     // [sample][head]
  std::vector<std::vector<float>> sample_pattern_;  // [sample][head * window]
  // [head, d_head, d_head] W_O[h] W_O[h]^T in double, so ||z_h W_O[h]||^2 = z_h G_h z_h^T costs
  // d_head^2 a position instead of d_head * d_model. Made from the model at the first prompt; not
  // part of the state.
  std::vector<double> gram_;
  int d_head_ = 0;
};

}  // namespace hs
