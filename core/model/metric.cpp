#include "core/model/metric.h"

#include <cmath>
#include <limits>

#include "core/error.h"
#include "core/model/cache.h"

namespace hs {
namespace {

bool indexed_by_head_first(HookPoint h) { return h == HookPoint::Pattern || h == HookPoint::AttnScores; }

// log(sum(exp(row))) in double, and the softmax of the row into p (when not null).
double log_sum_exp(const ConstRowVectorRef& row, RowVectorXf* p) {
  const double m = row.maxCoeff();
  double total = 0;
  for (Eigen::Index j = 0; j < row.size(); ++j) total += std::exp(double{row(j)} - m);
  const double lse = m + std::log(total);
  if (p) {
    p->resize(row.size());
    for (Eigen::Index j = 0; j < row.size(); ++j) (*p)(j) = static_cast<float>(std::exp(double{row(j)} - lse));
  }
  return lse;
}

void check_token(const ModelConfig& c, int32_t t, std::string_view role) {
  if (t < 0 || t >= c.d_vocab)
    throw Error("token " + std::to_string(t) + " (" + std::string(role) + ") is outside the vocabulary [0, " +
                std::to_string(c.d_vocab) + "); give an id from 0 to " + std::to_string(c.d_vocab - 1) + ".");
}

// The floats the dot product reads at (query) position p: [first, first + n) of the hook's row at
// p, or, head first, of the flattened [head, key] slice of query p.
struct DotSpan {
  int64_t first, n;
};
DotSpan dot_span(const Metric& m, const ModelConfig& c, int n_pos) {
  if (m.unit < 0) return {0, metric_vector_length(m, c, n_pos)};
  const int64_t w = metric_unit_width(c, m.hook, n_pos);
  return {m.unit * w, w};
}

}  // namespace

Metric logit_diff_metric(int32_t answer, int32_t wrong, int pos) {
  Metric m;
  m.kind = MetricKind::LogitDiff;
  m.token = answer;
  m.wrong = wrong;
  m.pos = pos;
  return m;
}

Metric logit_metric(int32_t token, int pos) {
  Metric m;
  m.kind = MetricKind::Logit;
  m.token = token;
  m.pos = pos;
  return m;
}

Metric logprob_metric(int32_t token, int pos) {
  Metric m = logit_metric(token, pos);
  m.kind = MetricKind::LogProb;
  return m;
}

Metric loss_metric() {
  Metric m;
  m.kind = MetricKind::Loss;
  return m;
}

Metric dot_metric(HookPoint hook, int layer, std::vector<float> vector, int pos, int unit) {
  Metric m;
  m.kind = MetricKind::Dot;
  m.hook = hook;
  m.layer = hook_info(hook).per_layer ? layer : -1;
  m.vector = std::move(vector);
  m.pos = pos;
  m.unit = unit;
  return m;
}

std::string_view to_string(MetricKind k) {
  switch (k) {
    case MetricKind::LogitDiff: return "logit_diff";
    case MetricKind::Logit: return "logit";
    case MetricKind::LogProb: return "logprob";
    case MetricKind::Loss: return "loss";
    case MetricKind::Dot: return "dot";
  }
  return "";
}

std::optional<MetricKind> parse_metric_kind(std::string_view name) {
  for (MetricKind k : {MetricKind::LogitDiff, MetricKind::Logit, MetricKind::LogProb, MetricKind::Loss, MetricKind::Dot})
    if (to_string(k) == name) return k;
  return std::nullopt;
}

std::string metric_kind_names() { return "logit_diff|logit|logprob|loss|dot"; }

int64_t metric_unit_width(const ModelConfig& c, HookPoint hook, int n_pos) {
  const HookInfo& h = hook_info(hook);
  if (indexed_by_head_first(hook)) return n_pos;
  if (h.rank == 3) return dim_size(c, h.shape[2], n_pos);
  if (h.rank == 2 && h.shape[1] == Dim::DMlp) return 1;
  return hook_row_width(c, hook, n_pos);
}

int metric_unit_count(const ModelConfig& c, HookPoint hook) {
  const HookInfo& h = hook_info(hook);
  if (indexed_by_head_first(hook)) return c.n_heads;
  if (h.rank == 3) return static_cast<int>(dim_size(c, h.shape[1], 0));
  if (h.rank == 2 && h.shape[1] == Dim::DMlp) return c.d_mlp;
  return 0;
}

int64_t metric_vector_length(const Metric& m, const ModelConfig& c, int n_pos) {
  if (m.unit >= 0) return metric_unit_width(c, m.hook, n_pos);
  if (indexed_by_head_first(m.hook)) return int64_t{c.n_heads} * n_pos;
  return hook_row_width(c, m.hook, n_pos);
}

int metric_position(const Metric& m, int n_pos) { return m.pos < 0 ? n_pos - 1 : m.pos; }

void check_metric(const Metric& m, const ModelConfig& c, int n_pos) {
  if (m.kind != MetricKind::Loss && (m.pos < -1 || m.pos >= n_pos))
    throw Error("the metric's position " + std::to_string(m.pos) + " is outside the prompt's " + std::to_string(n_pos) +
                " positions: give a position from 0 to " + std::to_string(n_pos - 1) + " (or none, for the last).");
  switch (m.kind) {
    case MetricKind::LogitDiff:
      check_token(c, m.token, "the answer");
      check_token(c, m.wrong, "the wrong answer");
      if (m.token == m.wrong)
        throw Error("the answer and the wrong answer are the same token; the metric would always be 0.");
      return;
    case MetricKind::Logit:
    case MetricKind::LogProb:
      check_token(c, m.token, "the token");
      return;
    case MetricKind::Loss:
      if (n_pos < 2)
        throw Error("the loss needs at least two tokens (each position predicts the next); the prompt has " +
                    std::to_string(n_pos) + ".");
      return;
    case MetricKind::Dot: break;
  }
  const std::string key = hook_key(m.hook, m.layer < 0 ? 0 : m.layer);
  if (!hook_exists(c, m.hook))
    throw Error("the dot product's hook " + std::string(hook_info(m.hook).name) +
                " is not a key of this model (`headscope-cli hooks --model DIR` lists its keys).");
  if (hook_info(m.hook).per_layer && (m.layer < 0 || m.layer >= c.n_layers))
    throw Error("the dot product's layer " + std::to_string(m.layer) + " is out of range: this model has layers 0.." +
                std::to_string(c.n_layers - 1) + ".");
  const int units = metric_unit_count(c, m.hook);
  if (m.unit >= 0 && units == 0)
    throw Error(key + " has no heads or neurons to choose from: give no unit, and a vector as wide as its row.");
  if (m.unit < -1 || m.unit >= units)
    throw Error("the dot product's unit " + std::to_string(m.unit) + " is out of range for " + key + ": it has " +
                std::to_string(units) + " (0.." + std::to_string(units - 1) + ").");
  const int64_t n = metric_vector_length(m, c, n_pos);
  if (static_cast<int64_t>(m.vector.size()) != n)
    throw Error("the dot product's vector has " + std::to_string(m.vector.size()) + " values but " + key +
                (m.unit >= 0 ? " (unit " + std::to_string(m.unit) + ")" : std::string()) + " at one position has " +
                std::to_string(n) + (indexed_by_head_first(m.hook) ? " (head x key position for this prompt)" : "") +
                ": give a vector of " + std::to_string(n) + " values.");
}

double metric_value(const Metric& m, const ActivationCache& cache) {
  const ModelConfig& c = cache.config();
  const int S = cache.n_pos();
  check_metric(m, c, S);
  const int p = metric_position(m, S);
  switch (m.kind) {
    case MetricKind::LogitDiff: return double{cache.logits(p, m.token)} - double{cache.logits(p, m.wrong)};
    case MetricKind::Logit: return cache.logits(p, m.token);
    case MetricKind::LogProb: return double{cache.logits(p, m.token)} - log_sum_exp(cache.logits.row(p), nullptr);
    case MetricKind::Loss: {
      double total = 0;
      for (int i = 0; i + 1 < S; ++i)
        total += log_sum_exp(cache.logits.row(i), nullptr) - cache.logits(i, cache.tokens()[static_cast<size_t>(i + 1)]);
      return total / (S - 1);
    }
    case MetricKind::Dot: break;
  }
  const DotSpan span = dot_span(m, c, S);
  double total = 0;
  if (indexed_by_head_first(m.hook)) {
    for (int64_t e = 0; e < span.n; ++e) {
      const int64_t f = span.first + e;
      const int h = static_cast<int>(f / S), key = static_cast<int>(f % S);
      if (key > p) continue;  // masked: no score, a zero pattern
      const float a = m.hook == HookPoint::Pattern ? cache.pattern_row(m.layer, h, p)(key) : cache.head_scores(m.layer, h)(p, key);
      total += double{a} * m.vector[static_cast<size_t>(e)];
    }
    return total;
  }
  const RowMatrixXf rows = cache.rows(m.hook, m.layer);
  for (int64_t e = 0; e < span.n; ++e) total += double{rows(p, span.first + e)} * m.vector[static_cast<size_t>(e)];
  return total;
}

bool metric_reads(const Metric& m, HookPoint hook, int layer) {
  if (m.kind != MetricKind::Dot) return hook == HookPoint::Logits;
  return m.hook == hook && (!hook_info(hook).per_layer || m.layer == layer);
}

void add_metric_seed(const Metric& m, const ActivationCache& cache, RowMatrixXf& g) {
  const int S = cache.n_pos();
  const int p = metric_position(m, S);
  switch (m.kind) {
    case MetricKind::LogitDiff:
      g(p, m.token) += 1.0f;
      g(p, m.wrong) -= 1.0f;
      return;
    case MetricKind::Logit:
      g(p, m.token) += 1.0f;
      return;
    case MetricKind::LogProb: {
      // d/dlogits log softmax[t] = onehot(t) - softmax
      RowVectorXf prob;
      log_sum_exp(cache.logits.row(p), &prob);
      g.row(p) -= prob;
      g(p, m.token) += 1.0f;
      return;
    }
    case MetricKind::Loss: {
      // d/dlogits[i] of the mean of -log softmax(logits[i])[next]: (softmax - onehot(next)) / (S - 1)
      const float w = 1.0f / static_cast<float>(S - 1);
      RowVectorXf prob;
      for (int i = 0; i + 1 < S; ++i) {
        log_sum_exp(cache.logits.row(i), &prob);
        g.row(i) += w * prob;
        g(i, cache.tokens()[static_cast<size_t>(i + 1)]) -= w;
      }
      return;
    }
    case MetricKind::Dot: break;
  }
  const DotSpan span = dot_span(m, cache.config(), S);
  for (int64_t e = 0; e < span.n; ++e) {
    const float v = m.vector[static_cast<size_t>(e)];
    if (indexed_by_head_first(m.hook)) {
      const int64_t f = span.first + e, h = f / S, key = f % S;
      // A masked score is -inf whatever it is multiplied by: it takes no part. The pattern's entry
      // above the diagonal is a constant 0, whose derivative TransformerLens still reports.
      if (m.hook == HookPoint::AttnScores && key > p) continue;
      g(h * S + p, key) += v;
    } else {
      g(p, span.first + e) += v;
    }
  }
}

}  // namespace hs
