// A data set through a model, aggregated (docs/scan.md): the same per-prompt analyses the window
// shows for one prompt — the head detectors of head_detectors.h, attention entropy, each head's
// direct logit attribution to the next token, the loss at each position, and activation patching
// for rows that give a clean and a corrupted prompt — averaged over every prompt of the set.
//
// Memory does not grow with the data set: prompts are read and run one at a time (one cache
// alive), and every aggregate is a fixed-size grid of exact, mergeable accumulators: count, mean
// and M2 (the sum of squared deviations) per cell, in double, updated with Welford's step and
// combined with Chan et al.'s parallel formula. A shard's or an interrupted run's state is those
// three numbers per cell, so merging shards or resuming a run gives the result of one process
// (to rounding: the order of additions differs).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/analysis/head_dataset.h"
#include "core/analysis/moment_grid.h"
#include "core/analysis/unit_dataset.h"

namespace hs {

class Model;

// What to read and how.
struct ScanOptions {
  std::filesystem::path input;   // a text file (a prompt a line) or JSON Lines; empty with repeat_random
  int repeat_random = 0;         // > 0: no input file; prompts are BOS + R + R with |R| = this
  int64_t limit = -1;            // only input lines (or generated prompts) with index < limit; -1: all
  int max_tokens = 0;            // > 0: prompts longer than this are truncated to it (BOS included)
  bool prepend_bos = true;
  uint64_t seed = 0;             // the repeat-random stream (docs/head-scores.md)
  int shard_index = 0, shard_count = 1;  // this process takes the prompts with index % count == index
  int threads = 0;               // forward-pass threads; 0: the engine's choice
  bool heads = false;            // also describe each head over the data set (head_dataset.h)
  // Also describe every unit of this source over the data set (unit_dataset.h): "mlp", "mlp:L",
  // "sae:DIR"; empty: none. Text prompts then run one at a time with a full cache.
  std::string units;
  // The text rows' aggregates to compute (scan_text_aggregate_names); empty: all. The others stay
  // empty (count 0), and the pass stops where the chosen ones stop reading: head scores and
  // entropy need no unembedding, nor anything after the last layer's pattern.
  std::vector<std::string> aggregates;
  // Rows (tokens) of text prompts run together in one batched pass (forward_batch); 1: one
  // prompt at a time with a full cache, as the window runs it. The results are the same bits.
  // With the loss or DLA asked for, a pass also holds at most 256 MiB of logits.
  int64_t batch_tokens = 0;      // 0: kDefaultBatchTokens
  static constexpr int64_t kDefaultBatchTokens = 2048;
};

// Why a line was not used, counted per reason.
struct BadLines {
  int64_t count = 0;
  std::vector<int64_t> first_lines;  // 1-based line numbers, the first kMaxListed
  static constexpr size_t kMaxListed = 10;
};

// Everything a scan knows: the aggregates, the counts and how far it got. A complete scan, a
// shard, a partial (interrupted) scan and a merge of shards are all one of these.
struct ScanState {
  nlohmann::json settings;       // what must match for resume and merge (model, input hash, options)
  int shard_index = 0, shard_count = 1;
  std::vector<int> merged_shards;  // the shards a merge combined (empty: not a merge)
  bool complete = false;
  int64_t next_index = 0;        // the input index to continue from
  int64_t total_indices = 0;     // indices this scan covers (after --limit), all shards
  int64_t prompts = 0;           // prompts aggregated (text rows)
  int64_t patch_rows = 0;        // clean/corrupt rows aggregated
  int64_t truncated = 0;         // prompts cut to max_tokens
  int64_t per_prompt_bytes = 0;  // bytes of per-prompt output written so far (resume truncates to it)
  std::map<std::string, BadLines> bad;  // reason -> lines
  int n_layers = 0, n_heads = 0, n_ctx = 0;
  // The aggregates by name (docs/scan.md): "previous_token", "duplicate_token", "induction",
  // "attention_entropy", "dla_next_token" [layer, head]; "loss_per_position" [n_ctx - 1, 1];
  // "patching_resid_pre" [layer, n_ctx]; "patching_z" [layer, head].
  std::map<std::string, MomentGrid> grids;
  // With --heads (settings "heads": true): each head described over the data set; empty otherwise.
  HeadDatasetStats heads;
  // With --units (settings "units"): every unit described over the data set; empty otherwise.
  UnitDatasetStats units;
};

// The names of ScanState::grids, in output order.
const std::vector<std::string>& scan_aggregate_names();
// Those of text rows, which ScanOptions::aggregates chooses from (the patching ones are computed
// for every patch row).
const std::vector<std::string>& scan_text_aggregate_names();

struct ScanProgress {
  int64_t done = 0;     // indices of this shard handled (used or bad)
  int64_t total = 0;    // indices of this shard; -1 when unknown
  int64_t prompts = 0;  // rows aggregated so far
};

struct ScanControl {
  // Called after each prompt (on the scanning thread).
  std::function<void(const ScanProgress&)> progress;
  // Checked before each prompt: true stops the scan after the current one (a partial state).
  std::function<bool()> stop;
  // One JSON line (with its '\n') per aggregated row, in order: stream it out, never keep it.
  std::function<void(const std::string&)> per_prompt;
  // Stop (as `stop` would) after this many rows in this call; -1: never. Tests of resume use it,
  // and so can a time-boxed job.
  int64_t stop_after = -1;
};

// One input line as the scan reads it (docs/scan.md), before any tokenizing: a prompt, a
// clean/corrupt row for patching, or the reason the line is not used. `line` is one line of the
// input without its '\n' (a trailing '\r' is dropped); `jsonl` says whether the input is JSON Lines.
struct ScanRow {
  enum class Kind { Bad, Text, Patch };
  Kind kind = Kind::Bad;
  const char* bad_reason = nullptr;            // Bad: one of scan_bad_line_reasons()
  std::string text;                            // Text: the prompt
  std::string clean, corrupt, answer, wrong;   // Patch
};
ScanRow parse_scan_row(std::string line, bool jsonl);

// Every reason a line can be counted as bad (the keys of ScanState::bad).
const std::vector<std::string>& scan_bad_line_reasons();

// The settings object of a scan of `options` with `model`: model identity, input path and hash
// (FNV-1a 64 of the file's bytes), the options. Reads the whole input once to hash it. Throws
// hs::Error for an input that cannot be read.
nlohmann::json scan_settings(const Model& model, const ScanOptions& options);

// A fresh state for the scan (empty accumulators of the model's shape).
ScanState new_scan_state(const Model& model, const ScanOptions& options, nlohmann::json settings);

// Runs the scan from state.next_index (0 for a fresh state) and returns the updated state:
// complete when the input was exhausted, partial when control stopped it. Throws hs::Error when the
// input cannot be opened; bad lines are counted in the state, never thrown.
void run_scan(const Model& model, const ScanOptions& options, ScanState& state, const ScanControl& control = {});

// The output file (docs/scan.md): settings, counts, bad lines, the aggregates as mean / std /
// count, and "state" (every accumulator exactly), which scan_from_json reads back.
nlohmann::json scan_to_json(const ScanState& state, const std::vector<std::string>& head_labels);
ScanState scan_from_json(const nlohmann::json& j, const std::string& source);

// Checks that `state` can be continued with `settings` (the same model, input hash and options);
// throws hs::Error naming the first setting that differs.
void require_same_settings(const nlohmann::json& expected, const nlohmann::json& found, const std::string& what);

// Combines shard outputs into the result of one process: the same settings but the shard, every
// shard 0..N-1 present once and complete. Throws hs::Error saying which shard is missing, repeated,
// incomplete or made with other settings.
ScanState merge_scans(const std::vector<ScanState>& shards, const std::vector<std::string>& sources);

}  // namespace hs
