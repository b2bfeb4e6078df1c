// headscope-cli: the engine without a window. See DESIGN.md, "Command line (contract)".
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/analysis/circuits.h"
#include "core/analysis/head_detectors.h"
#include "core/analysis/head_scores.h"
#include "core/analysis/logit_lens.h"
#include "core/analysis/patching.h"
#include "core/error.h"
#include "core/io/export.h"
#include "core/model/architecture_text.h"
#include "core/session/session.h"

namespace {

using nlohmann::json;

int g_threads = 0;  // --threads; 0 lets the engine choose

struct UsageError : hs::Error {
  using hs::Error::Error;
};

const char* kMainHelp = R"(headscope-cli - look inside transformers (GPT-2, Llama, Qwen2, Pythia) from the command line

Usage:
  headscope-cli info     [--model DIR]
  headscope-cli tokenize [--model DIR] --text TEXT
  headscope-cli run      [--model DIR] (--text TEXT | --tokens 1,2,3) [--no-bos] [--ablate 3.2,1.0:mean]
                         -o OUT.json|OUT.npz
  headscope-cli patch    [--model DIR] --clean TEXT --corrupt TEXT --answer TEXT --wrong TEXT
                         --what resid_pre|attn_out|mlp_out|z -o OUT.json
  headscope-cli heads    [--model DIR] [--text TEXT [--no-bos]]
  headscope-cli generate [--model DIR] --text TEXT -n N [--temperature T] [--seed S]
  headscope-cli lens     [--model DIR] (--text TEXT | --tokens 1,2,3) [--no-bos] -o OUT.npz|OUT.json
  headscope-cli circuits [--model DIR] --head L.H [--text TEXT | --tokens 1,2,3] -o OUT.json
  headscope-cli --version | --help

Without --model, the built-in model is used. Run `headscope-cli COMMAND --help` for details.
)";

const std::map<std::string, std::string> kCommandHelp = {
    {"info", R"(Usage: headscope-cli info [--model DIR]

Prints the model's architecture and sizes as JSON: n_layer, n_head, n_key_value_heads, d_model,
d_head, d_mlp, n_ctx, d_vocab, the activation function, the parameter count, any load warnings,
and "architecture": the family and its options (norm, positions, MLP, QKV layout, biases,
parallel blocks, tied unembedding).
)"},
    {"tokenize", R"(Usage: headscope-cli tokenize [--model DIR] --text TEXT

Prints {"ids": [...], "tokens": [...], "labels": [...]} as JSON. "tokens" holds each token's text
(or its display label when the token is only part of a UTF-8 character); "labels" shows spaces
as '␣' and newlines as '↵'. Never adds BOS.
)"},
    {"run", R"(Usage: headscope-cli run [--model DIR] (--text TEXT | --tokens 1,2,3) [--no-bos] [--ablate HEADS] -o OUT

Runs the model and writes every activation of the cache (TransformerLens names, no batch
dimension) plus "tokens" to OUT. OUT ending in .json: one object of nested arrays, masked
attention scores as null. OUT ending in .npz: float32 arrays for numpy.load. --text prepends BOS
unless --no-bos; --tokens is used exactly as given. A text longer than the model's context is
refused. The file is written atomically: on any error, no file is left.
  --ablate HEADS  run with these heads ablated and write that run (the same keys): LAYER.HEAD
                  items separated by commas, each :zero (the default: hook_z set to 0) or :mean
                  (hook_z set to its mean over the prompt's positions), e.g. 3.2,1.0:mean
  --threads N     threads for the forward pass (default: all cores)
)"},
    {"patch", R"(Usage: headscope-cli patch [--model DIR] --clean TEXT --corrupt TEXT --answer TEXT --wrong TEXT
                           --what resid_pre|attn_out|mlp_out|z [--no-bos] -o OUT.json

Activation patching: runs both prompts, then, for every layer and position (every layer and head
for z), the corrupted prompt with that one activation copied from the clean run: the residual
stream entering the layer (resid_pre), the attention or MLP block's output (attn_out, mlp_out)
at one position, or one head's z at every position. Each patched run is scored by
m = logit(answer) - logit(wrong) at the last position. Writes one JSON object: "metric_clean",
"metric_corrupt", "raw" ([n_layers][pos], or [n_layers][n_heads] for z: m of each patched run)
and "normalized" ((m - metric_corrupt) / (metric_clean - metric_corrupt): 1 where the patch
restores the clean answer, 0 where it changes nothing), plus "what", "clean_tokens",
"corrupt_tokens", "answer_id", "wrong_id" and "labels" (the clean prompt's tokens).
The prompts must have the same number of tokens (BOS is prepended to both unless --no-bos);
--answer and --wrong must each be exactly one token (often with a leading space: " Paris").
  --threads N   threads (default: all cores)
)"},
    {"heads", R"(Usage: headscope-cli heads [--model DIR] [--seed S]
       headscope-cli heads [--model DIR] --text TEXT [--no-bos]

Prints, for every head, the previous-token score, the duplicate-token score and the induction
score as JSON (TransformerLens definitions; see docs/head-scores.md for the exact sequences).

With --text, scores that prompt instead (BOS prepended unless --no-bos): each score is averaged
over the query positions where it applies ("query_positions" says how many), and is null when
there is none (duplicate-token and induction need a token that occurs twice).
)"},
    {"generate", R"(Usage: headscope-cli generate [--model DIR] --text TEXT -n N [--temperature T] [--seed S]

Continues TEXT by N tokens: greedy by default, sampled at temperature T > 0 with a fixed seed.
Prints the continuation on stdout.
)"},
    {"lens", R"(Usage: headscope-cli lens [--model DIR] (--text TEXT | --tokens 1,2,3) [--no-bos] -o OUT

The logit lens: each layer's resid_pre and the final resid_post through the final norm (its own
statistics per vector, its weight and bias), the unembedding and a log-softmax. Writes
"lens.logprobs", float32 [n_layers + 1, pos, d_vocab]: index i < n_layers is layer i's
resid_pre, index n_layers the final resid_post (the run's log-softmaxed logits), and "tokens".
OUT ending in .npz: arrays for numpy.load; .json: one object of nested arrays, with "streams"
naming each index. --text prepends BOS unless --no-bos. Written atomically.
  --threads N   threads (default: all cores)
)"},
    {"circuits", R"(Usage: headscope-cli circuits [--model DIR] --head L.H [--text TEXT | --tokens 1,2,3] [--top-k K] -o OUT.json

Head L.H's QK and OV circuits (W_QK = W_Q W_K^T, W_OV = W_V W_O, factored at rank d_head;
docs/circuits.md). Folded: the layer's first norm weight into W_Q, W_K, W_V; the final norm's
weight into W_U. Ignored: every bias, the norms' centring and scaling, positions. Writes JSON:
"qk_singular_values", "ov_singular_values" (d_head each, descending), "ov_eigenvalues_real",
"ov_eigenvalues_imag" (the full OV circuit W_E W_OV W_U's d_head nonzero eigenvalues, by
descending real part) and "copying_score" (sum(lambda) / sum(|lambda|)). With --text or
--tokens also "tokens", "qk_scores" ([query token][key token] of E W_QK E^T) and, for each
token, the --top-k (default 10) tokens its OV circuit promotes ("ov_top_ids", "ov_top_logits")
and its own entry ("ov_self_logits", "ov_self_ranks").
)"},
};

struct Args {
  std::string command;
  std::optional<std::string> model, text, tokens, out, head;
  std::optional<std::string> ablate, clean, corrupt, answer, wrong, what;
  int top_k = 10;
  bool no_bos = false;
  int n = -1;
  int threads = 0;
  double temperature = 0.0;
  uint64_t seed = 0;
  bool seed_given = false;
  bool help = false;
};

int parse_int(const std::string& flag, const std::string& v, int lo, int hi) {
  int x = 0;
  const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (ec != std::errc() || p != v.data() + v.size() || x < lo || x > hi)
    throw UsageError(flag + " expects an integer from " + std::to_string(lo) + " to " + std::to_string(hi) +
                     ", got \"" + v + "\".");
  return x;
}

Args parse_args(int argc, char** argv) {
  Args a;
  if (argc < 2) throw UsageError("no command given; try `headscope-cli --help`.");
  a.command = argv[1];
  auto value = [&](int& i, const std::string& flag) -> std::string {
    if (i + 1 >= argc) throw UsageError(flag + " needs a value; see `headscope-cli " + a.command + " --help`.");
    return argv[++i];
  };
  for (int i = 2; i < argc; ++i) {
    const std::string f = argv[i];
    if (f == "--help" || f == "-h") a.help = true;
    else if (f == "--model") a.model = value(i, f);
    else if (f == "--text") a.text = value(i, f);
    else if (f == "--tokens") a.tokens = value(i, f);
    else if (f == "-o" || f == "--output") a.out = value(i, f);
    else if (f == "--head") a.head = value(i, f);
    else if (f == "--top-k") a.top_k = parse_int(f, value(i, f), 1, 1000);
    else if (f == "--no-bos") a.no_bos = true;
    else if (f == "--ablate" && a.command == "run") a.ablate = value(i, f);
    else if (f == "--clean" && a.command == "patch") a.clean = value(i, f);
    else if (f == "--corrupt" && a.command == "patch") a.corrupt = value(i, f);
    else if (f == "--answer" && a.command == "patch") a.answer = value(i, f);
    else if (f == "--wrong" && a.command == "patch") a.wrong = value(i, f);
    else if (f == "--what" && a.command == "patch") a.what = value(i, f);
    else if (f == "-n") a.n = parse_int(f, value(i, f), 0, 1 << 20);
    else if (f == "--threads") a.threads = parse_int(f, value(i, f), 1, 1024);
    else if (f == "--seed") {
      a.seed = static_cast<uint64_t>(parse_int(f, value(i, f), 0, 1 << 30));
      a.seed_given = true;
    }
    else if (f == "--temperature") {
      const std::string v = value(i, f);
      char* end = nullptr;
      a.temperature = std::strtod(v.c_str(), &end);
      if (end != v.c_str() + v.size() || !(a.temperature >= 0.0) || !std::isfinite(a.temperature))
        throw UsageError("--temperature expects a number >= 0, got \"" + v + "\".");
    } else {
      throw UsageError("unknown option \"" + f + "\" for `" + a.command + "`; see `headscope-cli " + a.command +
                       " --help`.");
    }
  }
  return a;
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

// Loads the model and says on stderr what is wrong with it (non-finite weights, a vocabulary
// larger than the model's): every command that shows numbers must not show them silently.
std::shared_ptr<const hs::Model> load_model(const Args& a) {
  auto m = hs::Model::load(a.model ? std::filesystem::path(*a.model) : hs::builtin_model_dir());
  for (const auto& w : m->warnings()) std::cerr << "headscope-cli: warning: " << w << "\n";
  return m;
}

bool valid_utf8(const std::string& s) {
  try {
    (void)json(s).dump();
    return true;
  } catch (const json::exception&) {
    return false;
  }
}

int cmd_info(const Args& a) {
  const auto m = load_model(a);
  const hs::ModelConfig& c = m->config();
  json j = {{"name", m->name()},
            {"path", std::filesystem::absolute(m->dir()).lexically_normal().string()},
            {"model_type", c.model_type},
            {"n_layer", c.n_layers},
            {"n_head", c.n_heads},
            {"d_model", c.d_model},
            {"d_head", c.d_head},
            {"d_mlp", c.d_mlp},
            {"n_ctx", c.n_ctx},
            {"d_vocab", c.d_vocab},
            {"tokenizer", m->tokenizer().kind()},
            {"tokenizer_vocab_size", m->tokenizer().vocab_size()},
            {"activation_function", c.activation_name},
            {"layer_norm_epsilon", c.norm_eps},
            {"scale_attn_by_inverse_layer_idx", c.scale_attn_by_inverse_layer_idx},
            {"tied_unembedding", m->weights()->tied_unembedding()},
            {"parameters", c.parameter_count()},
            {"warnings", m->warnings()}};
  const hs::Architecture& arch = c.architecture;
  j["n_key_value_heads"] = c.n_key_value_heads;
  j["architecture"] = {{"family", arch.family ? std::string(arch.family->name()) : std::string()},
                       {"norm", hs::to_string(arch.norm)},
                       {"norm_bias", arch.norm_bias},
                       {"positions", hs::to_string(arch.positions)},
                       {"mlp", hs::to_string(arch.mlp)},
                       {"qkv", hs::to_string(arch.qkv)},
                       {"qkv_bias", arch.qkv_bias},
                       {"attn_out_bias", arch.attn_out_bias},
                       {"mlp_bias", arch.mlp_bias},
                       {"parallel_blocks", arch.parallel_blocks},
                       {"tied_unembedding", m->weights()->tied_unembedding()}};
  j["architecture"]["summary"] = hs::describe_architecture(c, m->weights()->tied_unembedding());
  if (arch.positions == hs::PositionKind::Rotary) {
    const hs::RotaryParams& r = arch.rotary;
    j["architecture"]["rotary"] = {{"dim", r.dim}, {"base", r.base}, {"scaling", hs::to_string(r.scaling)}};
    if (r.scaling != hs::RopeScaling::None) j["architecture"]["rotary"]["factor"] = r.factor;
    if (r.scaling == hs::RopeScaling::Llama3) {
      j["architecture"]["rotary"]["low_freq_factor"] = r.low_freq_factor;
      j["architecture"]["rotary"]["high_freq_factor"] = r.high_freq_factor;
      j["architecture"]["rotary"]["original_max_position_embeddings"] = r.original_context;
    }
  }
  if (c.bos_token_id) j["bos_token_id"] = *c.bos_token_id;
  if (c.eos_token_id) j["eos_token_id"] = *c.eos_token_id;
  std::cout << j.dump(2) << "\n";
  return 0;
}

int cmd_tokenize(const Args& a) {
  if (!a.text) throw UsageError("tokenize needs --text TEXT.");
  const auto m = load_model(a);
  const std::vector<int32_t> ids = m->tokenizer().encode(*a.text);
  json tokens = json::array(), labels = json::array();
  for (int32_t id : ids) {
    const std::string label = m->tokenizer().display(id);
    const std::string bytes = m->tokenizer().token_bytes(id);
    tokens.push_back(valid_utf8(bytes) ? bytes : label);
    labels.push_back(label);
  }
  std::cout << json{{"ids", ids}, {"tokens", tokens}, {"labels", labels}}.dump() << "\n";
  return 0;
}

int cmd_run(const Args& a) {
  if (a.text.has_value() == a.tokens.has_value()) throw UsageError("run needs exactly one of --text TEXT or --tokens 1,2,3.");
  if (!a.out) throw UsageError("run needs -o OUT.json or -o OUT.npz.");
  const std::string ext = std::filesystem::path(*a.out).extension().string();
  if (ext != ".json" && ext != ".npz")
    throw UsageError("-o " + *a.out + ": the output must end in .json or .npz.");
  hs::Interventions ablations;
  if (a.ablate) {
    try {
      ablations = hs::parse_head_ablations(*a.ablate);
    } catch (const hs::Error& e) {
      throw UsageError(e.what());
    }
  }
  const auto m = load_model(a);
  hs::TextRun r;
  if (a.text) {
    hs::TextRunOptions o;
    o.prepend_bos = !a.no_bos;
    o.run.threads = g_threads;
    o.run.interventions = ablations;
    r = hs::run_text(m, *a.text, o);
  } else {
    hs::RunOptions o;
    o.threads = g_threads;
    o.interventions = ablations;
    r = hs::run_tokens(m, parse_tokens(*a.tokens), o);
  }
  // The model's own warnings were printed when it loaded; these are the run's.
  for (const auto& w : r.warnings)
    if (std::find(m->warnings().begin(), m->warnings().end(), w) == m->warnings().end())
      std::cerr << "headscope-cli: warning: " << w << "\n";
  hs::export_cache(*r.cache, *a.out);
  return 0;
}

// Runs --text (BOS unless --no-bos) or --tokens (exactly as given) and prints the run's warnings
// (as cmd_run does).
hs::TextRun run_input(const Args& a, const std::shared_ptr<const hs::Model>& m) {
  hs::TextRun r;
  if (a.text) {
    hs::TextRunOptions o;
    o.prepend_bos = !a.no_bos;
    o.run.threads = g_threads;
    r = hs::run_text(m, *a.text, o);
  } else {
    hs::RunOptions o;
    o.threads = g_threads;
    r = hs::run_tokens(m, parse_tokens(*a.tokens), o);
  }
  // The model's own warnings were printed when it loaded; these are the run's.
  for (const auto& w : r.warnings)
    if (std::find(m->warnings().begin(), m->warnings().end(), w) == m->warnings().end())
      std::cerr << "headscope-cli: warning: " << w << "\n";
  return r;
}

// The output path's extension, refused unless it is one of `allowed` (".json", ".npz").
std::string output_extension(const Args& a, const std::vector<std::string>& allowed) {
  const std::string ext = std::filesystem::path(*a.out).extension().string();
  if (std::find(allowed.begin(), allowed.end(), ext) == allowed.end())
    throw UsageError("-o " + *a.out + ": the output must end in " +
                     (allowed.size() == 1 ? allowed[0] : allowed[0] + " or " + allowed[1]) + ".");
  return ext;
}

// A float for JSON: the shortest text that reads back as the same float; null when not finite.
void write_json_float(std::ostream& out, float v) {
  if (!std::isfinite(v)) {
    out << "null";
    return;
  }
  char buf[32];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  out.write(buf, end - buf);
}

int cmd_lens(const Args& a) {
  if (a.text.has_value() == a.tokens.has_value()) throw UsageError("lens needs exactly one of --text TEXT or --tokens 1,2,3.");
  if (!a.out) throw UsageError("lens needs -o OUT.npz or -o OUT.json.");
  const std::string ext = output_extension(a, {".npz", ".json"});
  const auto m = load_model(a);
  const hs::TextRun r = run_input(a, m);
  const hs::LogitLens lens = hs::logit_lens(*r.cache);
  const std::vector<float> tokens(r.tokens.begin(), r.tokens.end());
  hs::write_atomically(*a.out, [&](std::ostream& out) {
    if (ext == ".npz") {
      hs::write_npz(out, {{"lens.logprobs", {lens.n_streams, lens.n_pos, lens.d_vocab}, lens.logprobs.data()},
                          {"tokens", {static_cast<int64_t>(tokens.size())}, tokens.data()}});
      return;
    }
    json streams = json::array();
    for (int i = 0; i < lens.n_streams; ++i) streams.push_back(hs::lens_stream_name(m->config(), i));
    out << "{\"tokens\":" << json(r.tokens).dump() << ",\n\"streams\":" << streams.dump() << ",\n\"lens.logprobs\":[";
    for (int i = 0; i < lens.n_streams; ++i) {
      out << (i ? ",\n[" : "[");
      const hs::ConstMatrixRef block = lens.stream(i);
      for (int p = 0; p < lens.n_pos; ++p) {
        out << (p ? ",[" : "[");
        for (int v = 0; v < lens.d_vocab; ++v) {
          if (v) out << ',';
          write_json_float(out, block(p, v));
        }
        out << ']';
      }
      out << ']';
    }
    out << "]}\n";
  });
  return 0;
}

// "3.2" (or "L3H2") -> layer 3, head 2, checked against the model.
std::pair<int, int> parse_head(const std::string& text, const hs::ModelConfig& c) {
  const std::string usage = "--head expects LAYER.HEAD like 0.3 (layers 0.." + std::to_string(c.n_layers - 1) +
                            ", heads 0.." + std::to_string(c.n_heads - 1) + "), got \"" + text + "\".";
  std::string s = text;
  if (s.size() > 1 && (s[0] == 'L' || s[0] == 'l')) {
    const size_t h = s.find_first_of("Hh");
    if (h == std::string::npos) throw UsageError(usage);
    s = s.substr(1, h - 1) + "." + s.substr(h + 1);
  }
  const size_t dot = s.find('.');
  if (dot == std::string::npos) throw UsageError(usage);
  int layer = 0, head = 0;
  const std::string ls = s.substr(0, dot), hs_ = s.substr(dot + 1);
  const auto [pl, el] = std::from_chars(ls.data(), ls.data() + ls.size(), layer);
  const auto [ph, eh] = std::from_chars(hs_.data(), hs_.data() + hs_.size(), head);
  if (ls.empty() || hs_.empty() || el != std::errc() || eh != std::errc() || pl != ls.data() + ls.size() ||
      ph != hs_.data() + hs_.size())
    throw UsageError(usage);
  if (layer < 0 || layer >= c.n_layers)
    throw UsageError("--head " + text + ": layer " + std::to_string(layer) + " does not exist; the model has " +
                     std::to_string(c.n_layers) + " layers (0.." + std::to_string(c.n_layers - 1) + ").");
  if (head < 0 || head >= c.n_heads)
    throw UsageError("--head " + text + ": head " + std::to_string(head) + " does not exist; the model has " +
                     std::to_string(c.n_heads) + " heads per layer (0.." + std::to_string(c.n_heads - 1) + ").");
  return {layer, head};
}

int cmd_circuits(const Args& a) {
  if (!a.head) throw UsageError("circuits needs --head LAYER.HEAD (e.g. --head 0.3).");
  if (a.text && a.tokens) throw UsageError("circuits takes at most one of --text TEXT or --tokens 1,2,3.");
  if (!a.out) throw UsageError("circuits needs -o OUT.json.");
  output_extension(a, {".json"});
  const auto m = load_model(a);
  const auto [layer, head] = parse_head(*a.head, m->config());
  const hs::CircuitSpectrum s = hs::circuit_spectrum(*m->weights(), layer, head);
  json j = {{"layer", layer},
            {"head", head},
            {"d_head", m->config().d_head},
            {"d_model", m->config().d_model},
            {"folded", "the layer's first norm weight into W_Q, W_K, W_V; the final norm's weight into W_U"},
            {"ignored", "every bias (b_Q, b_K, b_V, b_O, the norms' biases), the norms' centring and scaling, "
                        "positions, the attention scale"},
            {"qk_singular_values", s.qk_singular_values},
            {"ov_singular_values", s.ov_singular_values},
            {"copying_score", s.copying_score}};
  json re = json::array(), im = json::array();
  for (const auto& z : s.ov_eigenvalues) {
    re.push_back(z.real());
    im.push_back(z.imag());
  }
  j["ov_eigenvalues_real"] = re;
  j["ov_eigenvalues_imag"] = im;
  if (a.text || a.tokens) {
    // Token identities only (no positions): tokenized, not run.
    const std::vector<int32_t> tokens = a.text ? m->encode(*a.text, !a.no_bos) : parse_tokens(*a.tokens);
    const hs::PromptCircuits p = hs::prompt_circuits(*m->weights(), layer, head, tokens, a.top_k);
    const int n = static_cast<int>(p.tokens.size()), k = p.top_k;
    json qk = json::array(), ids = json::array(), logits = json::array();
    for (int i = 0; i < n; ++i) {
      qk.push_back(std::vector<float>(p.qk_scores.row(i).data(), p.qk_scores.row(i).data() + n));
      ids.push_back(std::vector<int32_t>(p.ov_top_ids.begin() + i * k, p.ov_top_ids.begin() + (i + 1) * k));
      logits.push_back(std::vector<float>(p.ov_top_logits.begin() + i * k, p.ov_top_logits.begin() + (i + 1) * k));
    }
    j["tokens"] = p.tokens;
    j["qk_scores"] = qk;
    j["ov_top_ids"] = ids;
    j["ov_top_logits"] = logits;
    j["ov_self_logits"] = p.ov_self_logits;
    j["ov_self_ranks"] = p.ov_self_ranks;
  }
  hs::write_file_atomically(*a.out, j.dump(1) + "\n");
  return 0;
}

int cmd_patch(const Args& a) {
  if (!a.clean || !a.corrupt || !a.answer || !a.wrong || !a.what)
    throw UsageError("patch needs --clean TEXT, --corrupt TEXT, --answer TEXT, --wrong TEXT and "
                     "--what resid_pre|attn_out|mlp_out|z.");
  if (!a.out) throw UsageError("patch needs -o OUT.json.");
  if (std::filesystem::path(*a.out).extension() != ".json")
    throw UsageError("-o " + *a.out + ": the output of patch must end in .json.");
  hs::HookPoint what{};
  try {
    what = hs::parse_hook_point(*a.what);
  } catch (const hs::Error& e) {
    throw UsageError(std::string("--what: ") + e.what());
  }
  const auto m = load_model(a);
  const hs::PatchingInputs in = hs::patching_inputs(*m, *a.clean, *a.corrupt, *a.answer, *a.wrong, !a.no_bos);
  hs::RunOptions o;
  o.threads = g_threads;
  const hs::TextRun clean = hs::run_tokens(m, in.clean, o);
  const hs::TextRun corrupt = hs::run_tokens(m, in.corrupt, o);
  for (const hs::TextRun* r : {&clean, &corrupt})
    for (const auto& w : r->warnings)
      if (std::find(m->warnings().begin(), m->warnings().end(), w) == m->warnings().end())
        std::cerr << "headscope-cli: warning: " << w << "\n";
  hs::SweepControl control;
  control.threads = g_threads;
  const hs::PatchingResult p = hs::patching_sweep(*clean.cache, *corrupt.cache, in.answer, in.wrong, what, control);
  auto rows = [](const hs::RowMatrixXf& x) {
    json out = json::array();
    for (Eigen::Index r = 0; r < x.rows(); ++r) {
      json row = json::array();
      for (Eigen::Index c = 0; c < x.cols(); ++c) row.push_back(x(r, c));
      out.push_back(std::move(row));
    }
    return out;
  };
  const json j = {{"what", std::string(hs::hook_short_name(what))},
                  {"metric_clean", p.metric_clean},
                  {"metric_corrupt", p.metric_corrupt},
                  {"raw", rows(p.raw)},
                  {"normalized", rows(p.normalized)},
                  {"clean_tokens", in.clean},
                  {"corrupt_tokens", in.corrupt},
                  {"answer_id", in.answer},
                  {"wrong_id", in.wrong},
                  {"labels", clean.token_labels}};
  hs::write_file_atomically(*a.out, j.dump() + "\n");
  return 0;
}

int cmd_heads(const Args& a) {
  if (a.text) {
    if (a.seed_given) throw UsageError("--seed chooses the random sequences of the fixed scores; it does not apply with --text.");
    const auto m = load_model(a);
    hs::TextRunOptions o;
    o.prepend_bos = !a.no_bos;
    o.run.threads = g_threads;
    const hs::TextRun r = hs::run_text(m, *a.text, o);
    for (const auto& w : r.warnings)
      if (std::find(m->warnings().begin(), m->warnings().end(), w) == m->warnings().end())
        std::cerr << "headscope-cli: warning: " << w << "\n";
    const hs::PromptHeadScores s = hs::score_heads_on_prompt(*r.cache, r.bos_prepended);
    std::cout << hs::prompt_head_scores_to_json(*m, r.text, r.tokens, r.bos_prepended, s) << "\n";
    return 0;
  }
  const auto m = load_model(a);
  hs::HeadScoreOptions o;
  o.seed = a.seed;
  const hs::HeadScores s = hs::compute_head_scores(*m, o);
  std::cout << hs::head_scores_to_json(*m, s) << "\n";
  return 0;
}

int cmd_generate(const Args& a) {
  if (!a.text) throw UsageError("generate needs --text TEXT.");
  if (a.n < 0) throw UsageError("generate needs -n N (the number of tokens to add).");
  const auto m = load_model(a);
  std::vector<int32_t> ids = m->encode(*a.text, !a.no_bos);
  const size_t first_new = ids.size();
  std::mt19937_64 rng(a.seed);
  hs::RunOptions o;
  o.logits_only = true;
  o.threads = g_threads;
  for (int i = 0; i < a.n; ++i) {
    // Keep the most recent n_ctx tokens: the model cannot see further back.
    const size_t n_ctx = static_cast<size_t>(m->config().n_ctx);
    const size_t start = ids.size() > n_ctx ? ids.size() - n_ctx : 0;
    const auto cache = m->run(std::span<const int32_t>(ids).subspan(start), o);
    const auto row = cache->logits.row(cache->n_pos() - 1);
    int32_t next = 0;
    if (a.temperature <= 0.0) {
      row.maxCoeff(&next);
    } else {
      std::vector<double> w(static_cast<size_t>(row.size()));
      const double mx = row.maxCoeff();
      for (Eigen::Index t = 0; t < row.size(); ++t) w[static_cast<size_t>(t)] = std::exp((row(t) - mx) / a.temperature);
      next = static_cast<int32_t>(std::discrete_distribution<int>(w.begin(), w.end())(rng));
    }
    ids.push_back(next);
  }
  std::vector<int32_t> added(ids.begin() + static_cast<long>(first_new), ids.end());
  std::cout << *a.text << m->tokenizer().decode(added) << "\n";
  return 0;
}

std::string one_line(std::string s) {
  for (size_t p; (p = s.find("\n  ")) != std::string::npos;) s.replace(p, 3, "; ");
  for (char& ch : s)
    if (ch == '\n') ch = ' ';
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc >= 2 && (std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h")) {
      std::cout << kMainHelp;
      return 0;
    }
    if (argc >= 2 && std::string(argv[1]) == "--version") {
      std::cout << "headscope-cli " << HEADSCOPE_VERSION << "\n";
      return 0;
    }
    const Args a = parse_args(argc, argv);
    const auto help = kCommandHelp.find(a.command);
    if (help == kCommandHelp.end())
      throw UsageError("unknown command \"" + a.command + "\"; commands are info, tokenize, run, patch, heads, generate, lens, circuits.");
    if (a.help) {
      std::cout << help->second;
      return 0;
    }
    g_threads = a.threads;
    if (a.command == "info") return cmd_info(a);
    if (a.command == "tokenize") return cmd_tokenize(a);
    if (a.command == "run") return cmd_run(a);
    if (a.command == "heads") return cmd_heads(a);
    if (a.command == "patch") return cmd_patch(a);
    if (a.command == "lens") return cmd_lens(a);
    if (a.command == "circuits") return cmd_circuits(a);
    return cmd_generate(a);
  } catch (const UsageError& e) {
    std::cerr << "headscope-cli: " << one_line(e.what()) << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "headscope-cli: error: " << one_line(e.what()) << "\n";
    return 1;
  }
}
