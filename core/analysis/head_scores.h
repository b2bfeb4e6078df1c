// Head-type scores in TransformerLens's sense, for every head of a model.
//
//   previous-token score: on plain prose (BOS + the text), the mean over query positions i >= 2 of
//                         the attention from i to i - 1 (query 1's previous token is BOS).
//   duplicate-token score: on BOS + R + R, R = n random tokens, the mean over the second copy's
//                          positions of the attention to the same token in the first copy (i - n).
//   induction score:       on the same sequences, the mean over the second copy's positions of the
//                          attention to the token after the previous occurrence (i - n + 1).
// Random ids come from one splitmix64 stream (seed 0 by default), sequence after sequence:
// id = out % (vocab - 1), plus one when >= BOS, so every id but BOS is equally likely (with BOS the
// last id, as in GPT-2, this is just out % (vocab - 1)). `batch` sequences of length n; scores are
// averaged over all of them. tools/train/head_scores.py is an independent implementation.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/model/model.h"
#include "core/tensor/eigen.h"

namespace hs {

struct HeadScoreOptions {
  uint64_t seed = 0;
  int repeat_length = 50;   // n; shortened to fit the context (2n + 1 <= n_ctx)
  int batch = 10;
  std::string prose;        // empty: the built-in paragraph (kHeadScoreProse)
};

struct HeadScores {
  RowMatrixXf previous_token;   // [layer, head]
  RowMatrixXf duplicate_token;  // [layer, head]
  RowMatrixXf induction;        // [layer, head]
  int repeat_length = 0;
  int batch = 0;
  int prose_tokens = 0;         // including BOS
  uint64_t seed = 0;
};

// An original paragraph (written for HeadScope, so no model was trained on it).
extern const char* const kHeadScoreProse;

// Scores of one pattern [query_pos, key_pos]: the mean of pattern(i, i - offset) over the given
// query positions [first, last]. offset 1 = previous token; on BOS + R + R with |R| = n,
// first = n + 1, last = 2n: offset n = duplicate token, offset n - 1 = induction.
float mean_offset_attention(const RowMatrixXf& pattern, int offset, int first, int last);

// Runs the model on the prose and on the repeated random sequences.
HeadScores compute_head_scores(const Model& model, const HeadScoreOptions& options = {});

// BOS + R + R with |R| = n, the index-th sequence of the splitmix64 stream with this seed: the
// sequences compute_head_scores scores, and `headscope-cli scan --repeat-random`'s prompts.
std::vector<int32_t> repeat_random_prompt(const Model& model, uint64_t seed, int n, int64_t index);
// Same, from prose token ids (BOS included) and explicit random sequences (BOS + R + R each).
HeadScores compute_head_scores(std::shared_ptr<const Weights> weights, const std::vector<int32_t>& prose_ids,
                               const std::vector<std::vector<int32_t>>& repeated, int repeat_length);

// {"model": ..., "definitions": ..., "heads": [{"head": "L0H0", "layer": 0, "head_index": 0,
//   "previous_token": .., "duplicate_token": .., "induction": ..}, ...], "best": {...}}
std::string head_scores_to_json(const Model& model, const HeadScores& scores);

}  // namespace hs
