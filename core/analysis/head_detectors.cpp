#include "core/analysis/head_detectors.h"

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "core/error.h"
#include "core/model/model.h"

namespace hs {

const char* detector_key(HeadDetector detector) {
  switch (detector) {
    case HeadDetector::PreviousToken: return "previous_token";
    case HeadDetector::DuplicateToken: return "duplicate_token";
    case HeadDetector::Induction: return "induction";
  }
  return "";
}

DetectorPlan detector_plan(const std::vector<int32_t>& tokens, HeadDetector detector, bool bos_prepended) {
  DetectorPlan plan;
  plan.key_begin.push_back(0);
  const int n = static_cast<int>(tokens.size());
  if (detector == HeadDetector::PreviousToken) {
    // Query 1 is left out: its previous token is position 0 (BOS, or the first token, which
    // heads use as a resting place), and with two keys to choose from A[1, 0] says little.
    for (int q = 2; q < n; ++q) {
      plan.queries.push_back(q);
      plan.keys.push_back(q - 1);
      plan.key_begin.push_back(static_cast<int>(plan.keys.size()));
    }
    return plan;
  }
  // Earlier positions of each token, in order; a prepended BOS is no occurrence of anything.
  std::unordered_map<int32_t, std::vector<int>> seen;
  for (int q = bos_prepended ? 1 : 0; q < n; ++q) {
    std::vector<int>& earlier = seen[tokens[static_cast<size_t>(q)]];
    for (int j : earlier) {
      if (detector == HeadDetector::DuplicateToken) plan.keys.push_back(j);
      // The token after an earlier occurrence; j + 1 == q (the token repeated at once) would be
      // the query itself, which is no look-back.
      else if (j + 1 < q) plan.keys.push_back(j + 1);
    }
    if (static_cast<int>(plan.keys.size()) > plan.key_begin.back()) {
      plan.queries.push_back(q);
      plan.key_begin.push_back(static_cast<int>(plan.keys.size()));
    }
    earlier.push_back(q);
  }
  return plan;
}

DetectorScores detect_heads(const ActivationCache& cache, HeadDetector detector, bool bos_prepended,
                            const DetectorScores* previous) {
  if (cache.n_layer() == 0 && cache.config().n_layers > 0)
    throw Error("this run kept only the logits; head detectors need the attention patterns (run with the full cache).");
  const int n_layer = cache.n_layer(), n_head = cache.config().n_heads;
  const DetectorPlan plan = detector_plan(cache.tokens(), detector, bos_prepended);
  DetectorScores out;
  out.detector = detector;
  out.bos_prepended = bos_prepended;
  out.query_positions = plan.queries;
  out.queries = static_cast<int>(plan.queries.size());
  out.scores = RowMatrixXf::Constant(n_layer, n_head, std::numeric_limits<float>::quiet_NaN());
  const size_t Q = plan.queries.size(), heads = static_cast<size_t>(n_layer) * static_cast<size_t>(n_head);
  out.running.resize(heads * Q);
  if (plan.queries.empty()) {
    out.layer_queries.assign(static_cast<size_t>(n_layer), 0);
    return out;
  }
  // The leading queries the previous run summed already: those inside the reused prefix.
  size_t kept = 0;
  const size_t Qp = previous ? previous->query_positions.size() : 0;
  if (previous && previous->detector == detector && previous->bos_prepended == bos_prepended &&
      previous->running.size() == heads * Qp)
    while (kept < Q && kept < Qp && plan.queries[kept] < cache.reused_prefix &&
           previous->query_positions[kept] == plan.queries[kept])
      ++kept;
  for (int l = 0; l < n_layer; ++l) {
    // On a sliding-window layer a detector's key further back than the window is masked: no head
    // of the layer can attend to it, so it is no evidence against the head. Such keys add
    // nothing (the pattern is 0 there), and a query none of whose keys are in the window is left
    // out of the layer's average rather than counted as a miss.
    const int window = attention_window(cache.config(), l);
    size_t reachable = 0;
    for (size_t i = 0; i < Q; ++i) {
      const int first = first_key(window, plan.queries[i]);
      bool any = false;
      for (int k = plan.key_begin[i]; k < plan.key_begin[i + 1] && !any; ++k) any = plan.keys[static_cast<size_t>(k)] >= first;
      reachable += any;
    }
    out.layer_queries.push_back(static_cast<int>(reachable));
    for (int h = 0; h < n_head; ++h) {
      const size_t head = static_cast<size_t>(l) * static_cast<size_t>(n_head) + static_cast<size_t>(h);
      double* running = out.running.data() + head * Q;
      // Summed in double, query by query, so that a query with one key adds exactly what
      // mean_offset_attention adds (the fixed-sequence scores are this on BOS + R + R).
      double total = 0.0;
      if (kept > 0) {
        std::copy_n(previous->running.data() + head * Qp, kept, running);
        total = running[kept - 1];
      }
      for (size_t i = kept; i < Q; ++i) {
        const ConstRowVectorRef row = cache.pattern_row(l, h, plan.queries[i]);  // keys 0..q
        double on_keys = 0.0;
        for (int k = plan.key_begin[i]; k < plan.key_begin[i + 1]; ++k) on_keys += row[plan.keys[static_cast<size_t>(k)]];
        total += on_keys;
        running[i] = total;
      }
      if (reachable > 0) out.scores(l, h) = static_cast<float>(total / static_cast<double>(reachable));
    }
  }
  return out;
}

const DetectorScores& PromptHeadScores::operator[](HeadDetector d) const {
  switch (d) {
    case HeadDetector::PreviousToken: return previous_token;
    case HeadDetector::DuplicateToken: return duplicate_token;
    case HeadDetector::Induction: break;
  }
  return induction;
}

PromptHeadScores score_heads_on_prompt(const ActivationCache& cache, bool bos_prepended) {
  PromptHeadScores s;
  s.previous_token = detect_heads(cache, HeadDetector::PreviousToken, bos_prepended);
  s.duplicate_token = detect_heads(cache, HeadDetector::DuplicateToken, bos_prepended);
  s.induction = detect_heads(cache, HeadDetector::Induction, bos_prepended);
  return s;
}

std::string prompt_head_scores_to_json(const Model& model, const std::string& text, const std::vector<int32_t>& tokens,
                                       bool bos_prepended, const PromptHeadScores& s) {
  using nlohmann::json;
  constexpr HeadDetector kAll[] = {HeadDetector::PreviousToken, HeadDetector::DuplicateToken, HeadDetector::Induction};
  auto label = [](Eigen::Index l, Eigen::Index h) { return "L" + std::to_string(l) + "H" + std::to_string(h); };
  auto value = [](float v) { return v == v ? json(v) : json(nullptr); };  // NaN: no score
  json labels = json::array();
  for (int32_t id : tokens) labels.push_back(model.tokenizer().display(id));
  json queries = json::object(), best = json::object(), heads = json::array();
  for (HeadDetector d : kAll) {
    const DetectorScores& ds = s[d];
    queries[detector_key(d)] = ds.queries;
    best[detector_key(d)] = nullptr;
    if (ds.queries > 0 && ds.scores.size() > 0) {
      Eigen::Index l = 0, h = 0;
      const float v = ds.scores.maxCoeff(&l, &h);
      best[detector_key(d)] = {{"head", label(l, h)}, {"score", v}};
    }
  }
  for (Eigen::Index l = 0; l < s.previous_token.scores.rows(); ++l)
    for (Eigen::Index h = 0; h < s.previous_token.scores.cols(); ++h) {
      json head = {{"head", label(l, h)}, {"layer", l}, {"head_index", h}};
      for (HeadDetector d : kAll) head[detector_key(d)] = value(s[d].scores(l, h));
      heads.push_back(std::move(head));
    }
  const std::string first = bos_prepended ? "positions 1.. (BOS at 0 is no occurrence)" : "positions 0..";
  json j = {
      {"model", model.name()},
      {"text", text},
      {"tokens", tokens},
      {"labels", labels},
      {"bos_prepended", bos_prepended},
      {"definitions",
       {{"previous_token", "mean over query positions q >= 2 of A[q, q-1]"},
        {"duplicate_token", "mean, over the query positions whose token occurred earlier (" + first +
                                "), of the attention summed over those earlier occurrences; null when no token repeats"},
        {"induction", "mean, over the query positions q whose token occurred earlier at some j with j+1 < q, of the "
                      "attention summed over those positions j+1; null when there is none"}}},
      {"query_positions", queries},
      {"heads", heads},
      {"best", best}};
  return j.dump(2);
}

}  // namespace hs
