#include "core/analysis/head_dataset.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <tuple>

#include "core/analysis/scan_state_io.h"
#include "core/error.h"
#include "core/io/base64.h"
#include "core/model/cache.h"
#include "core/model/config_json.h"
#include "core/model/model.h"
#include "core/model/weights.h"

namespace hs {

namespace {

using nlohmann::json;

bool sample_before(const HeadSample& a, const HeadSample& b) {
  return std::tie(a.hash, a.index, a.position) < std::tie(b.hash, b.index, b.position);
}

// One attention weight on the 2^-32 grid. Weights are probabilities in [0, 1]; anything else
// (which a softmax does not make) is clamped rather than wrapped.
uint64_t mass_units(float p) {
  const double x = std::clamp(static_cast<double>(p), 0.0, 1.0);
  return static_cast<uint64_t>(std::llround(x * HeadDatasetStats::kMassUnit));
}

// a += b, refused on overflow: only an edited state could get there.
void add_checked(uint64_t& a, uint64_t b) {
  if (__builtin_add_overflow(a, b, &a)) throw Error("attention totals overflow: the scan outputs were edited.");
}
void add_checked(int64_t& a, int64_t b) {
  if (__builtin_add_overflow(a, b, &a)) throw Error("counts overflow: the scan outputs were edited.");
}

int64_t int_in(const json& v, const std::string& what, int64_t lo, int64_t hi) {
  if (!v.is_number_integer()) throw Error(what + " is " + json_brief(v) + "; expected an integer");
  const int64_t x = v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)
                        ? INT64_MAX
                        : v.get<int64_t>();
  if (x < lo || x > hi)
    throw Error(what + " is " + std::to_string(x) + "; expected " + std::to_string(lo) + " .. " + std::to_string(hi));
  return x;
}

}  // namespace

HeadDatasetStats::HeadDatasetStats(int n_layers, int n_heads, int n_ctx, int samples, int window)
    : n_layers_(n_layers), n_heads_(n_heads), n_ctx_(n_ctx), samples_(samples), window_(window) {
  if (n_layers < 1 || n_heads < 1 || n_ctx < 1 || samples < 0 || window < 1)
    throw Error("head statistics need at least one layer, head and position, and a window of at least one token.");
  const size_t heads = static_cast<size_t>(n_layers) * static_cast<size_t>(n_heads);
  distance_.assign(heads * static_cast<size_t>(n_ctx), 0);
  entropy_.assign(heads * kEntropyBins, 0);
  norm_ = MomentGrid(n_layers, n_heads);
  key_mass_.resize(heads);
  query_mass_.resize(heads);
}

int HeadDatasetStats::slot_of(int32_t token, const std::string& text) {
  const auto [it, added] = token_slot_.emplace(token, static_cast<int>(slot_token_.size()));
  if (added) {
    slot_token_.push_back(token);
    slot_text_.push_back(text);
    key_count_.push_back(0);
    query_count_.push_back(0);
    for (auto& v : key_mass_) v.push_back(0);
    for (auto& v : query_mass_) v.push_back(0);
  }
  return it->second;
}

void HeadDatasetStats::add_prompt(const Model& model, int64_t index, const ActivationCache& cache, bool bos) {
  const ModelConfig& c = cache.config();
  if (c.n_layers != n_layers_ || c.n_heads != n_heads_ || c.n_ctx != n_ctx_)
    throw Error("head statistics of another model's shape cannot take this run.");
  const int T = cache.n_pos(), H = n_heads_, dh = c.d_head;
  const std::vector<int32_t>& tokens = cache.tokens();
  std::vector<int> slot(static_cast<size_t>(T));
  for (int p = 0; p < T; ++p) {
    const int32_t t = tokens[static_cast<size_t>(p)];
    const auto found = token_slot_.find(t);
    slot[static_cast<size_t>(p)] = found != token_slot_.end() ? found->second : slot_of(t, model.tokenizer().display(t));
  }
  if (T < 2) return;  // no query q >= 1
  if (gram_.empty()) {
    d_head_ = dh;
    gram_.resize(static_cast<size_t>(n_layers_ * H) * static_cast<size_t>(dh * dh));
    for (int l = 0; l < n_layers_; ++l)
      for (int h = 0; h < H; ++h) {
        const Eigen::MatrixXd w = cache.weights()->W_O(l, h).cast<double>();  // [d_head, d_model]
        Eigen::Map<Eigen::MatrixXd> g(gram_.data() + static_cast<size_t>(head_index(l, h)) * static_cast<size_t>(dh * dh), dh, dh);
        g.noalias() = w * w.transpose();
      }
  }
  for (int p = 0; p < T; ++p) {
    if (!(bos && p == 0)) ++key_count_[static_cast<size_t>(slot[static_cast<size_t>(p)])];
    if (p >= 1) ++query_count_[static_cast<size_t>(slot[static_cast<size_t>(p)])];
  }
  queries_ += T - 1;

  // Which of this prompt's query positions enter the sample: those among the `samples_` smallest
  // keys of the sample so far and this prompt's positions together.
  std::vector<HeadSample> fresh;
  for (int q = 1; q < T; ++q) {
    HeadSample s;
    s.hash = sample_hash(index, q);
    s.index = index;
    s.position = q;
    fresh.push_back(std::move(s));
  }
  std::sort(fresh.begin(), fresh.end(), sample_before);
  {
    size_t kept = 0, a = 0, b = 0;
    while (kept < static_cast<size_t>(samples_) && b < fresh.size()) {
      if (a < sample_.size() && sample_before(sample_[a], fresh[b])) ++a;
      else ++b;
      ++kept;
    }
    fresh.resize(b);
  }
  std::vector<int> fresh_of_q(static_cast<size_t>(T), -1);
  std::vector<std::vector<float>> fresh_norm(fresh.size(), std::vector<float>(static_cast<size_t>(n_layers_ * H), 0.0f));
  std::vector<std::vector<float>> fresh_pattern(
      fresh.size(), std::vector<float>(static_cast<size_t>(n_layers_ * H) * static_cast<size_t>(window_), 0.0f));
  for (size_t i = 0; i < fresh.size(); ++i) {
    HeadSample& s = fresh[i];
    s.first = std::max(0, s.position - window_ + 1);
    s.tokens.assign(tokens.begin() + s.first, tokens.begin() + s.position + 1);
    fresh_of_q[static_cast<size_t>(s.position)] = static_cast<int>(i);
  }

  const double bin_width = entropy_bin_width();
  Eigen::VectorXd zq(dh);
  for (int l = 0; l < n_layers_; ++l) {
    const RowMatrixXf z = cache.layer(l).z.to_matrix();  // [pos, head*d_head]
    for (int h = 0; h < H; ++h) {
      const int hi = head_index(l, h);
      uint64_t* dist = distance_.data() + static_cast<size_t>(hi) * static_cast<size_t>(n_ctx_);
      std::vector<uint64_t>& key_mass = key_mass_[static_cast<size_t>(hi)];
      std::vector<uint64_t>& query_mass = query_mass_[static_cast<size_t>(hi)];
      const Eigen::Map<const Eigen::MatrixXd> g(gram_.data() + static_cast<size_t>(hi) * static_cast<size_t>(dh * dh), dh, dh);
      for (int q = 1; q < T; ++q) {
        const ConstRowVectorRef row = cache.pattern_row(l, h, q);
        const int keys = std::min(static_cast<int>(row.size()), q + 1);
        uint64_t off_sink = 0;
        double entropy = 0.0;
        for (int k = 0; k < keys; ++k) {
          const float p = row[k];
          const uint64_t u = mass_units(p);
          dist[q - k] += u;
          if (!(bos && k == 0)) {
            key_mass[static_cast<size_t>(slot[static_cast<size_t>(k)])] += u;
            off_sink += u;
          }
          if (p > 0.0f) entropy -= static_cast<double>(p) * std::log(static_cast<double>(p));
        }
        query_mass[static_cast<size_t>(slot[static_cast<size_t>(q)])] += off_sink;
        const int bin = std::clamp(static_cast<int>(entropy / bin_width), 0, kEntropyBins - 1);
        ++entropy_[static_cast<size_t>(hi) * kEntropyBins + static_cast<size_t>(bin)];
        zq = z.row(q).segment(h * dh, dh).transpose().cast<double>();
        const double norm = std::sqrt(std::max(0.0, zq.dot(g * zq)));
        norm_.add(l, h, norm);
        if (const int f = fresh_of_q[static_cast<size_t>(q)]; f >= 0) {
          const HeadSample& s = fresh[static_cast<size_t>(f)];
          fresh_norm[static_cast<size_t>(f)][static_cast<size_t>(hi)] = static_cast<float>(norm);
          float* out = fresh_pattern[static_cast<size_t>(f)].data() + static_cast<size_t>(hi) * static_cast<size_t>(window_);
          for (int k = s.first; k < keys; ++k) out[k - s.first] = row[k];
        }
      }
    }
  }

  // The union, cut back to the smallest keys.
  std::vector<HeadSample> merged;
  std::vector<std::vector<float>> merged_norm, merged_pattern;
  size_t a = 0, b = 0;
  while (merged.size() < static_cast<size_t>(samples_) && (a < sample_.size() || b < fresh.size())) {
    if (b >= fresh.size() || (a < sample_.size() && sample_before(sample_[a], fresh[b]))) {
      merged.push_back(std::move(sample_[a]));
      merged_norm.push_back(std::move(sample_norm_[a]));
      merged_pattern.push_back(std::move(sample_pattern_[a]));
      ++a;
    } else {
      merged.push_back(std::move(fresh[b]));
      merged_norm.push_back(std::move(fresh_norm[b]));
      merged_pattern.push_back(std::move(fresh_pattern[b]));
      ++b;
    }
  }
  sample_ = std::move(merged);
  sample_norm_ = std::move(merged_norm);
  sample_pattern_ = std::move(merged_pattern);
}

void HeadDatasetStats::add_slot_totals(const HeadDatasetStats& o) {
  for (size_t j = 0; j < o.slot_token_.size(); ++j) {
    const size_t i = static_cast<size_t>(slot_of(o.slot_token_[j], o.slot_text_[j]));
    add_checked(key_count_[i], o.key_count_[j]);
    add_checked(query_count_[i], o.query_count_[j]);
    for (size_t hi = 0; hi < key_mass_.size(); ++hi) {
      add_checked(key_mass_[hi][i], o.key_mass_[hi][j]);
      add_checked(query_mass_[hi][i], o.query_mass_[hi][j]);
    }
  }
}

void HeadDatasetStats::merge(const HeadDatasetStats& o) {
  if (o.n_layers_ != n_layers_ || o.n_heads_ != n_heads_ || o.n_ctx_ != n_ctx_ || o.samples_ != samples_ ||
      o.window_ != window_)
    throw Error("cannot merge head statistics of another shape or sampling (samples " + std::to_string(o.samples_) +
                ", window " + std::to_string(o.window_) + " against " + std::to_string(samples_) + ", " +
                std::to_string(window_) + ").");
  for (size_t i = 0; i < distance_.size(); ++i) add_checked(distance_[i], o.distance_[i]);
  for (size_t i = 0; i < entropy_.size(); ++i) add_checked(entropy_[i], o.entropy_[i]);
  add_checked(queries_, o.queries_);
  norm_.merge(o.norm_);
  add_slot_totals(o);
  std::vector<size_t> order(sample_.size() + o.sample_.size());
  std::iota(order.begin(), order.end(), size_t{0});
  const auto at = [&](size_t i) -> const HeadSample& { return i < sample_.size() ? sample_[i] : o.sample_[i - sample_.size()]; };
  std::sort(order.begin(), order.end(), [&](size_t x, size_t y) { return sample_before(at(x), at(y)); });
  // The same (index, position) in both would be one prompt scanned twice: shards do not overlap.
  for (size_t i = 1; i < order.size(); ++i)
    if (at(order[i - 1]).index == at(order[i]).index && at(order[i - 1]).position == at(order[i]).position)
      throw Error("both head statistics hold input line " + std::to_string(at(order[i]).index + 1) +
                  "; merge shards of one run, each once.");
  if (order.size() > static_cast<size_t>(samples_)) order.resize(static_cast<size_t>(samples_));
  std::vector<HeadSample> s;
  std::vector<std::vector<float>> n, p;
  for (size_t i : order) {
    const bool mine = i < sample_.size();
    const size_t j = mine ? i : i - sample_.size();
    s.push_back(mine ? sample_[j] : o.sample_[j]);
    n.push_back(mine ? sample_norm_[j] : o.sample_norm_[j]);
    p.push_back(mine ? sample_pattern_[j] : o.sample_pattern_[j]);
  }
  sample_ = std::move(s);
  sample_norm_ = std::move(n);
  sample_pattern_ = std::move(p);
}

// ---- what is shown ----------------------------------------------------------------------------

std::vector<double> HeadDatasetStats::distance_profile(int l, int h) const {
  std::vector<double> out(static_cast<size_t>(n_ctx_), 0.0);
  if (queries_ == 0) return out;
  const uint64_t* d = distance_.data() + static_cast<size_t>(head_index(l, h)) * static_cast<size_t>(n_ctx_);
  const double scale = 1.0 / (kMassUnit * static_cast<double>(queries_));
  for (int k = 0; k < n_ctx_; ++k) out[static_cast<size_t>(k)] = static_cast<double>(d[k]) * scale;
  return out;
}

double HeadDatasetStats::mean_distance(int l, int h) const {
  if (queries_ == 0) return std::numeric_limits<double>::quiet_NaN();
  const std::vector<double> p = distance_profile(l, h);
  double m = 0.0;
  for (size_t d = 0; d < p.size(); ++d) m += static_cast<double>(d) * p[d];
  return m;
}

const int64_t* HeadDatasetStats::entropy_histogram(int l, int h) const {
  return entropy_.data() + static_cast<size_t>(head_index(l, h)) * kEntropyBins;
}

double HeadDatasetStats::entropy_bin_width() const {
  return std::log(static_cast<double>(std::max(n_ctx_, 2))) / kEntropyBins;
}

double HeadDatasetStats::mean_output_norm(int l, int h) const { return norm_.mean(l, h); }
double HeadDatasetStats::output_norm_std(int l, int h) const { return std::sqrt(norm_.variance(l, h)); }

namespace {

std::vector<HeadTokenMass> top_tokens(const std::vector<uint64_t>& mass, const std::vector<int64_t>& count,
                                      const std::vector<int32_t>& slot_token, const std::vector<std::string>& slot_text,
                                      int top) {
  std::vector<size_t> order;
  for (size_t i = 0; i < mass.size(); ++i)
    if (mass[i] > 0) order.push_back(i);
  // Ties by token id, so the list does not depend on the order tokens were first seen in.
  const auto before = [&](size_t a, size_t b) {
    return mass[a] != mass[b] ? mass[a] > mass[b] : slot_token[a] < slot_token[b];
  };
  const size_t n = std::min(order.size(), static_cast<size_t>(std::max(top, 0)));
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(n), order.end(), before);
  std::vector<HeadTokenMass> out;
  for (size_t i = 0; i < n; ++i) {
    const size_t s = order[i];
    out.push_back({slot_token[s], slot_text[s], static_cast<double>(mass[s]) / HeadDatasetStats::kMassUnit, count[s]});
  }
  return out;
}

}  // namespace

std::vector<HeadTokenMass> HeadDatasetStats::key_tokens(int l, int h, int top) const {
  return top_tokens(key_mass_[static_cast<size_t>(head_index(l, h))], key_count_, slot_token_, slot_text_, top);
}

std::vector<HeadTokenMass> HeadDatasetStats::query_tokens(int l, int h, int top) const {
  return top_tokens(query_mass_[static_cast<size_t>(head_index(l, h))], query_count_, slot_token_, slot_text_, top);
}

std::vector<HeadDecile> HeadDatasetStats::deciles(int l, int h) const {
  const size_t hi = static_cast<size_t>(head_index(l, h));
  const size_t n = sample_.size();
  std::vector<size_t> by_norm(n);
  std::iota(by_norm.begin(), by_norm.end(), size_t{0});
  // Sample order (by hash) breaks ties, so equal norms fall into deciles reproducibly.
  std::stable_sort(by_norm.begin(), by_norm.end(),
                   [&](size_t a, size_t b) { return sample_norm_[a][hi] < sample_norm_[b][hi]; });
  std::vector<HeadDecile> out;
  for (int d = 0; d < 10; ++d) {
    HeadDecile dec;
    dec.decile = d;
    const size_t lo = n * static_cast<size_t>(d) / 10, hi_rank = n * static_cast<size_t>(d + 1) / 10;
    std::vector<size_t> members(by_norm.begin() + static_cast<std::ptrdiff_t>(lo),
                                by_norm.begin() + static_cast<std::ptrdiff_t>(hi_rank));
    if (!members.empty()) {
      dec.norm_low = sample_norm_[members.front()][hi];
      dec.norm_high = sample_norm_[members.back()][hi];
    }
    std::sort(members.begin(), members.end());  // smallest hash first
    for (size_t m : members) {
      HeadExample e;
      e.sample = &sample_[m];
      e.norm = sample_norm_[m][hi];
      const float* row = sample_pattern_[m].data() + hi * static_cast<size_t>(window_);
      e.pattern.assign(row, row + sample_[m].tokens.size());
      dec.examples.push_back(std::move(e));
    }
    out.push_back(std::move(dec));
  }
  return out;
}

std::string HeadDatasetStats::token_text(int32_t token) const {
  const auto it = token_slot_.find(token);
  return it != token_slot_.end() ? slot_text_[static_cast<size_t>(it->second)] : "#" + std::to_string(token);
}

json HeadDatasetStats::summary(const std::vector<std::string>& labels, int top, int per_decile) const {
  json heads = json::array();
  const auto token_list = [](const std::vector<HeadTokenMass>& v) {
    json a = json::array();
    for (const HeadTokenMass& t : v) a.push_back({{"token", t.token}, {"text", t.text}, {"mass", t.mass}, {"count", t.count}});
    return a;
  };
  const auto number = [](double x) { return std::isfinite(x) ? json(x) : json(nullptr); };
  for (int l = 0; l < n_layers_; ++l)
    for (int h = 0; h < n_heads_; ++h) {
      const std::vector<double> profile = distance_profile(l, h);
      size_t last = 0;  // trailing distances no query reached are left out
      for (size_t d = 0; d < profile.size(); ++d)
        if (distance_[static_cast<size_t>(head_index(l, h)) * static_cast<size_t>(n_ctx_) + d] > 0) last = d + 1;
      json deciles = json::array();
      for (const HeadDecile& dec : this->deciles(l, h)) {
        json examples = json::array();
        for (size_t i = 0; i < dec.examples.size() && i < static_cast<size_t>(per_decile); ++i) {
          const HeadExample& e = dec.examples[i];
          json text = json::array();
          for (int32_t t : e.sample->tokens) text.push_back(token_text(t));
          examples.push_back({{"index", e.sample->index},
                              {"position", e.sample->position},
                              {"first", e.sample->first},
                              {"norm", e.norm},
                              {"tokens", e.sample->tokens},
                              {"text", text},
                              {"pattern", e.pattern},
                              {"mass_before_window", std::max(0.0, 1.0 - std::accumulate(e.pattern.begin(), e.pattern.end(), 0.0))}});
        }
        deciles.push_back({{"decile", dec.decile},
                           {"size", dec.examples.size()},
                           {"norm_low", dec.examples.empty() ? json(nullptr) : json(dec.norm_low)},
                           {"norm_high", dec.examples.empty() ? json(nullptr) : json(dec.norm_high)},
                           {"examples", examples}});
      }
      const int64_t* eh = entropy_histogram(l, h);
      const size_t label = static_cast<size_t>(head_index(l, h));
      heads.push_back({{"label", label < labels.size() ? labels[label] : "L" + std::to_string(l) + "H" + std::to_string(h)},
                       {"layer", l},
                       {"head", h},
                       {"distance_profile", std::vector<double>(profile.begin(), profile.begin() + static_cast<std::ptrdiff_t>(last))},
                       {"mean_distance", number(mean_distance(l, h))},
                       {"entropy_histogram", std::vector<int64_t>(eh, eh + kEntropyBins)},
                       {"output_norm", {{"mean", number(mean_output_norm(l, h))}, {"std", number(output_norm_std(l, h))}}},
                       {"top_key_tokens", token_list(key_tokens(l, h, top))},
                       {"top_query_tokens", token_list(query_tokens(l, h, top))},
                       {"deciles", deciles}});
    }
  return {{"queries", queries_},
          {"samples", sample_.size()},
          {"sample_capacity", samples_},
          {"window", window_},
          {"mass_unit", "2^-32"},
          {"entropy_bins", {{"count", kEntropyBins}, {"width", entropy_bin_width()}, {"from", 0.0}}},
          {"heads", heads}};
}

// ---- state ------------------------------------------------------------------------------------

json HeadDatasetStats::state() const {
  // Slots in token order, so that the state of merged shards equals one process's byte for byte
  // (but the norm accumulator, which is floating point).
  std::vector<size_t> order(slot_token_.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return slot_token_[a] < slot_token_[b]; });
  std::vector<int32_t> tok;
  std::vector<std::string> text;
  std::vector<int64_t> kc, qc;
  const size_t slots = order.size(), heads = key_mass_.size();
  std::vector<uint64_t> km(heads * slots), qm(heads * slots);
  for (size_t i = 0; i < slots; ++i) {
    const size_t s = order[i];
    tok.push_back(slot_token_[s]);
    text.push_back(slot_text_[s]);
    kc.push_back(key_count_[s]);
    qc.push_back(query_count_[s]);
    for (size_t hi = 0; hi < heads; ++hi) {
      km[hi * slots + i] = key_mass_[hi][s];
      qm[hi * slots + i] = query_mass_[hi][s];
    }
  }
  json samples = json::array();
  std::vector<float> norms, patterns;
  for (size_t i = 0; i < sample_.size(); ++i) {
    const HeadSample& s = sample_[i];
    samples.push_back({{"hash", s.hash}, {"index", s.index}, {"position", s.position}, {"first", s.first}, {"tokens", s.tokens}});
    norms.insert(norms.end(), sample_norm_[i].begin(), sample_norm_[i].end());
    patterns.insert(patterns.end(), sample_pattern_[i].begin(), sample_pattern_[i].end());
  }
  return {{"sample_capacity", samples_},
          {"window", window_},
          {"queries", queries_},
          {"distance", encode_array(distance_)},
          {"entropy", encode_array(entropy_)},
          {"output_norm", norm_.state()},
          {"tokens", tok},
          {"token_text", text},
          {"key_count", kc},
          {"query_count", qc},
          {"key_mass", encode_array(km)},
          {"query_mass", encode_array(qm)},
          {"samples", samples},
          {"sample_norm", encode_array(norms)},
          {"sample_pattern", encode_array(patterns)}};
}

HeadDatasetStats HeadDatasetStats::from_state(const json& j, int n_layers, int n_heads, int n_ctx) {
  try {
    if (!j.is_object()) throw Error("it is " + json_brief(j) + ", not an object");
    const int samples = static_cast<int>(int_in(j.at("sample_capacity"), "\"sample_capacity\"", 0, 1 << 16));
    const int window = static_cast<int>(int_in(j.at("window"), "\"window\"", 1, std::min(n_ctx, 4096)));
    if (n_layers < 1 || n_heads < 1 || n_ctx < 1 || static_cast<int64_t>(n_layers) * n_heads > (1 << 20))
      throw Error("the model shape has no heads");
    const size_t heads = static_cast<size_t>(n_layers) * static_cast<size_t>(n_heads);
    // The distance table is [head, n_ctx]: its string must hold that many values before the
    // constructor allocates them (the shape comes from the file too).
    if (!j.at("distance").is_string() ||
        base64_decoded_size(j.at("distance").get_ref<const std::string&>()) !=
            static_cast<int64_t>(heads * static_cast<size_t>(n_ctx) * sizeof(uint64_t)))
      throw Error("\"distance\" does not hold n_layers x n_heads x n_ctx totals");
    HeadDatasetStats s(n_layers, n_heads, n_ctx, samples, window);
    s.queries_ = int_in(j.at("queries"), "\"queries\"", 0, int64_t{1} << 53);
    s.distance_ = decode_array<uint64_t>(j.at("distance"), heads * static_cast<size_t>(n_ctx), "\"distance\"");
    s.entropy_ = decode_array<int64_t>(j.at("entropy"), heads * kEntropyBins, "\"entropy\"");
    for (int64_t c : s.entropy_)
      if (c < 0) throw Error("\"entropy\" holds a negative count");
    s.norm_ = MomentGrid::from_state(j.at("output_norm"), "output_norm");
    if (s.norm_.rows() != n_layers || s.norm_.cols() != n_heads) throw Error("\"output_norm\" has the wrong shape");
    const json& tokens = j.at("tokens");
    const json& texts = j.at("token_text");
    const json& kc = j.at("key_count");
    const json& qc = j.at("query_count");
    if (!tokens.is_array() || !texts.is_array() || !kc.is_array() || !qc.is_array() || texts.size() != tokens.size() ||
        kc.size() != tokens.size() || qc.size() != tokens.size())
      throw Error("\"tokens\", \"token_text\", \"key_count\" and \"query_count\" are not lists of one length");
    const size_t slots = tokens.size();
    // Sized by the strings' lengths, which the file bounds, before anything is allocated.
    const std::vector<uint64_t> km = decode_array<uint64_t>(j.at("key_mass"), heads * slots, "\"key_mass\"");
    const std::vector<uint64_t> qm = decode_array<uint64_t>(j.at("query_mass"), heads * slots, "\"query_mass\"");
    for (size_t i = 0; i < slots; ++i) {
      const int32_t t = static_cast<int32_t>(int_in(tokens[i], "a token", 0, INT32_MAX));
      if (!texts[i].is_string()) throw Error("a token's text is " + json_brief(texts[i]));
      if (s.token_slot_.contains(t)) throw Error("token " + std::to_string(t) + " is listed twice");
      s.slot_of(t, texts[i].get<std::string>());
      s.key_count_[i] = int_in(kc[i], "a key count", 0, int64_t{1} << 53);
      s.query_count_[i] = int_in(qc[i], "a query count", 0, int64_t{1} << 53);
      for (size_t hi = 0; hi < heads; ++hi) {
        s.key_mass_[hi][i] = km[hi * slots + i];
        s.query_mass_[hi][i] = qm[hi * slots + i];
      }
    }
    const json& list = j.at("samples");
    if (!list.is_array() || list.size() > static_cast<size_t>(samples))
      throw Error("\"samples\" is not a list of at most sample_capacity samples");
    const size_t n = list.size();
    const std::vector<float> norms = decode_array<float>(j.at("sample_norm"), n * heads, "\"sample_norm\"");
    const std::vector<float> patterns =
        decode_array<float>(j.at("sample_pattern"), n * heads * static_cast<size_t>(window), "\"sample_pattern\"");
    for (size_t i = 0; i < n; ++i) {
      const json& e = list[i];
      HeadSample hs;
      if (!e.is_object() || !e.contains("hash") || !e.at("hash").is_number_unsigned())
        throw Error("sample " + std::to_string(i) + " has no hash");
      hs.hash = e.at("hash").get<uint64_t>();
      hs.index = int_in(e.at("index"), "a sample's index", 0, int64_t{1} << 53);
      hs.position = static_cast<int>(int_in(e.at("position"), "a sample's position", 1, n_ctx - 1));
      hs.first = static_cast<int>(int_in(e.at("first"), "a sample's first position", std::max(0, hs.position - window + 1), hs.position));
      if (hs.hash != sample_hash(hs.index, hs.position)) throw Error("sample " + std::to_string(i) + "'s hash is not its key's");
      const json& st = e.at("tokens");
      if (!st.is_array() || st.size() != static_cast<size_t>(hs.position - hs.first + 1))
        throw Error("sample " + std::to_string(i) + "'s tokens do not cover first .. position");
      for (const json& t : st) hs.tokens.push_back(static_cast<int32_t>(int_in(t, "a sample token", 0, INT32_MAX)));
      if (i > 0 && !sample_before(s.sample_.back(), hs)) throw Error("\"samples\" are not in order, or repeat one");
      std::vector<float> nv(norms.begin() + static_cast<std::ptrdiff_t>(i * heads), norms.begin() + static_cast<std::ptrdiff_t>((i + 1) * heads));
      std::vector<float> pv(patterns.begin() + static_cast<std::ptrdiff_t>(i * heads * static_cast<size_t>(window)),
                            patterns.begin() + static_cast<std::ptrdiff_t>((i + 1) * heads * static_cast<size_t>(window)));
      for (float x : nv)
        if (!std::isfinite(x) || x < 0) throw Error("a sample's output norm is not a norm");
      for (float x : pv)
        if (!std::isfinite(x) || x < 0 || x > 1) throw Error("a sample's pattern is not attention weights");
      s.sample_.push_back(std::move(hs));
      s.sample_norm_.push_back(std::move(nv));
      s.sample_pattern_.push_back(std::move(pv));
    }
    return s;
  } catch (const nlohmann::json::exception& e) {
    throw Error("the head statistics: " + json_error_reason(e));
  } catch (const Error& e) {
    throw Error(std::string("the head statistics: ") + e.what());
  }
}

}  // namespace hs
