#include "app/cli/common.h"

#include "app/cli/commands.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <climits>
#include <iostream>

#include "core/analysis/patching.h"
#include "core/io/npz_reader.h"

namespace hs::cli {

OptionSpec model_option() {
  return {.name = "--model", .metavar = "DIR", .help = "the model's folder; without it, the built-in model"};
}

OptionSpec text_option(const std::string& help) { return {.name = "--text", .metavar = "TEXT", .help = help}; }

OptionSpec tokens_option() {
  return {.name = "--tokens", .metavar = "1,2,3", .help = "token ids, separated by commas, used exactly as given"};
}

OptionSpec no_bos_option() {
  return {.name = "--no-bos", .kind = ValueKind::Flag, .help = "do not prepend BOS to --text"};
}

OptionSpec threads_option(const std::string& help) {
  return {.name = "--threads", .metavar = "N", .kind = ValueKind::Integer, .help = help, .default_value = "0",
          .min = 1, .max = 1024};
}

OptionSpec seed_option(const std::string& help) {
  return {.name = "--seed", .metavar = "S", .kind = ValueKind::Integer, .help = help, .default_value = "0",
          .min = 0, .max = 1 << 30};
}

OptionSpec required(OptionSpec o, const std::string& missing) {
  o.required = true;
  o.missing = missing;
  return o;
}

OptionSpec output_option(const std::string& kinds, const std::string& missing) {
  return {.name = "-o", .metavar = "OUT", .help = "the file to write, ending in " + kinds, .required = true, .missing = missing,
          .alias = "--output"};
}

std::vector<OptionSpec> concat(std::initializer_list<std::vector<OptionSpec>> lists) {
  std::vector<OptionSpec> out;
  for (const std::vector<OptionSpec>& l : lists) out.insert(out.end(), l.begin(), l.end());
  return out;
}

std::vector<OptionSpec> metric_options(const std::string& command, bool dot) {
  const std::string kinds = dot ? "logit_diff|logit|logprob|loss|dot" : "logit_diff|logit|logprob|loss";
  std::vector<OptionSpec> out = {
      required({.name = "--metric", .metavar = "KIND", .help = dot ? "logit_diff, logit, logprob, loss or dot"
                                                                   : "logit_diff, logit, logprob or loss"},
               command + " needs --metric " + kinds + "."),
      {.name = "--answer", .metavar = "TEXT", .help = "the answer (logit_diff) or the token (logit, logprob): one token"},
      {.name = "--wrong", .metavar = "TEXT", .help = "the token subtracted (logit_diff): one token"},
      {.name = "--answer-id", .metavar = "N", .kind = ValueKind::Integer, .help = "the answer as a token id", .min = 0,
       .max = INT32_MAX},
      {.name = "--wrong-id", .metavar = "N", .kind = ValueKind::Integer, .help = "the wrong answer as a token id",
       .min = 0, .max = INT32_MAX},
      {.name = "--pos", .metavar = "P", .kind = ValueKind::Integer, .help = "the position the metric reads (default: the last)",
       .min = 0, .max = INT32_MAX},
  };
  if (dot) {
    out.push_back({.name = "--hook", .metavar = "KEY", .help = "dot: the activation, a full key such as blocks.0.attn.hook_z"});
    out.push_back({.name = "--vector", .metavar = "V.npy", .help = "dot: the float32 vector (numpy.save)"});
    out.push_back({.name = "--unit", .metavar = "U", .kind = ValueKind::Integer,
                   .help = "dot: one head, key/value head or neuron of the row", .min = 0, .max = INT32_MAX});
  }
  return out;
}

namespace {

bool declares(const Args& a, const std::string& name) {
  for (const OptionSpec& o : a.command().options)
    if (o.name == name) return true;
  return false;
}

// A token given as --NAME TEXT (one token, the patch command's rule) or --NAME-id N; nullopt when
// neither is given.
std::optional<int32_t> token_option(const Args& a, const hs::Model& m, const std::string& name, const std::string& role) {
  const bool text = a.has(name), id = a.has(name + "-id");
  if (text && id) throw UsageError("give " + name + " TEXT or " + name + "-id N, not both.");
  if (text) return hs::single_token(m, a.text(name), role);
  if (id) return static_cast<int32_t>(a.integer(name + "-id"));
  return std::nullopt;
}

}  // namespace

hs::Metric metric_from(const Args& a, const hs::Model& m) {
  const bool dot_options = declares(a, "--hook");
  const std::string name = a.text("--metric");
  const std::optional<hs::MetricKind> parsed = hs::parse_metric_kind(name);
  if (!parsed || (*parsed == hs::MetricKind::Dot && !dot_options))
    throw UsageError("--metric " + name + ": choose one of " +
                     (dot_options ? hs::metric_kind_names() : std::string("logit_diff|logit|logprob|loss")) + ".");
  const hs::MetricKind kind = *parsed;
  const bool wants_answer = kind == hs::MetricKind::LogitDiff || kind == hs::MetricKind::Logit ||
                            kind == hs::MetricKind::LogProb;
  if (!wants_answer && (a.has("--answer") || a.has("--answer-id")))
    throw UsageError("--metric " + name + " takes no answer; --answer is for logit_diff, logit and logprob.");
  if (kind != hs::MetricKind::LogitDiff && (a.has("--wrong") || a.has("--wrong-id")))
    throw UsageError("--wrong is for --metric logit_diff only.");
  if (dot_options && kind != hs::MetricKind::Dot && (a.has("--hook") || a.has("--vector") || a.has("--unit")))
    throw UsageError("--hook, --vector and --unit are for --metric dot only.");
  if (kind == hs::MetricKind::Loss && a.has("--pos"))
    throw UsageError("--metric loss covers every position (each predicting the next); --pos is for the other metrics.");
  const int pos = a.has("--pos") ? static_cast<int>(a.integer("--pos")) : -1;
  switch (kind) {
    case hs::MetricKind::LogitDiff: {
      const auto answer = token_option(a, m, "--answer", "the answer");
      const auto wrong = token_option(a, m, "--wrong", "the wrong answer");
      if (!answer || !wrong)
        throw UsageError("--metric logit_diff needs --answer TEXT and --wrong TEXT (or --answer-id N and --wrong-id N).");
      return hs::logit_diff_metric(*answer, *wrong, pos);
    }
    case hs::MetricKind::Logit:
    case hs::MetricKind::LogProb: {
      const auto token = token_option(a, m, "--answer", "the token");
      if (!token) throw UsageError("--metric " + name + " needs the token: --answer TEXT or --answer-id N.");
      return kind == hs::MetricKind::Logit ? hs::logit_metric(*token, pos) : hs::logprob_metric(*token, pos);
    }
    case hs::MetricKind::Loss:
      return hs::loss_metric();
    case hs::MetricKind::Dot: {
      if (!a.has("--hook") || !a.has("--vector"))
        throw UsageError("--metric dot needs --hook KEY (blocks.3.hook_resid_post, ...) and --vector FILE.npy.");
      const std::string key = a.text("--hook");
      const std::optional<hs::HookKey> k = hs::parse_hook_key(m.config(), key);
      if (!k || !hs::hook_exists(m.config(), k->hook))
        throw UsageError("--hook " + key + ": not a key of this model; give a full key such as blocks.0.attn.hook_z "
                         "(`headscope-cli hooks --model DIR` lists them).");
      const hs::Tensor v = hs::read_npy_file(a.text("--vector"));
      return hs::dot_metric(k->hook, k->layer, v.data, pos, a.has("--unit") ? static_cast<int>(a.integer("--unit")) : -1);
    }
  }
  return hs::loss_metric();  // every kind returned above
}

std::shared_ptr<const hs::Model> load_model(const Args& a) {
  const auto dir = a.optional_text("--model");
  auto m = hs::Model::load(dir ? std::filesystem::path(*dir) : hs::builtin_model_dir());
  for (const auto& w : m->warnings()) std::cerr << "headscope-cli: warning: " << w << "\n";
  return m;
}

int threads(const Args& a) {
  for (const OptionSpec& o : a.command().options)
    if (o.name == "--threads") return static_cast<int>(a.integer("--threads"));
  return 0;
}

std::vector<int32_t> parse_tokens(const std::string& s) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i <= s.size()) {
    size_t j = s.find(',', i);
    if (j == std::string::npos) j = s.size();
    std::string item = s.substr(i, j - i);
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    while (!item.empty() && item.back() == ' ') item.pop_back();
    long long v = 0;
    const auto [p, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (item.empty() || ec != std::errc() || p != item.data() + item.size() || v < 0 || v > INT32_MAX)
      throw UsageError("--tokens expects comma-separated non-negative integer ids like 50256,464,3797; \"" + item +
                       "\" is not one.");
    ids.push_back(static_cast<int32_t>(v));
    i = j + 1;
  }
  return ids;
}

void print_run_warnings(const hs::TextRun& r, const hs::Model& m) {
  // The model's own warnings were printed when it loaded; these are the run's.
  for (const auto& w : r.warnings)
    if (std::find(m.warnings().begin(), m.warnings().end(), w) == m.warnings().end())
      std::cerr << "headscope-cli: warning: " << w << "\n";
}

hs::TextRun run_input(const Args& a, const std::shared_ptr<const hs::Model>& m, const hs::Interventions& interventions,
                      bool for_gradient) {
  hs::TextRun r;
  if (a.has("--text")) {
    hs::TextRunOptions o;
    o.prepend_bos = !a.flag("--no-bos");
    o.run.threads = threads(a);
    o.run.interventions = interventions;
    o.run.store_mlp_pre = for_gradient;
    r = hs::run_text(m, a.text("--text"), o);
  } else {
    hs::RunOptions o;
    o.threads = threads(a);
    o.interventions = interventions;
    o.store_mlp_pre = for_gradient;
    r = hs::run_tokens(m, parse_tokens(a.text("--tokens")), o);
  }
  print_run_warnings(r, *m);
  return r;
}

std::string output_extension(const std::string& out, const std::vector<std::string>& allowed) {
  const std::string ext = std::filesystem::path(out).extension().string();
  if (std::find(allowed.begin(), allowed.end(), ext) == allowed.end())
    throw UsageError("-o " + out + ": the output must end in " +
                     (allowed.size() == 1 ? allowed[0] : allowed[0] + " or " + allowed[1]) + ".");
  return ext;
}

nlohmann::json matrix_json(const hs::RowMatrixXf& x, Eigen::Index inner) {
  auto row = [&](Eigen::Index r) {
    nlohmann::json out = nlohmann::json::array();
    for (Eigen::Index c = 0; c < x.cols(); ++c) out.push_back(x(r, c));
    return out;
  };
  nlohmann::json out = nlohmann::json::array();
  if (inner <= 0) {
    for (Eigen::Index r = 0; r < x.rows(); ++r) out.push_back(row(r));
    return out;
  }
  for (Eigen::Index r0 = 0; r0 < x.rows(); r0 += inner) {
    nlohmann::json block = nlohmann::json::array();
    for (Eigen::Index r = r0; r < r0 + inner; ++r) block.push_back(row(r));
    out.push_back(std::move(block));
  }
  return out;
}

void write_json_float(std::ostream& out, float v) {
  if (!std::isfinite(v)) {
    out << "null";
    return;
  }
  char buf[32];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  out.write(buf, end - buf);
}

}  // namespace hs::cli
