#include "core/analysis/head_scores.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <random>

#include "core/error.h"

namespace hs {

const char* const kHeadScoreProse =
    "The lighthouse keeper rowed out to the rocks every morning before the fog lifted. "
    "He counted the gulls, wrote the number in a small green notebook, and rowed back for breakfast. "
    "One winter the notebook filled up, so his daughter bought him another from the shop in town. "
    "She asked why he kept counting birds that nobody else cared about. "
    "He said that when the numbers changed, the sea was telling him something, and he liked to listen.";

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
  s.previous_token = RowMatrixXf::Zero(c.n_layer, c.n_head);
  s.duplicate_token = RowMatrixXf::Zero(c.n_layer, c.n_head);
  s.induction = RowMatrixXf::Zero(c.n_layer, c.n_head);
  s.repeat_length = n;
  s.batch = static_cast<int>(repeated.size());
  s.prose_tokens = static_cast<int>(prose_ids.size());
  if (prose_ids.size() < 2) throw Error("head scores need a prose text of at least one token after BOS.");
  const auto prose = forward(weights, prose_ids);
  for (int l = 0; l < c.n_layer; ++l)
    for (int h = 0; h < c.n_head; ++h)
      s.previous_token(l, h) = mean_offset_attention(prose->head_pattern(l, h), 1, 1, prose->n_pos() - 1);
  for (const auto& seq : repeated) {
    if (static_cast<int>(seq.size()) != 2 * n + 1) throw Error("head scores: each repeated sequence must be BOS + R + R.");
    const auto cache = forward(weights, seq);
    for (int l = 0; l < c.n_layer; ++l)
      for (int h = 0; h < c.n_head; ++h) {
        const RowMatrixXf p = cache->head_pattern(l, h);
        s.duplicate_token(l, h) += mean_offset_attention(p, n, n + 1, 2 * n) / static_cast<float>(repeated.size());
        s.induction(l, h) += mean_offset_attention(p, n - 1, n + 1, 2 * n) / static_cast<float>(repeated.size());
      }
  }
  return s;
}

HeadScores compute_head_scores(const Model& model, const HeadScoreOptions& options) {
  const ModelConfig& c = model.config();
  const int n = std::min(options.repeat_length, (c.n_ctx - 1) / 2);
  if (n < 2) throw Error("the context of " + model.name() + " (" + std::to_string(c.n_ctx) + " tokens) is too short for induction scores.");
  std::vector<int32_t> prose = model.encode(options.prose.empty() ? kHeadScoreProse : options.prose, true);
  if (prose.size() > static_cast<size_t>(c.n_ctx)) prose.resize(static_cast<size_t>(c.n_ctx));
  const int32_t bos = model.bos_id();
  std::mt19937_64 rng(options.seed);
  // Draw from the ids the tokenizer can produce, leaving out BOS itself.
  const int32_t vocab = std::min(c.d_vocab, model.tokenizer().vocab_size());
  std::uniform_int_distribution<int32_t> pick(0, vocab - 1);
  std::vector<std::vector<int32_t>> repeated;
  for (int b = 0; b < options.batch; ++b) {
    std::vector<int32_t> r;
    while (static_cast<int>(r.size()) < n) {
      const int32_t t = pick(rng);
      if (t != bos) r.push_back(t);
    }
    std::vector<int32_t> seq = {bos};
    seq.insert(seq.end(), r.begin(), r.end());
    seq.insert(seq.end(), r.begin(), r.end());
    repeated.push_back(std::move(seq));
  }
  return compute_head_scores(model.weights(), prose, repeated, n);
}

std::string head_scores_to_json(const Model& model, const HeadScores& s) {
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
             {{"previous_token", "mean attention from position i to i-1 over i >= 1 on BOS + prose (" +
                                     std::to_string(s.prose_tokens) + " tokens)"},
              {"duplicate_token", "mean attention from i to i-n over the second copy of BOS + R + R, |R| = n = " +
                                      std::to_string(s.repeat_length) + ", " + std::to_string(s.batch) +
                                      " sequences of uniform random tokens"},
              {"induction", "mean attention from i to i-n+1 over the second copy of the same sequences"}}},
            {"heads", heads},
            {"best",
             {{"previous_token", best(s.previous_token)},
              {"duplicate_token", best(s.duplicate_token)},
              {"induction", best(s.induction)}}}};
  return j.dump(2);
}

}  // namespace hs
