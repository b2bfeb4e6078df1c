#include "core/analysis/head_scores.h"

#include "core/io/splitmix64.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace hs {

// Held out from the built-in model's training: Jane Austen, Persuasion, chapter 21 (public domain).
const char* const kHeadScoreProse =
    "\"Mr Elliot,\" replied Mrs Smith, \"at that period of his life, had one object in view: to ma"
    "ke his fortune, and by a rather quicker process than the law. He was determined to make it"
    " by marriage. He was determined, at least, not to mar it by an imprudent marriage; and I k"
    "now it was his belief (whether justly or not, of course I cannot decide), that your father"
    " and sister, in their civilities and invitations, were designing a match between the heir "
    "and the young lady, and it was impossible that such a match should have answered his ideas"
    " of wealth and independence. That was his motive for drawing back, I can assure you. He to"
    "ld me the whole story. He had no concealments with me. It was curious, that having just le"
    "ft you behind me in Bath, my first and principal acquaintance on marrying should be your c"
    "ousin; and that, through him, I should be continually hearing of your father and sister. H"
    "e described one Miss Elliot, and I thought very affectionately of the other.\"";

float mean_offset_attention(const RowMatrixXf& pattern, int offset, int first, int last) {
  double total = 0.0;
  int n = 0;
  for (int i = std::max(first, offset); i <= last && i < pattern.rows(); ++i, ++n) total += pattern(i, i - offset);
  return n ? static_cast<float>(total / n) : 0.0f;
}

HeadScores compute_head_scores(std::shared_ptr<const Weights> weights, const std::vector<int32_t>& prose_ids,
                               const std::vector<std::vector<int32_t>>& repeated, int n) {
  const ModelConfig& c = weights->config();
  HeadScores s;
  s.previous_token = RowMatrixXf::Zero(c.n_layers, c.n_heads);
  s.duplicate_token = RowMatrixXf::Zero(c.n_layers, c.n_heads);
  s.induction = RowMatrixXf::Zero(c.n_layers, c.n_heads);
  s.repeat_length = n;
  s.batch = static_cast<int>(repeated.size());
  s.prose_tokens = static_cast<int>(prose_ids.size());
  if (prose_ids.size() < 2) throw Error("head scores need a prose text of at least one token after BOS.");
  const auto prose = forward(weights, prose_ids);
  for (int l = 0; l < c.n_layers; ++l)
    for (int h = 0; h < c.n_heads; ++h)
      s.previous_token(l, h) = mean_offset_attention(prose->head_pattern(l, h), 1, 2, prose->n_pos() - 1);
  for (const auto& seq : repeated) {
    if (static_cast<int>(seq.size()) != 2 * n + 1) throw Error("head scores: each repeated sequence must be BOS + R + R.");
    const auto cache = forward(weights, seq);
    for (int l = 0; l < c.n_layers; ++l)
      for (int h = 0; h < c.n_heads; ++h) {
        const RowMatrixXf p = cache->head_pattern(l, h);
        s.duplicate_token(l, h) += mean_offset_attention(p, n, n + 1, 2 * n) / static_cast<float>(repeated.size());
        s.induction(l, h) += mean_offset_attention(p, n - 1, n + 1, 2 * n) / static_cast<float>(repeated.size());
      }
  }
  return s;
}

std::vector<int32_t> repeat_random_prompt(const Model& model, uint64_t seed, int n, int64_t index) {
  const ModelConfig& c = model.config();
  const int32_t bos = model.bos_id();
  const uint64_t vocab = static_cast<uint64_t>(std::min(c.d_vocab, model.tokenizer().vocab_size()));
  // splitmix64's k-th output depends on seed + k * gamma only, so sequence `index` starts at draw
  // index * n without drawing the ones before (the same ids as drawing them in order).
  uint64_t state = seed + static_cast<uint64_t>(index) * static_cast<uint64_t>(n) * 0x9E3779B97F4A7C15ull;
  std::vector<int32_t> seq(static_cast<size_t>(2 * n + 1));
  seq[0] = bos;
  for (int i = 0; i < n; ++i) {
    state += 0x9E3779B97F4A7C15ull;
    const uint64_t z = splitmix64_mix(state);
    int32_t t = static_cast<int32_t>(z % (vocab - 1));
    if (t >= bos) ++t;
    seq[static_cast<size_t>(1 + i)] = seq[static_cast<size_t>(1 + n + i)] = t;
  }
  return seq;
}

HeadScores compute_head_scores(const Model& model, const HeadScoreOptions& options) {
  const ModelConfig& c = model.config();
  const int n = std::min(options.repeat_length, (c.n_ctx - 1) / 2);
  if (n < 2) throw Error("the context of " + model.name() + " (" + std::to_string(c.n_ctx) + " tokens) is too short for induction scores.");
  std::vector<int32_t> prose = model.encode(options.prose.empty() ? kHeadScoreProse : options.prose, true);
  if (prose.size() > static_cast<size_t>(c.n_ctx)) prose.resize(static_cast<size_t>(c.n_ctx));
  std::vector<std::vector<int32_t>> repeated;
  for (int b = 0; b < options.batch; ++b) repeated.push_back(repeat_random_prompt(model, options.seed, n, b));
  HeadScores scores = compute_head_scores(model.weights(), prose, repeated, n);
  scores.seed = options.seed;
  return scores;
}

std::string head_scores_to_json(const Model& model, const HeadScores& s) {
  const uint64_t seed = s.seed;
  using nlohmann::json;
  json heads = json::array();
  auto best = [&](const RowMatrixXf& m) {
    Eigen::Index l = 0, h = 0;
    const float v = m.maxCoeff(&l, &h);
    return json{{"head", "L" + std::to_string(l) + "H" + std::to_string(h)}, {"score", v}};
  };
  for (int l = 0; l < s.previous_token.rows(); ++l)
    for (int h = 0; h < s.previous_token.cols(); ++h)
      heads.push_back({{"head", "L" + std::to_string(l) + "H" + std::to_string(h)},
                       {"layer", l},
                       {"head_index", h},
                       {"previous_token", s.previous_token(l, h)},
                       {"duplicate_token", s.duplicate_token(l, h)},
                       {"induction", s.induction(l, h)}});
  json j = {{"model", model.name()},
            {"definitions",
             {{"previous_token", "mean attention from position i to i-1 over i >= 2 on BOS + prose (" +
                                     std::to_string(s.prose_tokens) + " tokens)"},
              {"duplicate_token", "mean attention from i to i-n over the second copy of BOS + R + R, |R| = n = " +
                                      std::to_string(s.repeat_length) + ", " + std::to_string(s.batch) +
                                      " sequences of random ids (splitmix64, seed " + std::to_string(seed) + ", every id but BOS)"},
              {"induction", "mean attention from i to i-n+1 over the second copy of the same sequences"}}},
            {"heads", heads},
            {"best",
             {{"previous_token", best(s.previous_token)},
              {"duplicate_token", best(s.duplicate_token)},
              {"induction", best(s.induction)}}}};
  return j.dump(2);
}

}  // namespace hs
