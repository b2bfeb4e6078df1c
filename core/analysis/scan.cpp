#include "core/analysis/scan.h"

#include <omp.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <exception>
#include <fstream>
#include <limits>
#include <set>
#include <utility>

#include "core/analysis/dla.h"
#include "core/analysis/head_scores.h"
#include "core/analysis/head_detectors.h"
#include "core/analysis/patching.h"
#include "core/error.h"
#include "core/io/fnv1a.h"
#include "core/model/config_json.h"
#include "core/model/forward.h"
#include "core/model/model.h"
#include "core/model/thread_scope.h"
#include "core/tokenizer/byte_level.h"

namespace hs {

namespace {

using nlohmann::json;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Bad-line reasons (docs/scan.md lists them with what to do about each).
constexpr const char* kInvalidUtf8 = "invalid_utf8";
constexpr const char* kEmpty = "empty";
constexpr const char* kTooLong = "too_long";
constexpr const char* kBadJson = "bad_json";
constexpr const char* kNoText = "no_text";
constexpr const char* kPatchFields = "patch_fields_missing";
constexpr const char* kPatchLengths = "patch_lengths_differ";
constexpr const char* kAnswerTokens = "answer_not_one_token";
constexpr const char* kPatchNoEffect = "patch_metric_equal";
constexpr const char* kTokenizeFailed = "tokenize_failed";

// The largest count a scan output may hold (of prompts, of values in a cell): 2^53, up to which a
// double counts exactly. No scan gets near it; a file that says more was edited, and merging such
// counts could overflow int64.
constexpr int64_t kMaxCount = int64_t{1} << 53;

// An integer read from a scan output, refused unless the JSON holds an integer in [lo, hi]:
// nlohmann's get<int>() would cast 1e30 (undefined behaviour) or wrap 4294967297 to 1.
int64_t integer(const json& v, const std::string& what, int64_t lo, int64_t hi) {
  bool integral = false;
  int64_t x = 0;
  if (v.is_number_unsigned()) {  // nlohmann keeps a non-negative integer as uint64
    integral = v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
    x = static_cast<int64_t>(v.get<uint64_t>());
  } else if (v.is_number_integer()) {
    integral = true;
    x = v.get<int64_t>();
  }
  if (integral && x >= lo && x <= hi) return x;
  throw Error(what + " is " + json_brief(v) + "; expected an integer from " + std::to_string(lo) + " to " +
              std::to_string(hi));
}

int int_field(const json& v, const std::string& what, int64_t lo = std::numeric_limits<int>::min()) {
  return static_cast<int>(integer(v, what, lo, std::numeric_limits<int>::max()));
}

int64_t count_field(const json& v, const std::string& what) { return integer(v, what, 0, kMaxCount); }

std::vector<int64_t> count_list(const json& v, const std::string& what) {
  if (!v.is_array()) throw Error(what + " is " + json_brief(v) + "; expected a list of counts");
  std::vector<int64_t> out;
  out.reserve(v.size());
  for (const json& x : v) out.push_back(count_field(x, what + " entry"));
  return out;
}

// a + b for counts of a merge; refused past kMaxCount rather than overflowing.
int64_t add_counts(int64_t a, int64_t b, const std::string& what) {
  if (a > kMaxCount - b)
    throw Error("the shards together count more than 2^53 " + what + "; their outputs were edited.");
  return a + b;
}

}  // namespace

// ---- MomentGrid -----------------------------------------------------------------------------

MomentGrid::MomentGrid(int rows, int cols)
    : rows_(rows), cols_(cols),
      count_(static_cast<size_t>(rows) * static_cast<size_t>(cols), 0),
      mean_(count_.size(), 0.0),
      m2_(count_.size(), 0.0) {}

void MomentGrid::add(int r, int c, double x) {
  if (!std::isfinite(x)) return;
  const size_t i = index(r, c);
  const int64_t n = ++count_[i];
  const double delta = x - mean_[i];
  mean_[i] += delta / static_cast<double>(n);
  m2_[i] += delta * (x - mean_[i]);
}

void MomentGrid::merge(const MomentGrid& other) {
  if (other.rows_ != rows_ || other.cols_ != cols_)
    throw Error("cannot merge accumulators of shape [" + std::to_string(other.rows_) + ", " + std::to_string(other.cols_) +
                "] into [" + std::to_string(rows_) + ", " + std::to_string(cols_) + "].");
  for (size_t i = 0; i < count_.size(); ++i) {
    const int64_t nb = other.count_[i];
    if (nb == 0) continue;
    const int64_t na = count_[i];
    if (na == 0) {
      count_[i] = add_counts(0, nb, "values in one cell");
      mean_[i] = other.mean_[i];
      m2_[i] = other.m2_[i];
      continue;
    }
    // Chan, Golub and LeVeque's pairwise update.
    const double n = static_cast<double>(na + nb);
    const double delta = other.mean_[i] - mean_[i];
    mean_[i] += delta * (static_cast<double>(nb) / n);
    m2_[i] += other.m2_[i] + delta * delta * (static_cast<double>(na) * static_cast<double>(nb) / n);
    count_[i] = add_counts(na, nb, "values in one cell");
  }
}

double MomentGrid::mean(int r, int c) const {
  const size_t i = index(r, c);
  return count_[i] > 0 ? mean_[i] : kNaN;
}

double MomentGrid::variance(int r, int c) const {
  const size_t i = index(r, c);
  return count_[i] > 0 ? m2_[i] / static_cast<double>(count_[i]) : kNaN;
}

json MomentGrid::state() const {
  return {{"rows", rows_}, {"cols", cols_}, {"count", count_}, {"mean", mean_}, {"m2", m2_}};
}

MomentGrid MomentGrid::from_state(const json& j, const std::string& name) {
  try {
    const int64_t rows = integer(j.at("rows"), "\"rows\"", 0, 1 << 24), cols = integer(j.at("cols"), "\"cols\"", 0, 1 << 24);
    std::vector<int64_t> count = count_list(j.at("count"), "\"count\"");
    std::vector<double> mean = j.at("mean").get<std::vector<double>>();
    std::vector<double> m2 = j.at("m2").get<std::vector<double>>();
    // Checked before anything is sized from them: the file may have been edited.
    if (count.size() != static_cast<size_t>(rows * cols) || mean.size() != count.size() || m2.size() != count.size())
      throw Error("the arrays do not have rows x cols entries");
    for (size_t i = 0; i < count.size(); ++i)
      if (!std::isfinite(mean[i]) || !std::isfinite(m2[i]) || m2[i] < 0)
        throw Error("entry " + std::to_string(i) + " is not a count, mean and M2 of a sample");
    MomentGrid g;
    g.rows_ = static_cast<int>(rows);
    g.cols_ = static_cast<int>(cols);
    g.count_ = std::move(count);
    g.mean_ = std::move(mean);
    g.m2_ = std::move(m2);
    return g;
  } catch (const json::exception& e) {
    throw Error("accumulator \"" + name + "\": " + json_error_reason(e));
  } catch (const Error& e) {
    throw Error("accumulator \"" + name + "\": " + e.what());
  }
}

// ---- settings -------------------------------------------------------------------------------

const std::vector<std::string>& scan_text_aggregate_names() {
  static const std::vector<std::string> names = {"previous_token",    "duplicate_token", "induction",
                                                 "attention_entropy", "dla_next_token",  "loss_per_position"};
  return names;
}

const std::vector<std::string>& scan_aggregate_names() {
  static const std::vector<std::string> names = {"previous_token",  "duplicate_token", "induction",
                                                 "attention_entropy", "dla_next_token", "loss_per_position",
                                                 "patching_resid_pre", "patching_z"};
  return names;
}

namespace {

// [rows, cols] of each aggregate for a model of this shape.
std::pair<int, int> grid_shape(const std::string& name, int n_layers, int n_heads, int n_ctx) {
  if (name == "loss_per_position") return {std::max(n_ctx - 1, 1), 1};
  if (name == "patching_resid_pre") return {n_layers, n_ctx};
  return {n_layers, n_heads};
}

struct InputSummary {
  Fnv1a64 hash;
  int64_t bytes = 0, lines = 0;
  bool jsonl = false;
};

// One pass over the file: its hash, its size in lines (as std::getline counts them) and whether it
// is JSON Lines (a .jsonl name, or a first non-blank line starting with '{').
InputSummary summarize_input(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw Error("cannot read the input " + path.string() +
                ": it does not exist or is not readable. Give a text file with one prompt a line, or JSON Lines "
                "with a \"text\" field.");
  if (std::filesystem::is_directory(path))
    throw Error("the input " + path.string() + " is a folder; give a text or JSON Lines file.");
  InputSummary s;
  std::string ext = path.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  s.jsonl = ext == ".jsonl";
  bool first_seen = ext == ".jsonl", at_line_start = true;
  char last = '\n';
  std::vector<char> buf(1 << 16);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const std::streamsize got = in.gcount();
    for (std::streamsize i = 0; i < got; ++i) {
      const unsigned char ch = static_cast<unsigned char>(buf[static_cast<size_t>(i)]);
      s.hash.add(ch);
      if (ch == '\n') {
        ++s.lines;
        at_line_start = true;
      } else {
        if (!first_seen && !std::isspace(ch)) {
          first_seen = true;
          s.jsonl = ch == '{' && at_line_start;
        }
        if (!std::isspace(ch)) at_line_start = false;
      }
      last = static_cast<char>(ch);
    }
    s.bytes += got;
  }
  if (in.bad()) throw Error("reading the input " + path.string() + " failed part way; check the disk and try again.");
  if (s.bytes > 0 && last != '\n') ++s.lines;
  return s;
}

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

int64_t covered_indices(const json& settings) {
  const json& in = settings.at("input");
  const int64_t available = in.contains("lines") ? in.at("lines").get<int64_t>() : -1;
  const int64_t limit = settings.at("limit").get<int64_t>();
  if (available < 0) return limit;
  return limit < 0 ? available : std::min(available, limit);
}

int64_t shard_size(int64_t total, int index, int count) {
  if (total <= index) return 0;
  return (total - index + count - 1) / count;
}

// Where two settings objects first differ ("input.fnv1a64"), or empty. "paths" are informational:
// a shard may find the same model and input under another path on another machine.
std::string first_difference(const json& a, const json& b, const std::string& prefix) {
  if (a.is_object() && b.is_object()) {
    std::set<std::string> keys;
    for (auto it = a.begin(); it != a.end(); ++it) keys.insert(it.key());
    for (auto it = b.begin(); it != b.end(); ++it) keys.insert(it.key());
    for (const std::string& k : keys) {
      if (prefix.empty() && k == "paths") continue;
      const std::string name = prefix.empty() ? k : prefix + "." + k;
      if (!a.contains(k) || !b.contains(k)) return name;
      const std::string d = first_difference(a.at(k), b.at(k), name);
      if (!d.empty()) return d;
    }
    return {};
  }
  return a == b ? std::string() : prefix;
}

json value_at(const json& j, const std::string& dotted) {
  const json* p = &j;
  size_t i = 0;
  while (i <= dotted.size()) {
    size_t k = dotted.find('.', i);
    if (k == std::string::npos) k = dotted.size();
    const std::string key = dotted.substr(i, k - i);
    if (!p->is_object() || !p->contains(key)) return "(absent)";
    p = &p->at(key);
    i = k + 1;
  }
  return *p;
}

}  // namespace

// Version 2: settings.model gained the model's fingerprint (model.h), so resume and merge refuse a
// scan of other weights with the same name and shape.
constexpr int kScanFormatVersion = 2;

json scan_settings(const Model& model, const ScanOptions& o) {
  const ModelConfig& c = model.config();
  json s;
  s["format"] = "headscope-scan";
  s["version"] = kScanFormatVersion;
  s["model"] = {{"name", model.name()},         {"model_type", c.model_type}, {"n_layers", c.n_layers},
                {"n_heads", c.n_heads},         {"d_model", c.d_model},       {"d_vocab", c.d_vocab},
                {"n_ctx", c.n_ctx},             {"parameters", c.parameter_count()},
                // Which weights and tokenizer: two models of one name and shape are not one model.
                {"fingerprint", model.fingerprint()}};
  json paths = {{"model", std::filesystem::absolute(model.dir()).lexically_normal().string()}};
  if (o.repeat_random > 0) {
    s["input"] = {{"repeat_random", o.repeat_random}, {"seed", o.seed}};
    paths["input"] = nullptr;
  } else {
    const InputSummary in = summarize_input(o.input);
    s["input"] = {{"fnv1a64", hex64(in.hash.h)},
                  {"bytes", in.bytes},
                  {"lines", in.lines},
                  {"format", in.jsonl ? "jsonl" : "text"}};
    paths["input"] = std::filesystem::absolute(o.input).lexically_normal().string();
  }
  s["limit"] = o.limit;
  s["max_tokens"] = o.max_tokens;
  s["bos"] = o.prepend_bos;
  // Only when chosen, so that the settings of a scan of every aggregate read as before.
  if (!o.aggregates.empty()) {
    for (const std::string& name : o.aggregates)
      if (std::find(scan_text_aggregate_names().begin(), scan_text_aggregate_names().end(), name) ==
          scan_text_aggregate_names().end())
        throw Error("there is no aggregate \"" + name + "\" to choose; the text rows' aggregates are " +
                    [] {
                      std::string all;
                      for (const std::string& n : scan_text_aggregate_names()) all += (all.empty() ? "" : ", ") + n;
                      return all;
                    }() + ".");
    std::vector<std::string> chosen;  // in output order, each once
    for (const std::string& n : scan_text_aggregate_names())
      if (std::find(o.aggregates.begin(), o.aggregates.end(), n) != o.aggregates.end()) chosen.push_back(n);
    s["aggregates"] = chosen;
  }
  // Only with --heads, so that the settings of a scan without it read as before.
  if (o.heads)
    s["heads"] = {{"samples", HeadDatasetStats::kDefaultSamples},
                  {"window", std::min(HeadDatasetStats::kDefaultWindow, c.n_ctx)}};
  if (!o.units.empty()) {
    json u = resolve_unit_source(model, o.units).identity();
    u["samples"] = UnitDatasetStats::kDefaultSamples;
    u["window"] = UnitDatasetStats::kDefaultWindow;
    s["units"] = std::move(u);
    paths["units"] = o.units;
  }
  s["paths"] = paths;
  return s;
}

void require_same_settings(const json& expected, const json& found, const std::string& what) {
  const std::string d = first_difference(expected, found, "");
  if (d.empty()) return;
  throw Error(what + " was made with other settings: " + d + " is " + value_at(found, d).dump() + " there but " +
              value_at(expected, d).dump() + " here. Use the same model, input file and options (--limit, "
              "--max-tokens, --no-bos, --repeat-random, --seed), or start a new output.");
}

ScanState new_scan_state(const Model& model, const ScanOptions& o, json settings) {
  const ModelConfig& c = model.config();
  if (o.shard_count < 1 || o.shard_index < 0 || o.shard_index >= o.shard_count)
    throw Error("shard " + std::to_string(o.shard_index) + "/" + std::to_string(o.shard_count) +
                " does not exist: the index must be 0 .. count - 1.");
  if (o.max_tokens > c.n_ctx)
    throw Error("--max-tokens " + std::to_string(o.max_tokens) + " is more than the context of " + model.name() + " (" +
                std::to_string(c.n_ctx) + " tokens); give at most " + std::to_string(c.n_ctx) + ".");
  if (o.repeat_random > 0 && 2 * o.repeat_random + 1 > c.n_ctx)
    throw Error("--repeat-random " + std::to_string(o.repeat_random) + " makes prompts of " +
                std::to_string(2 * o.repeat_random + 1) + " tokens (BOS + R + R), more than the context of " +
                model.name() + " (" + std::to_string(c.n_ctx) + "); give at most " + std::to_string((c.n_ctx - 1) / 2) +
                ".");
  if (o.repeat_random > 0 && o.limit < 0) throw Error("--repeat-random needs --limit: how many prompts to make.");
  ScanState s;
  s.settings = std::move(settings);
  s.shard_index = o.shard_index;
  s.shard_count = o.shard_count;
  s.total_indices = covered_indices(s.settings);
  s.n_layers = c.n_layers;
  s.n_heads = c.n_heads;
  s.n_ctx = c.n_ctx;
  for (const std::string& name : scan_aggregate_names()) {
    const auto [rows, cols] = grid_shape(name, c.n_layers, c.n_heads, c.n_ctx);
    s.grids[name] = MomentGrid(rows, cols);
  }
  if (s.settings.contains("heads"))
    s.heads = HeadDatasetStats(c.n_layers, c.n_heads, c.n_ctx, s.settings.at("heads").at("samples").get<int>(),
                               s.settings.at("heads").at("window").get<int>());
  if (s.settings.contains("units"))
    s.units = UnitDatasetStats(s.settings.at("units").at("units").get<int64_t>(),
                               s.settings.at("units").at("samples").get<int>(),
                               s.settings.at("units").at("window").get<int>());
  return s;
}

// ---- one input line ------------------------------------------------------------------------

ScanRow parse_scan_row(std::string line, bool jsonl) {
  const auto bad = [](const char* reason) {
    ScanRow r;
    r.bad_reason = reason;
    return r;
  };
  const auto blank = [](const std::string& t) {
    return std::all_of(t.begin(), t.end(), [](unsigned char ch) { return std::isspace(ch); });
  };
  if (!line.empty() && line.back() == '\r') line.pop_back();
  if (tokenizer_detail::find_invalid_utf8(line)) return bad(kInvalidUtf8);
  if (blank(line)) return bad(kEmpty);
  ScanRow row;
  if (!jsonl) {
    row.kind = ScanRow::Kind::Text;
    row.text = std::move(line);
    return row;
  }
  json j;
  try {
    j = json::parse(line);
  } catch (const json::exception&) {
    return bad(kBadJson);
  }
  if (!j.is_object()) return bad(kBadJson);
  const char* patch_keys[] = {"clean", "corrupt", "answer", "wrong"};
  int patch_fields = 0;
  for (const char* k : patch_keys) patch_fields += j.contains(k) && j.at(k).is_string();
  if (patch_fields == 4) {
    row.kind = ScanRow::Kind::Patch;
    row.clean = j.at("clean").get<std::string>();
    row.corrupt = j.at("corrupt").get<std::string>();
    row.answer = j.at("answer").get<std::string>();
    row.wrong = j.at("wrong").get<std::string>();
    return row;
  }
  if (patch_fields > 0 && !j.contains("text")) return bad(kPatchFields);
  if (!j.contains("text") || !j.at("text").is_string()) return bad(kNoText);
  row.text = j.at("text").get<std::string>();
  if (blank(row.text)) return bad(kEmpty);
  row.kind = ScanRow::Kind::Text;
  return row;
}

const std::vector<std::string>& scan_bad_line_reasons() {
  static const std::vector<std::string> reasons = {kInvalidUtf8, kEmpty,         kTooLong,      kBadJson,
                                                   kNoText,      kPatchFields,   kPatchLengths, kAnswerTokens,
                                                   kPatchNoEffect, kTokenizeFailed};
  return reasons;
}

// ---- one prompt -----------------------------------------------------------------------------

namespace {

// Mean over query positions 1 .. T-1 of each head's attention entropy -sum_k p log p (nats).
// Query 0 has one key and entropy 0 whatever the head does, so it is left out.
RowMatrixXf attention_entropy(const ActivationCache& cache) {
  const int L = cache.n_layer(), H = cache.config().n_heads, T = cache.n_pos();
  RowMatrixXf out = RowMatrixXf::Constant(L, H, std::numeric_limits<float>::quiet_NaN());
  if (T < 2) return out;
  for (int l = 0; l < L; ++l)
    for (int h = 0; h < H; ++h) {
      double total = 0.0;
      for (int q = 1; q < T; ++q) {
        const ConstRowVectorRef row = cache.pattern_row(l, h, q);
        double e = 0.0;
        for (Eigen::Index k = 0; k < row.size(); ++k)
          if (row[k] > 0.0f) e -= static_cast<double>(row[k]) * std::log(static_cast<double>(row[k]));
        total += e;
      }
      out(l, h) = static_cast<float>(total / (T - 1));
    }
  return out;
}

// Each head's direct logit attribution to the actual next token, averaged over positions
// 0 .. T-2: at position p, head (l, h)'s contribution (its result z_h[p] @ W_O[h], through a
// post-attention norm with its scale frozen when the model has one) through the final norm with its
// scale frozen (frozen_final_norm_dot of dla.h), dotted with the unembedding of token p+1.
// Computed as z_h[p] . (W_O[h] d_p), d_p the centred (LayerNorm) direction over the frozen scale,
// so no [pos, d_model] result is formed per head.
RowMatrixXf dla_next_token(const ActivationCache& cache) {
  const ModelConfig& c = cache.config();
  const int L = cache.n_layer(), H = c.n_heads, T = cache.n_pos(), D = c.d_model, dh = c.d_head;
  RowMatrixXf out = RowMatrixXf::Constant(L, H, std::numeric_limits<float>::quiet_NaN());
  if (T < 2) return out;
  const Weights& w = *cache.weights();
  const ConstRowVectorRef norm_w(w.final_norm_w(), D);
  RowMatrixXf direction(T - 1, D);  // [pos, d_model]
  RowVectorXf u(D);
  for (int p = 0; p + 1 < T; ++p) {
    w.unembed_row(cache.tokens()[static_cast<size_t>(p + 1)], u.data());
    RowVectorXf d = u.cwiseProduct(norm_w);
    // LayerNorm centres the part: x.d - mean(x) sum(d) = x.(d - mean(d)).
    if (c.architecture.norm == NormKind::LayerNorm) d.array() -= d.mean();
    direction.row(p) = d / cache.ln_final_scale(p);
  }
  RowMatrixXf back(T - 1, dh);  // [pos, d_head]
  RowMatrixXf layer_direction;  // [pos, d_model] direction through layer l's frozen post-norm
  for (int l = 0; l < L; ++l) {
    const RowMatrixXf z = cache.layer(l).z.to_matrix();  // [pos, head*d_head]
    // With a post-attention norm (Gemma) the head's result passes it, its scale frozen at this
    // run's value, before it joins the stream: r * w / scale(p), folded into the direction.
    layer_direction = direction;
    if (cache.has_post_norm(1)) {
      const VectorXf scale = cache.post_norm_scale(l, 1);
      const ConstRowVectorRef post_w(w.layer(l).post_attn_norm_w, D);
      for (int p = 0; p + 1 < T; ++p) layer_direction.row(p) = layer_direction.row(p).cwiseProduct(post_w) / scale(p);
    }
    for (int h = 0; h < H; ++h) {
      back.noalias() = layer_direction * w.W_O(l, h).transpose();
      const double total = z.block(0, h * dh, T - 1, dh).cwiseProduct(back).cast<double>().sum();
      out(l, h) = static_cast<float>(total / (T - 1));
    }
  }
  return out;
}

// Cross-entropy of the actual next token at positions 0 .. T-2 (nats).
std::vector<double> next_token_loss(const ActivationCache& cache) {
  const int T = cache.n_pos();
  std::vector<double> loss;
  for (int p = 0; p + 1 < T; ++p) {
    const auto row = cache.logits.row(p);
    const float mx = row.maxCoeff();
    const double lse = static_cast<double>(mx) + std::log(static_cast<double>((row.array() - mx).exp().sum()));
    loss.push_back(lse - static_cast<double>(row(cache.tokens()[static_cast<size_t>(p + 1)])));
  }
  return loss;
}

json grid_json(const RowMatrixXf& m) {
  json rows = json::array();
  for (Eigen::Index r = 0; r < m.rows(); ++r) {
    json row = json::array();
    for (Eigen::Index c = 0; c < m.cols(); ++c) row.push_back(std::isfinite(m(r, c)) ? json(m(r, c)) : json(nullptr));
    rows.push_back(std::move(row));
  }
  return rows;
}

void add_grid(MomentGrid& g, const RowMatrixXf& m) {
  for (int r = 0; r < m.rows(); ++r)
    for (int c = 0; c < m.cols(); ++c) g.add(r, c, m(r, c));
}

class Scanner {
 public:
  Scanner(const Model& model, const ScanOptions& o, ScanState& s, const ScanControl& control)
      : model_(model), o_(o), s_(s), control_(control) {
    if (!s_.units.empty()) units_ = resolve_unit_source(model_, o_.units);
  }

  // Handles input index `index` (line index + 1 = line number); returns true when it aggregated
  // a row.
  bool handle_line(int64_t index, std::string line) {
    const ScanRow row = parse_scan_row(std::move(line), jsonl_);
    switch (row.kind) {
      case ScanRow::Kind::Text: return text_row(index, row.text);
      case ScanRow::Kind::Patch: return patch_row(index, row);
      case ScanRow::Kind::Bad: break;
    }
    return bad(row.bad_reason, index);
  }

  bool handle_tokens(int64_t index, std::vector<int32_t> tokens) { return queue_prompt(index, std::move(tokens), 0); }

  // Runs the prompts queued so far (in one batched pass, or one by one with batch_tokens 1) and
  // adds them to the state in input order. Called before anything else touches the state in an
  // order that matters (a patch row's per-prompt line) and before the scan returns.
  void flush() {
    if (pending_.empty()) return;
    std::vector<std::shared_ptr<ActivationCache>> caches;
    if (o_.batch_tokens == 1 || !s_.units.empty()) {
      RunOptions ro;
      ro.threads = o_.threads;
      for (const Pending& p : pending_) caches.push_back(model_.run(p.tokens, ro));
    } else {
      std::vector<std::vector<int32_t>> prompts;
      for (Pending& p : pending_) prompts.push_back(p.tokens);
      BatchRunOptions bo;
      bo.threads = o_.threads;
      // Only what the aggregates asked for read: the patterns of every layer; z for DLA and the
      // head statistics; the logits for the loss and DLA.
      bo.keep_z = wants("dla_next_token") || !s_.heads.empty();
      bo.logits = wants("dla_next_token") || wants("loss_per_position");
      caches = forward_batch(model_.weights(), prompts, bo, &batch_scratch_);
    }
    // Each prompt's analyses on both threads (they read only its own run); then added to the
    // state in input order, so the sums are the same bits as one by one. On one thread the other
    // waited for them.
    std::vector<PromptAnalyses> analyses(pending_.size());
    std::exception_ptr failed;
    {
      const ThreadScope threads(o_.threads > 0 ? o_.threads : omp_get_num_procs());
#pragma omp parallel for schedule(dynamic, 1)
      for (size_t i = 0; i < pending_.size(); ++i) {
        try {
          analyses[i] = analyse(*caches[i]);
        } catch (...) {
#pragma omp critical(scan_analyse)
          if (!failed) failed = std::current_exception();
        }
      }
    }
    if (failed) std::rethrow_exception(failed);
    for (size_t i = 0; i < pending_.size(); ++i)
      aggregate(pending_[i].index, *caches[i], pending_[i].dropped, analyses[i]);
    pending_.clear();
    pending_tokens_ = 0;
  }

  bool jsonl_ = false;

 private:
  bool bad(const char* reason, int64_t index) {
    BadLines& b = s_.bad[reason];
    ++b.count;
    if (b.first_lines.size() < BadLines::kMaxListed) b.first_lines.push_back(index + 1);
    return false;
  }

  bool text_row(int64_t index, const std::string& text) {
    std::vector<int32_t> tokens;
    try {
      tokens = model_.encode(text, o_.prepend_bos);
    } catch (const Error&) {
      return bad(kTokenizeFailed, index);
    }
    if (tokens.empty()) return bad(kEmpty, index);
    int dropped = 0;
    const int n_ctx = model_.config().n_ctx;
    if (o_.max_tokens > 0 && static_cast<int>(tokens.size()) > o_.max_tokens) {
      dropped = static_cast<int>(tokens.size()) - o_.max_tokens;
      tokens.resize(static_cast<size_t>(o_.max_tokens));
    } else if (static_cast<int>(tokens.size()) > n_ctx) {
      return bad(kTooLong, index);
    }
    return queue_prompt(index, std::move(tokens), dropped);
  }

  // Rows per batched pass: --batch-tokens, but no more than kMaxBatchLogitBytes of logits when the
  // aggregates keep them (every prompt's [pos, d_vocab] waits in its cache until the batch is
  // aggregated: 2048 rows of Gemma's 256k vocabulary would be 2 GB).
  int64_t batch_tokens() const {
    const int64_t asked = o_.batch_tokens > 0 ? o_.batch_tokens : ScanOptions::kDefaultBatchTokens;
    if (!wants("dla_next_token") && !wants("loss_per_position")) return asked;
    constexpr int64_t kMaxBatchLogitBytes = int64_t{256} << 20;
    return std::max<int64_t>(1, std::min(asked, kMaxBatchLogitBytes / (4 * int64_t{model_.config().d_vocab})));
  }

  bool wants(const std::string& name) const {
    return o_.aggregates.empty() || std::find(o_.aggregates.begin(), o_.aggregates.end(), name) != o_.aggregates.end();
  }

  // A prompt joins the next batched pass; the batch runs once it holds batch_tokens() rows.
  bool queue_prompt(int64_t index, std::vector<int32_t> tokens, int dropped) {
    pending_tokens_ += static_cast<int64_t>(tokens.size());
    pending_.push_back({index, std::move(tokens), dropped});
    if (pending_tokens_ >= batch_tokens()) flush();
    return true;
  }

  // What the aggregates asked for read from one prompt's run: a function of that run alone.
  struct PromptAnalyses {
    PromptHeadScores scores;
    RowMatrixXf entropy, dla;
    std::vector<double> loss;
  };
  // Whether every prompt's position 0 is a BOS token, which the head scores and statistics are told.
  bool prompts_start_with_bos() const { return o_.prepend_bos || o_.repeat_random > 0; }

  PromptAnalyses analyse(const ActivationCache& run) const {
    // The analyses' products are small: on one thread, never Eigen's own threads, which spin
    // against each other on a busy machine (docs/DESIGN.md, "Things found the hard way").
    ThreadScope one_thread(1);
    const bool scores_wanted = wants("previous_token") || wants("duplicate_token") || wants("induction");
    PromptAnalyses a;
    if (scores_wanted) a.scores = score_heads_on_prompt(run, prompts_start_with_bos());
    if (wants("attention_entropy")) a.entropy = attention_entropy(run);
    if (wants("dla_next_token")) a.dla = dla_next_token(run);
    if (wants("loss_per_position")) a.loss = next_token_loss(run);
    return a;
  }

  // One prompt's run added to the aggregates asked for.
  void aggregate(int64_t index, const ActivationCache& run, int dropped, const PromptAnalyses& analyses) {
    const ActivationCache* cache = &run;
    const std::vector<int32_t>& tokens = run.tokens();
    ThreadScope one_thread(1);
    const PromptHeadScores& scores = analyses.scores;
    const RowMatrixXf& entropy = analyses.entropy;
    const RowMatrixXf& dla = analyses.dla;
    const std::vector<double>& loss = analyses.loss;
    if (wants("previous_token")) add_grid(s_.grids["previous_token"], scores.previous_token.scores);
    if (wants("duplicate_token")) add_grid(s_.grids["duplicate_token"], scores.duplicate_token.scores);
    if (wants("induction")) add_grid(s_.grids["induction"], scores.induction.scores);
    if (wants("attention_entropy")) add_grid(s_.grids["attention_entropy"], entropy);
    if (wants("dla_next_token")) add_grid(s_.grids["dla_next_token"], dla);
    MomentGrid& lg = s_.grids["loss_per_position"];
    double loss_sum = 0.0;
    for (size_t p = 0; p < loss.size(); ++p) {
      lg.add(static_cast<int>(p), 0, loss[p]);
      loss_sum += loss[p];
    }
    if (!s_.heads.empty()) s_.heads.add_prompt(model_, index, *cache, prompts_start_with_bos());
    if (!s_.units.empty()) {
      ThreadScope threads(o_.threads > 0 ? o_.threads : omp_get_num_procs());  // the SAE's encoder is the large product here
      for (const UnitSource::Group& g : units_.groups)
        s_.units.add(index, tokens, g.first_unit, units_.activations(*cache, g));
      s_.units.count_positions(static_cast<int64_t>(tokens.size()));
    }
    ++s_.prompts;
    if (dropped > 0) ++s_.truncated;
    if (control_.per_prompt) {
      json row = {{"index", index},
                  {"kind", "text"},
                  {"n_tokens", tokens.size()},
                  {"tokens", tokens},
                  {"truncated_tokens", dropped}};
      // The fields of the aggregates asked for (all by default), in this order.
      if (wants("loss_per_position"))
        row["mean_loss"] = loss.empty() ? json(nullptr) : json(loss_sum / static_cast<double>(loss.size()));
      if (wants("previous_token")) row["previous_token"] = grid_json(scores.previous_token.scores);
      if (wants("duplicate_token")) row["duplicate_token"] = grid_json(scores.duplicate_token.scores);
      if (wants("induction")) row["induction"] = grid_json(scores.induction.scores);
      if (wants("attention_entropy")) row["attention_entropy"] = grid_json(entropy);
      if (wants("dla_next_token")) row["dla_next_token"] = grid_json(dla);
      if (o_.repeat_random <= 0) row["line"] = index + 1;
      emit(row);
    }
  }

  bool patch_row(int64_t index, const ScanRow& row) {
    flush();  // the text rows before it come first, in the state and the per-prompt lines
    std::vector<int32_t> clean, corrupt;
    int32_t answer = 0, wrong = 0;
    try {
      clean = model_.encode(row.clean, o_.prepend_bos);
      corrupt = model_.encode(row.corrupt, o_.prepend_bos);
    } catch (const Error&) {
      return bad(kTokenizeFailed, index);
    }
    if (clean.size() != corrupt.size()) return bad(kPatchLengths, index);
    if (clean.empty()) return bad(kEmpty, index);
    if (static_cast<int>(clean.size()) > model_.config().n_ctx) return bad(kTooLong, index);
    try {
      answer = single_token(model_, row.answer, "the answer");
      wrong = single_token(model_, row.wrong, "the wrong answer");
    } catch (const Error&) {
      return bad(kAnswerTokens, index);
    }
    if (answer == wrong) return bad(kPatchNoEffect, index);
    RunOptions ro;
    ro.threads = o_.threads;
    const auto clean_run = model_.run(clean, ro);
    const auto corrupt_run = model_.run(corrupt, ro);
    SweepControl sc;
    sc.threads = o_.threads;
    // A sweep of a long prompt can outlast a scheduler's grace period after SIGTERM: it stops
    // too, the row is not counted, and a resume starts again from this row.
    if (control_.stop) sc.cancelled = control_.stop;
    PatchingResult resid, z;
    try {
      resid = patching_sweep(*clean_run, *corrupt_run, answer, wrong, HookPoint::ResidPre, sc);
      z = patching_sweep(*clean_run, *corrupt_run, answer, wrong, HookPoint::Z, sc);
    } catch (const Cancelled&) {
      throw;
    } catch (const Error&) {
      // The only failure left after the checks above: the metric is the same on both prompts,
      // so there is no effect to normalize by.
      return bad(kPatchNoEffect, index);
    }
    add_grid(s_.grids["patching_resid_pre"], resid.normalized);
    add_grid(s_.grids["patching_z"], z.normalized);
    ++s_.patch_rows;
    if (control_.per_prompt) {
      emit({{"index", index},
            {"line", index + 1},
            {"kind", "patch"},
            {"n_tokens", clean.size()},
            {"metric_clean", resid.metric_clean},
            {"metric_corrupt", resid.metric_corrupt},
            {"patching_resid_pre", grid_json(resid.normalized)},
            {"patching_z", grid_json(z.normalized)}});
    }
    return true;
  }

  void emit(const json& row) {
    const std::string text = row.dump() + "\n";
    control_.per_prompt(text);
    s_.per_prompt_bytes += static_cast<int64_t>(text.size());
  }

  const Model& model_;
  const ScanOptions& o_;
  ScanState& s_;
  const ScanControl& control_;
  UnitSource units_;  // with --units: the units described
  struct Pending {
    int64_t index;
    std::vector<int32_t> tokens;
    int dropped;
  };
  std::vector<Pending> pending_;  // text rows taken but not yet run (their indices are counted as handled)
  BatchScratch batch_scratch_;    // the batched pass's temporaries, kept from one pass to the next
  int64_t pending_tokens_ = 0;
};

}  // namespace

void run_scan(const Model& model, const ScanOptions& o, ScanState& s, const ScanControl& control) {
  Scanner scanner(model, o, s, control);
  const int64_t total = s.total_indices;
  ScanProgress progress;
  progress.total = total < 0 ? -1 : shard_size(total, s.shard_index, s.shard_count);
  progress.done = shard_size(std::min(s.next_index, total < 0 ? s.next_index : total), s.shard_index, s.shard_count);
  progress.prompts = s.prompts + s.patch_rows;
  int64_t handled = 0;
  // Whether to stop before the next prompt of this shard.
  auto should_stop = [&] {
    return (control.stop && control.stop()) || (control.stop_after >= 0 && handled >= control.stop_after);
  };
  auto after = [&](int64_t index) {
    s.next_index = index + 1;
    ++handled;
    ++progress.done;
    progress.prompts = s.prompts + s.patch_rows;
    if (control.progress) control.progress(progress);
  };
  s.complete = false;
  if (o.repeat_random > 0) {
    for (int64_t index = s.next_index; index < total; ++index) {
      if (index % s.shard_count != s.shard_index) continue;
      if (should_stop()) return scanner.flush();
      scanner.handle_tokens(index, repeat_random_prompt(model, o.seed, o.repeat_random, index));
      after(index);
    }
    scanner.flush();
    s.next_index = std::max(s.next_index, total);
    s.complete = true;
    return;
  }
  std::ifstream in(o.input, std::ios::binary);
  if (!in) throw Error("cannot read the input " + o.input.string() + ": it does not exist or is not readable.");
  scanner.jsonl_ = s.settings.at("input").at("format") == "jsonl";
  std::string line;
  for (int64_t index = 0; std::getline(in, line); ++index) {
    if (total >= 0 && index >= total) break;
    if (index < s.next_index || index % s.shard_count != s.shard_index) continue;
    if (should_stop()) return scanner.flush();
    try {
      scanner.handle_line(index, std::move(line));
    } catch (const Cancelled&) {
      return;  // a patch row's sweep was stopped: nothing of it was added (the rows before it were)
    }
    after(index);
  }
  if (in.bad()) throw Error("reading the input " + o.input.string() + " failed part way; check the disk and try again.");
  scanner.flush();
  s.next_index = std::max(s.next_index, total);
  s.complete = true;
}

// ---- output and merge -----------------------------------------------------------------------

json scan_to_json(const ScanState& s, const std::vector<std::string>& head_labels) {
  json j;
  j["format"] = "headscope-scan";
  j["version"] = kScanFormatVersion;
  j["complete"] = s.complete;
  j["settings"] = s.settings;
  j["shard"] = {{"index", s.shard_index}, {"count", s.shard_count}};
  if (!s.merged_shards.empty()) j["merged_shards"] = s.merged_shards;
  j["counts"] = {{"input_indices", s.total_indices},
                 {"next_index", s.next_index},
                 {"prompts", s.prompts},
                 {"patch_rows", s.patch_rows},
                 {"truncated", s.truncated},
                 {"bad_lines", [&] {
                    int64_t n = 0;
                    for (const auto& [reason, b] : s.bad) n += b.count;
                    return n;
                  }()}};
  json bad = json::object();
  for (const auto& [reason, b] : s.bad) bad[reason] = {{"count", b.count}, {"first_lines", b.first_lines}};
  j["bad_lines"] = bad;
  j["labels"] = head_labels;
  j["shape"] = {{"n_layers", s.n_layers}, {"n_heads", s.n_heads}, {"n_ctx", s.n_ctx}};
  json aggregates = json::object();
  json state = json::object();
  for (const auto& [name, g] : s.grids) {
    json mean = json::array(), sd = json::array(), count = json::array();
    for (int r = 0; r < g.rows(); ++r) {
      json mr = json::array(), sr = json::array(), cr = json::array();
      for (int c = 0; c < g.cols(); ++c) {
        const double m = g.mean(r, c), v = g.variance(r, c);
        mr.push_back(std::isfinite(m) ? json(m) : json(nullptr));
        sr.push_back(std::isfinite(v) ? json(std::sqrt(v)) : json(nullptr));
        cr.push_back(g.count(r, c));
      }
      // A grid of one column (the loss per position) is written as a plain list.
      if (g.cols() == 1) {
        mean.push_back(mr[0]);
        sd.push_back(sr[0]);
        count.push_back(cr[0]);
      } else {
        mean.push_back(std::move(mr));
        sd.push_back(std::move(sr));
        count.push_back(std::move(cr));
      }
    }
    aggregates[name] = {{"mean", mean}, {"std", sd}, {"count", count}};
    state[name] = g.state();
  }
  j["aggregates"] = aggregates;
  j["state"] = {{"per_prompt_bytes", s.per_prompt_bytes}, {"grids", state}};
  if (!s.heads.empty()) {
    j["heads"] = s.heads.summary(head_labels);
    j["state"]["heads"] = s.heads.state();
  }
  if (!s.units.empty()) j["state"]["units"] = s.units.state();
  return j;
}

ScanState scan_from_json(const json& j, const std::string& source) {
  try {
    if (!j.is_object() || j.value("format", "") != "headscope-scan")
      throw Error("it is not a scan output (no \"format\": \"headscope-scan\"); give a file written by "
                  "`headscope-cli scan -o OUT.json`.");
    if (!j.at("version").is_number_integer() || j.at("version") != kScanFormatVersion)
      throw Error("it is version " + j.at("version").dump() + " of the scan format; this headscope-cli reads version " +
                  std::to_string(kScanFormatVersion) + ". Run the scan again with this headscope-cli.");
    ScanState s;
    s.complete = j.at("complete").get<bool>();
    s.settings = j.at("settings");
    s.shard_index = int_field(j.at("shard").at("index"), "its shard index");
    s.shard_count = int_field(j.at("shard").at("count"), "its shard count");
    if (j.contains("merged_shards")) {
      const json& merged = j.at("merged_shards");
      if (!merged.is_array()) throw Error("its \"merged_shards\" is " + json_brief(merged) + ", not a list");
      for (const json& k : merged) s.merged_shards.push_back(int_field(k, "a merged shard", 0));
    }
    const json& c = j.at("counts");
    s.total_indices = integer(c.at("input_indices"), "its count of input indices", -1, kMaxCount);
    s.next_index = count_field(c.at("next_index"), "its next index");
    s.prompts = count_field(c.at("prompts"), "its count of prompts");
    s.patch_rows = count_field(c.at("patch_rows"), "its count of patch rows");
    s.truncated = count_field(c.at("truncated"), "its count of truncated prompts");
    for (auto it = j.at("bad_lines").begin(); it != j.at("bad_lines").end(); ++it) {
      const std::string what = "bad lines \"" + it.key() + "\"";
      BadLines b;
      b.count = count_field(it.value().at("count"), what + " count");
      const json& lines = it.value().at("first_lines");
      if (!lines.is_array()) throw Error(what + " first_lines is " + json_brief(lines) + ", not a list");
      for (const json& n : lines) b.first_lines.push_back(integer(n, what + " line", 1, kMaxCount));
      s.bad[it.key()] = std::move(b);
    }
    s.n_layers = int_field(j.at("shape").at("n_layers"), "its n_layers");
    s.n_heads = int_field(j.at("shape").at("n_heads"), "its n_heads");
    s.n_ctx = int_field(j.at("shape").at("n_ctx"), "its n_ctx");
    s.per_prompt_bytes = count_field(j.at("state").at("per_prompt_bytes"), "its per_prompt_bytes");
    const json& model = s.settings.at("model");
    if (model.at("n_layers") != s.n_layers || model.at("n_heads") != s.n_heads || model.at("n_ctx") != s.n_ctx ||
        s.n_layers < 0 || s.n_heads < 0 || s.n_ctx < 1)
      throw Error("its \"shape\" does not match the model of its settings");
    if (s.shard_count < 1 || s.shard_index < 0 || s.shard_index >= s.shard_count)
      throw Error("its shard " + std::to_string(s.shard_index) + "/" + std::to_string(s.shard_count) + " does not exist");
    // The shapes new_scan_state gives, so that a resumed scan indexes only cells that exist.
    for (const std::string& name : scan_aggregate_names()) {
      if (!j.at("state").at("grids").contains(name)) throw Error("the accumulator \"" + name + "\" is missing");
      MomentGrid g = MomentGrid::from_state(j.at("state").at("grids").at(name), name);
      if (std::make_pair(g.rows(), g.cols()) != grid_shape(name, s.n_layers, s.n_heads, s.n_ctx))
        throw Error("the accumulator \"" + name + "\" has the wrong shape for the model");
      s.grids[name] = std::move(g);
    }
    // With --heads the settings say so and the state must hold them; without, it must not.
    const bool heads = s.settings.contains("heads");
    if (heads != j.at("state").contains("heads"))
      throw Error(heads ? "its settings ask for head statistics but its state has none"
                        : "its state has head statistics its settings do not ask for");
    if (heads) {
      const json& hs = s.settings.at("heads");
      s.heads = HeadDatasetStats::from_state(j.at("state").at("heads"), s.n_layers, s.n_heads, s.n_ctx);
      if (!hs.is_object() || hs.value("samples", -1) != s.heads.sample_capacity() || hs.value("window", -1) != s.heads.window())
        throw Error("its head statistics were not made with the sampling its settings name");
    }
    const bool units = s.settings.contains("units");
    if (units != j.at("state").contains("units"))
      throw Error(units ? "its settings ask for unit statistics but its state has none"
                        : "its state has unit statistics its settings do not ask for");
    if (units) {
      const json& us = s.settings.at("units");
      s.units = UnitDatasetStats::from_state(j.at("state").at("units"), us.at("units").get<int64_t>());
      if (us.value("samples", -1) != s.units.sample_capacity() || us.value("window", -1) != s.units.window())
        throw Error("its unit statistics were not made with the sampling its settings name");
    }
    return s;
  } catch (const json::exception& e) {
    throw Error(source + ": not a readable scan output: " + json_error_reason(e) +
                ". Give a file written by `headscope-cli scan`, unedited.");
  } catch (const Error& e) {
    throw Error(source + ": " + e.what());
  }
}

ScanState merge_scans(const std::vector<ScanState>& shards, const std::vector<std::string>& sources) {
  if (shards.empty()) throw Error("merge needs at least one shard output.");
  const int n = shards[0].shard_count;
  // Shard k -> its position in `shards`; a map, as n comes from a file (a vector of n could be huge).
  std::map<int, size_t> seen;
  for (size_t i = 0; i < shards.size(); ++i) {
    const ScanState& s = shards[i];
    if (!s.merged_shards.empty()) throw Error(sources[i] + " is already a merge of shards; merge the shard outputs themselves.");
    require_same_settings(shards[0].settings, s.settings, sources[i]);
    if (s.shard_count != n)
      throw Error(sources[i] + " is shard " + std::to_string(s.shard_index) + "/" + std::to_string(s.shard_count) + " but " +
                  sources[0] + " is one of " + std::to_string(n) + " shards; merge the outputs of one --shard I/N run.");
    if (!s.complete)
      throw Error(sources[i] + " (shard " + std::to_string(s.shard_index) + "/" + std::to_string(n) +
                  ") is incomplete: it was stopped before the end. Finish it with `headscope-cli scan ... --shard " +
                  std::to_string(s.shard_index) + "/" + std::to_string(n) + " --resume -o " + sources[i] + "` first.");
    if (const auto [it, added] = seen.emplace(s.shard_index, i); !added)
      throw Error(sources[i] + " and " + sources[it->second] + " are both shard " + std::to_string(s.shard_index) +
                  "/" + std::to_string(n) + "; give each shard once.");
  }
  if (seen.size() < static_cast<size_t>(n)) {
    // The first few missing shards by name; at most seen.size() + kListed steps, whatever n is.
    constexpr int kListed = 10;
    std::string missing;
    int listed = 0;
    for (int k = 0; k < n && listed < kListed; ++k)
      if (!seen.contains(k)) missing += (listed++ ? ", " : "") + std::to_string(k) + "/" + std::to_string(n);
    const int64_t more = static_cast<int64_t>(n) - static_cast<int64_t>(seen.size()) - listed;
    if (more > 0) missing += " and " + std::to_string(more) + " more";
    throw Error("shard " + missing + " is missing; merge needs every shard of the run.");
  }

  ScanState out = shards[seen.at(0)];
  out.shard_index = 0;
  out.shard_count = 1;
  out.per_prompt_bytes = 0;
  for (int k = 1; k < n; ++k) {
    const ScanState& s = shards[seen.at(k)];
    out.prompts = add_counts(out.prompts, s.prompts, "prompts");
    out.patch_rows = add_counts(out.patch_rows, s.patch_rows, "patch rows");
    out.truncated = add_counts(out.truncated, s.truncated, "truncated prompts");
    out.next_index = std::max(out.next_index, s.next_index);
    for (const auto& [reason, b] : s.bad) {
      BadLines& into = out.bad[reason];
      into.count = add_counts(into.count, b.count, "bad lines");
      into.first_lines.insert(into.first_lines.end(), b.first_lines.begin(), b.first_lines.end());
      std::sort(into.first_lines.begin(), into.first_lines.end());
      if (into.first_lines.size() > BadLines::kMaxListed) into.first_lines.resize(BadLines::kMaxListed);
    }
    for (auto& [name, g] : out.grids) g.merge(s.grids.at(name));
    if (!out.heads.empty()) out.heads.merge(s.heads);
    if (!out.units.empty()) out.units.merge(s.units);
  }
  for (int k = 0; k < n; ++k) out.merged_shards.push_back(k);
  return out;
}

}  // namespace hs
