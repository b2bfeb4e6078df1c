// Head detectors on an arbitrary prompt: how much each head behaves as a previous-token,
// duplicate-token or induction head on the tokens it was actually run on (docs/head-scores.md,
// "On any prompt"). The fixed-sequence scores of head_scores.h are the special case of these on
// BOS + prose and on BOS + R + R; tools/train/head_scores.py is an independent float64
// implementation of both.
//
// With A[q, k] the head's attention pattern, t[q] the token at position q, and position 0 left out
// as an occurrence when it is a prepended BOS:
//   previous-token   mean over q >= 2 of A[q, q-1];
//   duplicate-token  mean over the queries q whose token occurred earlier (at positions S_q) of
//                    sum_{j in S_q} A[q, j];
//   induction        mean over the queries q with at least one j in S_q, j + 1 < q, of
//                    sum_{j in S_q, j+1 < q} A[q, j + 1].
// A score with no query to average over is NaN ("no score"), never 0.
// On a sliding-window layer (Gemma, Qwen2's use_sliding_window) the keys further back than the
// window (k < q - W + 1) are masked: they add nothing, and a query whose keys all lie there is
// left out of that layer's mean (no head of the layer could attend to them).
//
// The query positions and the keys each score reads depend on the tokens only, so they are listed
// once (DetectorPlan) and then read from every head's lower-triangle pattern rows: a few reads per
// query and head, cheap enough for every keystroke.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/model/cache.h"
#include "core/tensor/eigen.h"

namespace hs {

class Model;

enum class HeadDetector { PreviousToken, DuplicateToken, Induction };

// The snake_case name the CLI's JSON uses ("previous_token", "duplicate_token", "induction").
const char* detector_key(HeadDetector detector);

// Which query positions a detector averages over and which keys it sums for each: query
// queries[i] reads keys[key_begin[i] .. key_begin[i+1]-1] (ascending). Depends on the tokens only.
struct DetectorPlan {
  std::vector<int> queries;
  std::vector<int> key_begin;  // queries.size() + 1 entries
  std::vector<int> keys;
};
// `bos_prepended`: position 0 is a BOS the caller added, not a token of the prompt, so it is
// never an earlier occurrence (it is never a query either way: nothing comes before it).
DetectorPlan detector_plan(const std::vector<int32_t>& tokens, HeadDetector detector, bool bos_prepended);

struct DetectorScores {
  RowMatrixXf scores;  // [layer, head]; NaN: no query position qualified (no score)
  // How many query positions qualified; a sliding layer's heads average only those with a key
  // inside the window (layer_queries).
  int queries = 0;
  std::vector<int> layer_queries;  // [layer] the queries each layer's heads averaged
  // What a later run extending this one's prompt continues from (detect_heads' `previous`): the
  // query positions in order and, per head, the running sum of its attention on the keys over
  // them: running[(layer * n_head + head) * queries + i] sums queries 0..i.
  HeadDetector detector = HeadDetector::PreviousToken;
  bool bos_prepended = true;
  std::vector<int> query_positions;
  std::vector<double> running;
};

// One detector for every head of the run. With `previous`, the scores of the run whose prefix
// `cache` reused (cache.reused_prefix positions of it), the sums over the queries inside that
// prefix are taken from it: a query's keys and its pattern row depend only on the positions up
// to it, so they are the same, and the result is the same bits as without it. A typed key then
// costs only its own queries.
DetectorScores detect_heads(const ActivationCache& cache, HeadDetector detector, bool bos_prepended = true,
                            const DetectorScores* previous = nullptr);

// All three, as `headscope-cli heads --text` reports them.
struct PromptHeadScores {
  DetectorScores previous_token;
  DetectorScores duplicate_token;
  DetectorScores induction;
  const DetectorScores& operator[](HeadDetector d) const;
};
PromptHeadScores score_heads_on_prompt(const ActivationCache& cache, bool bos_prepended = true);

// {"model", "text", "tokens", "labels", "bos_prepended", "definitions", "query_positions": {"previous_token": n, ...},
//  "heads": [{"head": "L0H0", "layer": 0, "head_index": 0, "previous_token": x | null, ...}, ...],
//  "best": {"previous_token": {"head", "score"} | null, ...}}
std::string prompt_head_scores_to_json(const Model& model, const std::string& text, const std::vector<int32_t>& tokens,
                                       bool bos_prepended, const PromptHeadScores& scores);

}  // namespace hs
