#include "core/analysis/unit_dataset.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <tuple>

#include "core/analysis/scan_state_io.h"
#include "core/error.h"
#include "core/io/base64.h"

namespace hs {

namespace {

using nlohmann::json;

// (activation desc, index, position): a total order, so merged top lists equal one process's.
bool top_before(const UnitExample& a, const UnitExample& b) {
  if (a.act != b.act) return a.act > b.act;
  return std::tie(a.index, a.position) < std::tie(b.index, b.position);
}
bool example_sample_before(const UnitExample& a, const UnitExample& b) {
  return std::tie(a.hash, a.index, a.position) < std::tie(b.hash, b.index, b.position);
}

json example_state(const UnitExample& e) {
  return json::array({std::bit_cast<uint32_t>(e.act), e.index, e.position, e.first, e.hash,
                      encode_array(e.tokens), encode_array(e.acts)});
}
UnitExample example_from_state(const json& j, int window, const std::string& what) {
  if (!j.is_array() || j.size() != 7) throw Error(what + " is not an example [act, index, position, first, hash, tokens, acts]");
  UnitExample e;
  e.act = std::bit_cast<float>(j.at(0).get<uint32_t>());
  e.index = j.at(1).get<int64_t>();
  e.position = j.at(2).get<int32_t>();
  e.first = j.at(3).get<int32_t>();
  e.hash = j.at(4).get<uint64_t>();
  const int64_t n = base64_decoded_size(j.at(5).get_ref<const std::string&>()) / 4;
  // Checked in 64 bits (the numbers come from the file), and the activation positive and finite:
  // the lists' order compares activations, which a NaN would make no order at all.
  if (n < 1 || n > window || e.first < 0 || e.first > e.position ||
      static_cast<int64_t>(e.position) >= static_cast<int64_t>(e.first) + n)
    throw Error(what + "'s window does not hold its position");
  if (!(e.act > 0.0f) || !std::isfinite(e.act)) throw Error(what + "'s activation is not a positive number");
  e.tokens = decode_array<int32_t>(j.at(5), static_cast<size_t>(n), what + " tokens");
  e.acts = decode_array<float>(j.at(6), static_cast<size_t>(n), what + " acts");
  return e;
}

}  // namespace

UnitDatasetStats::UnitDatasetStats(int64_t n_units, int samples, int window)
    : n_units_(n_units),
      samples_(samples),
      window_(window),
      active_(static_cast<size_t>(n_units), 0),
      max_(static_cast<size_t>(n_units), 0.0f),
      hist_(static_cast<size_t>(n_units * kBins), 0),
      top_(static_cast<size_t>(n_units)),
      sample_(static_cast<size_t>(n_units)) {
  if (n_units < 0 || samples < 0 || window < kAfter + 1) throw Error("unit statistics: bad shape");
}

int UnitDatasetStats::bin_of(float x) {
  // A positive float's bits, shifted, are monotone in its value: exponent, then mantissa.
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const int exp = static_cast<int>(bits >> 23) - 127;
  if (exp < kMinExp) return 0;
  if (exp >= kMaxExp) return kBins - 1;
  const int sub = static_cast<int>((bits >> 21) & 3u);  // the top two mantissa bits
  return (exp - kMinExp) * kBinsPerOctave + sub;
}

double UnitDatasetStats::bin_low(int b) {
  const int exp = kMinExp + b / kBinsPerOctave;
  return std::ldexp(1.0 + 0.25 * (b % kBinsPerOctave), exp);
}

UnitExample UnitDatasetStats::make_example(int64_t index, std::span<const int32_t> tokens, int p, float act,
                                           uint64_t hash, const RowMatrixXf& acts, int col) const {
  UnitExample e;
  e.act = act;
  e.index = index;
  e.position = p;
  e.hash = hash;
  const int T = static_cast<int>(tokens.size());
  const int last = std::min(T - 1, p + kAfter);
  e.first = std::max(0, last - window_ + 1);
  for (int q = e.first; q <= last; ++q) {
    e.tokens.push_back(tokens[static_cast<size_t>(q)]);
    e.acts.push_back(acts(q, col));
  }
  return e;
}

void UnitDatasetStats::add(int64_t index, std::span<const int32_t> tokens, int64_t first_unit, const RowMatrixXf& acts) {
  const int T = static_cast<int>(acts.rows());
  if (T != static_cast<int>(tokens.size()) || first_unit < 0 || first_unit + acts.cols() > n_units_)
    throw Error("unit statistics: activations of another shape");
  for (int p = 0; p < T; ++p) {
    const uint64_t hash = sample_hash(index, p);
    const float* row = acts.data() + static_cast<ptrdiff_t>(p) * acts.cols();
    for (int c = 0; c < acts.cols(); ++c) {
      const float x = row[c];
      if (!(x > 0.0f)) continue;  // inactive (or NaN): nothing to count
      const size_t u = static_cast<size_t>(first_unit + c);
      ++active_[u];
      if (x > max_[u]) max_[u] = x;
      ++hist_[u * kBins + static_cast<size_t>(bin_of(x))];
      std::vector<UnitExample>& top = top_[u];
      if (top.size() < kTopK || x > top.back().act) {  // equal act: a later (index, position) loses
        UnitExample e = make_example(index, tokens, p, x, hash, acts, c);
        top.insert(std::upper_bound(top.begin(), top.end(), e, top_before), std::move(e));
        if (top.size() > kTopK) top.pop_back();
      }
      std::vector<UnitExample>& s = sample_[u];
      if (samples_ > 0 && (static_cast<int>(s.size()) < samples_ || hash < s.back().hash)) {
        UnitExample e = make_example(index, tokens, p, x, hash, acts, c);
        s.insert(std::upper_bound(s.begin(), s.end(), e, example_sample_before), std::move(e));
        if (static_cast<int>(s.size()) > samples_) s.pop_back();
      }
    }
  }
}

void UnitDatasetStats::merge(const UnitDatasetStats& o) {
  if (o.n_units_ != n_units_ || o.samples_ != samples_ || o.window_ != window_)
    throw Error("the unit statistics were made with other units or settings");
  positions_ += o.positions_;
  for (size_t u = 0; u < static_cast<size_t>(n_units_); ++u) {
    active_[u] += o.active_[u];
    max_[u] = std::max(max_[u], o.max_[u]);
    std::vector<UnitExample> t = top_[u];
    t.insert(t.end(), o.top_[u].begin(), o.top_[u].end());
    std::sort(t.begin(), t.end(), top_before);
    if (t.size() > kTopK) t.resize(kTopK);
    top_[u] = std::move(t);
    std::vector<UnitExample> s = sample_[u];
    s.insert(s.end(), o.sample_[u].begin(), o.sample_[u].end());
    std::sort(s.begin(), s.end(), example_sample_before);
    if (static_cast<int>(s.size()) > samples_) s.resize(static_cast<size_t>(samples_));
    sample_[u] = std::move(s);
  }
  for (size_t i = 0; i < hist_.size(); ++i) hist_[i] += o.hist_[i];
}

json UnitDatasetStats::state() const {
  json j = {{"units", n_units_},    {"samples", samples_},          {"window", window_},
            {"positions", positions_}, {"active", encode_array(active_)}, {"max", encode_array(max_)},
            {"histogram", encode_array(hist_)}};
  json top = json::array(), sample = json::array();
  for (size_t u = 0; u < static_cast<size_t>(n_units_); ++u) {
    json t = json::array(), s = json::array();
    for (const UnitExample& e : top_[u]) t.push_back(example_state(e));
    for (const UnitExample& e : sample_[u]) s.push_back(example_state(e));
    top.push_back(std::move(t));
    sample.push_back(std::move(s));
  }
  j["top"] = std::move(top);
  j["sample"] = std::move(sample);
  return j;
}

UnitDatasetStats UnitDatasetStats::from_state(const json& j, int64_t n_units) {
  try {
    if (!j.is_object() || j.at("units").get<int64_t>() != n_units)
      throw Error("it holds " + (j.is_object() && j.contains("units") ? j.at("units").dump() : std::string("no")) +
                  " units; the settings say " + std::to_string(n_units));
    const int samples = j.at("samples").get<int>(), window = j.at("window").get<int>();
    if (samples < 0 || samples > 100000 || window < kAfter + 1 || window > 4096) throw Error("its samples or window are out of range");
    // The arrays' lengths checked against the count before anything of that size is allocated:
    // the count comes from the file, the arrays' text is already in memory.
    if (n_units < 0 || n_units > (int64_t{1} << 32) || !j.at("active").is_string() ||
        base64_decoded_size(j.at("active").get_ref<const std::string&>()) != n_units * 8 ||
        !j.at("histogram").is_string() ||
        base64_decoded_size(j.at("histogram").get_ref<const std::string&>()) / kBins != n_units * 8)
      throw Error("its arrays do not hold " + std::to_string(n_units) + " units");
    UnitDatasetStats s(n_units, samples, window);
    s.positions_ = j.at("positions").get<int64_t>();
    s.active_ = decode_array<int64_t>(j.at("active"), static_cast<size_t>(n_units), "active");
    s.max_ = decode_array<float>(j.at("max"), static_cast<size_t>(n_units), "max");
    s.hist_ = decode_array<int64_t>(j.at("histogram"), static_cast<size_t>(n_units * kBins), "histogram");
    const json& top = j.at("top");
    const json& sample = j.at("sample");
    if (!top.is_array() || !sample.is_array() || static_cast<int64_t>(top.size()) != n_units ||
        static_cast<int64_t>(sample.size()) != n_units)
      throw Error("its top and sample lists are not one per unit");
    for (size_t u = 0; u < static_cast<size_t>(n_units); ++u) {
      if (!top[u].is_array() || top[u].size() > kTopK || !sample[u].is_array() ||
          static_cast<int>(sample[u].size()) > samples)
        throw Error("unit " + std::to_string(u) + "'s lists are too long");
      for (const json& e : top[u]) s.top_[u].push_back(example_from_state(e, window, "a top example"));
      for (const json& e : sample[u]) s.sample_[u].push_back(example_from_state(e, window, "a sample"));
      if (!std::is_sorted(s.top_[u].begin(), s.top_[u].end(), top_before) ||
          !std::is_sorted(s.sample_[u].begin(), s.sample_[u].end(), example_sample_before))
        throw Error("unit " + std::to_string(u) + "'s lists are out of order");
    }
    return s;
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("the unit statistics are malformed: ") + e.what());
  }
}

}  // namespace hs

// ---- unit sources ---------------------------------------------------------------------------

#include "core/analysis/units.h"
#include "core/features/features.h"
#include "core/features/sae.h"
#include "core/model/model.h"

namespace hs {

nlohmann::json UnitSource::identity() const {
  nlohmann::json g = nlohmann::json::array();
  for (const Group& x : groups) {
    nlohmann::json e = {{"layer", x.layer}, {"width", x.width}};
    if (x.sae) {
      e["hook_in"] = x.sae->hook_in;
      e["hook_out"] = x.sae->hook_out;
      e["architecture"] = x.sae->architecture;
    } else {
      e["hook"] = "blocks." + std::to_string(x.layer) + ".mlp.hook_post";
    }
    g.push_back(std::move(e));
  }
  nlohmann::json j = {{"kind", kind}, {"units", n_units}, {"groups", std::move(g)}};
  if (kind == "sae") j["sae"] = sae_name;
  return j;
}

RowMatrixXf UnitSource::activations(const ActivationCache& cache, const Group& g) const {
  if (!g.sae) return neuron_activations(cache, g.layer);
  return sae_encode(*g.sae, hook_rows(cache, g.sae->hook_in));
}

UnitSource resolve_unit_source(const Model& model, const std::string& spec) {
  const ModelConfig& c = model.config();
  UnitSource s;
  if (spec == "mlp" || spec.rfind("mlp:", 0) == 0) {
    s.kind = "mlp";
    int lo = 0, hi = c.n_layers;
    if (spec.size() > 4) {
      const std::string l = spec.substr(4);
      char* end = nullptr;
      const long v = std::strtol(l.c_str(), &end, 10);
      if (l.empty() || *end != '\0' || v < 0 || v >= c.n_layers)
        throw Error("--units " + spec + ": " + model.name() + " has layers 0 .. " + std::to_string(c.n_layers - 1) +
                    "; give mlp (every layer) or mlp:L.");
      lo = static_cast<int>(v);
      hi = lo + 1;
    }
    for (int l = lo; l < hi; ++l) {
      s.groups.push_back({l, s.n_units, c.d_mlp, nullptr});
      s.n_units += c.d_mlp;
    }
    return s;
  }
  if (spec.rfind("sae:", 0) == 0 && spec.size() > 4) {
    s.kind = "sae";
    const std::filesystem::path dir = spec.substr(4);
    SaeSet set = load_sae_folder(dir);
    s.sae_name = std::filesystem::absolute(dir).lexically_normal().filename().string();
    if (s.sae_name.empty()) s.sae_name = std::filesystem::absolute(dir).lexically_normal().parent_path().filename().string();
    for (Sae& sae : set.saes) {
      try {
        check_sae_fits(sae, c);
      } catch (const Error& e) {
        throw Error("--units " + spec + ": the SAE does not fit " + model.name() + ": " + e.what());
      }
      auto p = std::make_shared<const Sae>(std::move(sae));
      s.groups.push_back({p->layer, s.n_units, p->d_sae, p});
      s.n_units += p->d_sae;
    }
    return s;
  }
  throw Error("--units " + spec + " is not a unit source; give mlp (every layer's neurons), mlp:L (layer L's) or "
              "sae:DIR (an SAE or transcoder folder).");
}

}  // namespace hs

// ---- dashboards -------------------------------------------------------------------------------

#include <fstream>

#include "core/io/export.h"
#include "core/model/ops.h"
#include "core/model/thread_scope.h"
#include "core/model/weights.h"
#include "core/tokenizer/tokenizer.h"

namespace hs {

namespace {

constexpr int kLogits = 10;           // top and bottom logits listed
constexpr int kQuantiles = 5;         // quantile intervals of the sample
constexpr int kPerQuantile = 5;       // examples shown per interval

// An example carries, beside HeadScope's own fields, those of Neuronpedia's activation record
// (hijohnnylin/neuronpedia, apps/webapp/prisma/schema.prisma, model Activation): `tokens`,
// `values`, `maxValue`, `maxValueTokenIndex`, `minValue`, `dataIndex` (a string there) and, for
// an example of a quantile part, the part's bounds as `binMin` / `binMax`.
nlohmann::json example_json(const Model& model, const UnitExample& e, const float* bin = nullptr) {
  nlohmann::json text = nlohmann::json::array();
  for (int32_t t : e.tokens) text.push_back(model.tokenizer().display(t));
  nlohmann::json j = {{"index", e.index},
                      {"position", e.position},
                      {"first", e.first},
                      {"token_ids", e.tokens},
                      {"tokens", std::move(text)},
                      {"values", e.acts},
                      {"maxValue", e.act},
                      {"maxValueTokenIndex", e.position - e.first},
                      {"minValue", e.acts.empty() ? 0.0f : *std::min_element(e.acts.begin(), e.acts.end())},
                      {"dataIndex", std::to_string(e.index)}};
  if (bin) {
    j["binMin"] = bin[0];
    j["binMax"] = bin[1];
  }
  return j;
}

const UnitSource::Group& group_of(const UnitSource& s, int64_t u) {
  for (const UnitSource::Group& g : s.groups)
    if (u >= g.first_unit && u < g.first_unit + g.width) return g;
  throw Error("unit " + std::to_string(u) + " is not one of the source's");
}

}  // namespace

std::filesystem::path unit_dashboards_folder(const std::filesystem::path& out) {
  std::filesystem::path p = out;
  return p.replace_extension(".units");
}

namespace {

RowVectorXf unit_direction(const Model& model, const UnitSource::Group& g, int local) {
  return g.sae ? latent_output_direction(*model.weights(), *g.sae, local)
               : neuron_output_direction(*model.weights(), g.layer, local);
}

// The logit effects of units first .. first + n - 1: their directions stacked and unembedded in one
// product (one read of W_U for the chunk, not one per unit).
std::vector<LogitEffects> chunk_logit_effects(const Model& model, const UnitSource& source, int64_t first, int64_t n) {
  const ModelConfig& c = model.config();
  RowMatrixXf dirs(n, c.d_model);  // [unit, d_model]
  for (int64_t i = 0; i < n; ++i) {
    const UnitSource::Group& g = group_of(source, first + i);
    dirs.row(i) = unit_direction(model, g, static_cast<int>(first + i - g.first_unit));
  }
  RowMatrixXf logits(n, c.d_vocab);  // [unit, d_vocab]
  unembed_forward(logits, dirs, model.weights()->packed_unembed());
  std::vector<LogitEffects> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const RowVectorXf e = logits.row(i);
    for (int t : top_units(e, kLogits, false)) out[static_cast<size_t>(i)].top.push_back({t, e(t)});
    const RowVectorXf neg = -e;
    for (int t : top_units(neg, kLogits, false)) out[static_cast<size_t>(i)].bottom.push_back({t, e(t)});
  }
  return out;
}

nlohmann::json dashboard_json(const Model& model, const UnitSource& source, const UnitDatasetStats& st, int64_t u,
                              const LogitEffects& fx);

}  // namespace

nlohmann::json unit_dashboard_json(const Model& model, const UnitSource& source, const UnitDatasetStats& st, int64_t u) {
  return dashboard_json(model, source, st, u, chunk_logit_effects(model, source, u, 1).at(0));
}

namespace {

nlohmann::json dashboard_json(const Model& model, const UnitSource& source, const UnitDatasetStats& st, int64_t u,
                              const LogitEffects& fx) {
  const UnitSource::Group& g = group_of(source, u);
  const int local = static_cast<int>(u - g.first_unit);
  nlohmann::json j;
  j["index"] = local;
  j["unit"] = u;
  j["layer"] = g.layer;
  j["hook"] = g.sae ? g.sae->hook_in : "blocks." + std::to_string(g.layer) + ".mlp.hook_post";
  j["act_max"] = st.act_max(u);
  const int64_t n = st.positions();
  j["frac_nonzero"] = n > 0 ? static_cast<double>(st.active(u)) / static_cast<double>(n) : 0.0;
  j["active_count"] = st.active(u);
  j["positions"] = n;
  // The non-empty span of the fixed bins: lower edges and counts (the last edge closes the span).
  const int64_t* h = st.histogram(u);
  int lo = UnitDatasetStats::kBins, hi = -1;
  for (int b = 0; b < UnitDatasetStats::kBins; ++b)
    if (h[b] > 0) lo = std::min(lo, b), hi = b;
  nlohmann::json edges = nlohmann::json::array(), counts = nlohmann::json::array();
  for (int b = lo; b <= hi; ++b) {
    edges.push_back(UnitDatasetStats::bin_low(b));
    counts.push_back(h[b]);
  }
  if (hi >= 0) edges.push_back(UnitDatasetStats::bin_low(hi + 1));
  j["histogram"] = {{"bin_edges", std::move(edges)}, {"bar_heights", std::move(counts)}};
  // Logit effects: the unit's output direction through W_U (units.h), no final norm.
  const auto list = [&](const std::vector<TokenEffect>& v) {
    nlohmann::json a = nlohmann::json::array();
    for (const TokenEffect& t : v)
      a.push_back({{"token", t.token}, {"text", model.tokenizer().display(t.token)}, {"value", t.value}});
    return a;
  };
  j["top_logits"] = list(fx.top);
  j["bottom_logits"] = list(fx.bottom);
  nlohmann::json top = nlohmann::json::array();
  for (const UnitExample& e : st.top(u)) top.push_back(example_json(model, e));
  j["examples_top"] = std::move(top);
  // The sample sorted by activation, cut into kQuantiles parts of equal size; each part shows its
  // members with the smallest hashes (the sample's own order: reproducible).
  std::vector<const UnitExample*> by_act;
  for (const UnitExample& e : st.sample(u)) by_act.push_back(&e);
  std::stable_sort(by_act.begin(), by_act.end(), [](const UnitExample* a, const UnitExample* b) {
    return std::tie(a->act, a->hash) < std::tie(b->act, b->hash);
  });
  nlohmann::json quantiles = nlohmann::json::array();
  const size_t m = by_act.size();
  for (int q = 0; q < kQuantiles && m > 0; ++q) {
    const size_t a = m * static_cast<size_t>(q) / kQuantiles, b = m * static_cast<size_t>(q + 1) / kQuantiles;
    if (a == b) continue;
    std::vector<const UnitExample*> part(by_act.begin() + static_cast<ptrdiff_t>(a), by_act.begin() + static_cast<ptrdiff_t>(b));
    std::sort(part.begin(), part.end(), [](const UnitExample* x, const UnitExample* y) { return x->hash < y->hash; });
    nlohmann::json ex = nlohmann::json::array();
    const float bin[2] = {by_act[a]->act, by_act[b - 1]->act};
    for (size_t i = 0; i < part.size() && i < kPerQuantile; ++i) ex.push_back(example_json(model, *part[i], bin));
    quantiles.push_back({{"quantile_low", static_cast<double>(q) / kQuantiles},
                         {"quantile_high", static_cast<double>(q + 1) / kQuantiles},
                         {"act_low", by_act[a]->act},
                         {"act_high", by_act[b - 1]->act},
                         {"size", b - a},
                         {"examples", std::move(ex)}});
  }
  j["examples_quantiles"] = std::move(quantiles);
  return j;
}

}  // namespace

void write_unit_dashboards(const Model& model, const UnitSource& source, const UnitDatasetStats& st,
                           const nlohmann::json& settings, const std::filesystem::path& folder) {
  namespace fs = std::filesystem;
  const fs::path tmp = folder.string() + ".tmp";
  std::error_code ec;
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  if (ec) throw Error("cannot create " + tmp.string() + ": " + ec.message());
  nlohmann::json units = nlohmann::json::array();
  constexpr int64_t kChunk = 512;  // units unembedded together: [512, d_vocab] floats
  std::vector<LogitEffects> fx;
  for (int64_t u = 0; u < st.n_units(); ++u) {
    if (u % kChunk == 0) fx = chunk_logit_effects(model, source, u, std::min(kChunk, st.n_units() - u));
    const nlohmann::json d = dashboard_json(model, source, st, u, fx[static_cast<size_t>(u % kChunk)]);
    units.push_back({{"unit", u}, {"layer", d.at("layer")}, {"index", d.at("index")},
                     {"act_max", d.at("act_max")}, {"frac_nonzero", d.at("frac_nonzero")}});
    std::ofstream f(tmp / ("u" + std::to_string(u) + ".json"), std::ios::binary);
    f << d.dump();
    if (!f) throw Error("writing " + (tmp / ("u" + std::to_string(u) + ".json")).string() + " failed (is the disk full?)");
  }
  const nlohmann::json index = {{"format", "headscope-unit-dashboards"},
                                {"version", 1},
                                {"model", settings.at("model")},
                                {"source", settings.at("units")},
                                {"positions", st.positions()},
                                {"top_k", UnitDatasetStats::kTopK},
                                {"quantiles", kQuantiles},
                                {"units", std::move(units)}};
  write_file_atomically(tmp / "index.json", index.dump(1));
  // Replace the old folder only now that the new one is complete.
  const fs::path old = folder.string() + ".old";
  fs::remove_all(old, ec);
  if (fs::exists(folder)) fs::rename(folder, old);
  fs::rename(tmp, folder);
  fs::remove_all(old, ec);
}

}  // namespace hs
