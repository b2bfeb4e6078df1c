// headscope-cli: the engine without a window. See DESIGN.md, "Command line (contract)".
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <fstream>
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
#include "core/analysis/scan.h"
#include "core/error.h"
#include "core/io/export.h"
#include "core/model/architecture_text.h"
#include "core/model/pack_cache.h"
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
  headscope-cli scan     [--model DIR] (--input FILE | --repeat-random N) [--limit N] [--max-tokens N]
                         [--no-bos] [--seed S] [--shard I/N] [--per-prompt OUT.jsonl] [--resume]
                         -o OUT.json|OUT.npz
  headscope-cli merge    -o OUT.json|OUT.npz SHARD.json...
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
    {"scan", R"(Usage: headscope-cli scan [--model DIR] (--input FILE | --repeat-random N) [--limit N] [--max-tokens N]
                          [--no-bos] [--seed S] [--shard I/N] [--per-prompt OUT.jsonl] [--resume]
                          [--threads N] -o OUT.json|OUT.npz

Runs every prompt of a data set through the model, one at a time, and aggregates (docs/scan.md):
per head the mean and standard deviation over prompts of the previous-token, duplicate-token and
induction scores (docs/head-scores.md, "On any prompt"), of the attention entropy and of the
direct logit attribution to the next token; the mean loss per position; and, for JSON Lines rows
with "clean", "corrupt", "answer" and "wrong", the mean normalized patching effect per layer x
position (resid_pre) and per layer x head (z). Memory does not grow with the number of prompts.
  --input FILE        one prompt a line, or JSON Lines (.jsonl, or a first line starting with '{')
                      with a "text" field (or "clean", "corrupt", "answer", "wrong")
  --repeat-random N   no file: BOS + R + R prompts, R = N random ids (docs/head-scores.md);
                      --limit says how many (default 10), --seed chooses the ids (default 0)
  --limit N           only the first N lines (or prompts)
  --max-tokens N      cut longer prompts to N tokens (BOS included) and count them; without it a
                      prompt longer than the context is a bad line
  --no-bos            do not prepend BOS to each prompt
  --shard I/N         only lines whose index (from 0, counting every line) % N == I; run N of
                      these side by side and combine them with `headscope-cli merge`
  --per-prompt FILE   also write one JSON line per prompt, as it is scanned
  --resume            continue the incomplete scan in OUT (same model, input and options)
  --stop-after K      stop after K more lines, as Ctrl-C would (a time-boxed job; resume later)
  --threads N         threads for the forward pass (default: the engine's choice)
Lines that cannot be used (invalid UTF-8, empty, too long, bad JSON, patch rows whose prompts
differ in length or whose answers are not one token) are counted by reason in "bad_lines", with
their first line numbers. Progress goes to stderr. Ctrl-C or SIGTERM stops after the current
prompt and writes OUT marked "complete": false; run the same command with --resume to go on.
OUT.npz holds the mean, std and count arrays; its JSON (settings, counts, state) goes to
OUT.npz.json. Every file is written atomically.
)"},
    {"merge", R"(Usage: headscope-cli merge -o OUT.json|OUT.npz SHARD.json...

Combines the outputs of `headscope-cli scan --shard I/N` (every I from 0 to N-1, each complete,
all with the same model, input and options) into the output one process would have written:
counts added, means and variances merged exactly (Chan et al.), bad lines added. For shards
written as .npz, give their .npz or .npz.json files.
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
  // scan and merge
  std::optional<std::string> input, shard, per_prompt;
  int64_t limit = -1, stop_after = -1;
  int max_tokens = 0, repeat_random = 0;
  bool resume = false;
  std::vector<std::string> files;
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
    else if (f == "--input" && a.command == "scan") a.input = value(i, f);
    else if (f == "--repeat-random" && a.command == "scan") a.repeat_random = parse_int(f, value(i, f), 2, 1 << 20);
    else if (f == "--limit" && a.command == "scan") a.limit = parse_int(f, value(i, f), 0, INT32_MAX);
    else if (f == "--max-tokens" && a.command == "scan") a.max_tokens = parse_int(f, value(i, f), 1, 1 << 24);
    else if (f == "--shard" && a.command == "scan") a.shard = value(i, f);
    else if (f == "--per-prompt" && a.command == "scan") a.per_prompt = value(i, f);
    else if (f == "--resume" && a.command == "scan") a.resume = true;
    else if (f == "--stop-after" && a.command == "scan") a.stop_after = parse_int(f, value(i, f), 0, INT32_MAX);
    else if (a.command == "merge" && !f.empty() && f[0] != '-') a.files.push_back(f);
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

// ---- scan and merge ---------------------------------------------------------------------------

// Set by SIGINT / SIGTERM: the scan stops after the current prompt and writes a resumable output.
volatile std::sig_atomic_t g_stop_signal = 0;
extern "C" void on_stop_signal(int sig) { g_stop_signal = sig; }

std::string duration_text(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const long s = std::lround(seconds);
  char buf[32];
  if (s >= 3600) std::snprintf(buf, sizeof buf, "%ldh%02ldm", s / 3600, (s / 60) % 60);
  else if (s >= 60) std::snprintf(buf, sizeof buf, "%ldm%02lds", s / 60, s % 60);
  else std::snprintf(buf, sizeof buf, "%lds", s);
  return buf;
}

// Progress on stderr: a bar redrawn in place on a terminal, a plain line every few seconds
// otherwise (a batch job's log should not fill with carriage returns).
class ScanProgressPrinter {
 public:
  ScanProgressPrinter() : tty_(isatty(STDERR_FILENO) == 1), start_(Clock::now()), last_(start_) {}

  void operator()(const hs::ScanProgress& p) {
    if (first_done_ < 0) first_done_ = p.done - 1;
    const auto now = Clock::now();
    const double since_last = std::chrono::duration<double>(now - last_).count();
    const bool last_one = p.total >= 0 && p.done >= p.total;
    if (since_last < (tty_ ? 0.1 : 5.0) && !last_one) return;
    last_ = now;
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    const double rate = elapsed > 0 ? static_cast<double>(p.done - first_done_) / elapsed : 0.0;
    const double left = p.total >= 0 && rate > 0 ? static_cast<double>(p.total - p.done) / rate : -1.0;
    char line[160];
    if (tty_) {
      const int width = 30;
      const int filled = p.total > 0 ? static_cast<int>(width * p.done / p.total) : 0;
      std::string bar(static_cast<size_t>(filled), '#');
      bar.resize(width, '.');
      std::snprintf(line, sizeof line, "\r[%s] %lld/%lld  %.1f/s  %s left ", bar.c_str(), static_cast<long long>(p.done),
                    static_cast<long long>(p.total), rate, duration_text(left).c_str());
      std::cerr << line << std::flush;
      drawn_ = true;
    } else {
      std::snprintf(line, sizeof line, "headscope-cli scan: %lld/%lld lines, %.1f/s, %s left\n",
                    static_cast<long long>(p.done), static_cast<long long>(p.total), rate, duration_text(left).c_str());
      std::cerr << line << std::flush;
    }
  }
  void finish() {
    if (drawn_) std::cerr << "\n";
    drawn_ = false;
  }

 private:
  using Clock = std::chrono::steady_clock;
  bool tty_;
  Clock::time_point start_, last_;
  int64_t first_done_ = -1;
  bool drawn_ = false;
};

std::vector<std::string> head_labels(int n_layers, int n_heads) {
  std::vector<std::string> labels;
  for (int l = 0; l < n_layers; ++l)
    for (int h = 0; h < n_heads; ++h) labels.push_back("L" + std::to_string(l) + "H" + std::to_string(h));
  return labels;
}

// Where the JSON of a scan output lives: OUT itself, or beside an .npz as OUT.npz.json.
std::filesystem::path scan_json_path(const std::string& out) {
  return std::filesystem::path(out).extension() == ".npz" ? std::filesystem::path(out + ".json")
                                                          : std::filesystem::path(out);
}

// Writes a scan's output: the JSON (everything, state included), and with .npz the arrays too.
void write_scan_output(const hs::ScanState& s, const std::string& out) {
  const json j = hs::scan_to_json(s, head_labels(s.n_layers, s.n_heads));
  if (std::filesystem::path(out).extension() == ".npz") {
    std::vector<std::vector<float>> data;
    std::vector<hs::NpzArrayView> arrays;
    data.reserve(s.grids.size() * 3);
    for (const auto& [name, g] : s.grids) {
      std::vector<int64_t> shape = {g.rows()};
      if (g.cols() != 1) shape.push_back(g.cols());
      for (const char* part : {"mean", "std", "count"}) {
        std::vector<float> v;
        v.reserve(static_cast<size_t>(g.rows()) * static_cast<size_t>(g.cols()));
        for (int r = 0; r < g.rows(); ++r)
          for (int c = 0; c < g.cols(); ++c) {
            const std::string p = part;
            v.push_back(static_cast<float>(p == "mean" ? g.mean(r, c)
                                           : p == "std" ? std::sqrt(g.variance(r, c))
                                                        : static_cast<double>(g.count(r, c))));
          }
        data.push_back(std::move(v));
        arrays.push_back({name + "." + part, shape, data.back().data()});
      }
    }
    hs::write_atomically(out, [&](std::ostream& o) { hs::write_npz(o, arrays); });
  }
  hs::write_file_atomically(scan_json_path(out), j.dump(1) + "\n");
}

hs::ScanState read_scan_output(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw hs::Error("cannot read " + path.string() + ": it does not exist or is not readable.");
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    throw hs::Error(path.string() + " is not JSON (" + hs::json_error_reason(e) + "); give a file written by `headscope-cli scan`.");
  }
  return hs::scan_from_json(j, path.string());
}

std::string bad_line_summary(const hs::ScanState& s) {
  std::string out;
  for (const auto& [reason, b] : s.bad) {
    out += (out.empty() ? "" : ", ") + std::to_string(b.count) + " " + reason + " (line";
    out += b.first_lines.size() > 1 ? "s " : " ";
    for (size_t i = 0; i < b.first_lines.size(); ++i) out += (i ? "," : "") + std::to_string(b.first_lines[i]);
    out += b.count > static_cast<int64_t>(b.first_lines.size()) ? ",...)" : ")";
  }
  return out;
}

int cmd_scan(const Args& a) {
  if (a.input.has_value() == (a.repeat_random > 0))
    throw UsageError("scan needs exactly one of --input FILE or --repeat-random N.");
  if (!a.out) throw UsageError("scan needs -o OUT.json or -o OUT.npz.");
  output_extension(a, {".json", ".npz"});
  if (a.repeat_random > 0 && a.no_bos)
    throw UsageError("--repeat-random prompts are BOS + R + R by definition; --no-bos does not apply.");
  if (a.input && a.seed_given)
    throw UsageError("--seed chooses the --repeat-random ids; it does not apply with --input.");
  if (a.repeat_random > 0 && a.max_tokens > 0)
    throw UsageError("--max-tokens would cut the second copy of R; choose a smaller --repeat-random instead.");
  hs::ScanOptions o;
  if (a.input) o.input = *a.input;
  o.repeat_random = a.repeat_random;
  o.limit = a.limit >= 0 ? a.limit : (a.repeat_random > 0 ? 10 : -1);
  o.max_tokens = a.max_tokens;
  o.prepend_bos = !a.no_bos;
  o.seed = a.seed;
  o.threads = g_threads;
  if (a.shard) {
    const std::string& v = *a.shard;
    const size_t slash = v.find('/');
    const std::string usage = "--shard expects I/N with 0 <= I < N, like 0/4, got \"" + v + "\".";
    if (slash == std::string::npos) throw UsageError(usage);
    try {
      o.shard_index = parse_int("--shard", v.substr(0, slash), 0, 1 << 20);
      o.shard_count = parse_int("--shard", v.substr(slash + 1), 1, 1 << 20);
    } catch (const UsageError&) {
      throw UsageError(usage);
    }
    if (o.shard_index >= o.shard_count) throw UsageError(usage);
  }
  const std::filesystem::path state_path = scan_json_path(*a.out);
  const auto m = load_model(a);
  json settings = hs::scan_settings(*m, o);
  hs::ScanState state;
  if (a.resume) {
    if (!std::filesystem::exists(state_path))
      throw UsageError("--resume: " + state_path.string() + " does not exist, so there is nothing to continue; run without --resume.");
    state = read_scan_output(state_path);
    hs::require_same_settings(settings, state.settings, state_path.string());
    if (state.shard_index != o.shard_index || state.shard_count != o.shard_count)
      throw UsageError("--resume: " + state_path.string() + " is shard " + std::to_string(state.shard_index) + "/" +
                       std::to_string(state.shard_count) + ", not " + std::to_string(o.shard_index) + "/" +
                       std::to_string(o.shard_count) + "; give the same --shard.");
    if (state.complete) {
      std::cerr << "headscope-cli: " << state_path.string() << " is already complete; nothing to resume.\n";
      return 0;
    }
    state.settings = settings;  // the paths of this machine
  } else {
    if (std::filesystem::exists(state_path)) {
      bool incomplete = false;
      try {
        incomplete = !read_scan_output(state_path).complete;
      } catch (const hs::Error&) {
      }
      if (incomplete)
        throw UsageError(state_path.string() + " holds an incomplete scan: continue it with --resume, or delete it to start again.");
    }
    state = hs::new_scan_state(*m, o, settings);
  }

  std::ofstream per_prompt;
  if (a.per_prompt) {
    if (a.resume) {
      std::error_code ec;
      const auto size = std::filesystem::file_size(*a.per_prompt, ec);
      if (ec || static_cast<int64_t>(size) < state.per_prompt_bytes)
        throw UsageError("--resume: " + *a.per_prompt + " holds less than the " + std::to_string(state.per_prompt_bytes) +
                         " bytes the partial scan wrote to it; give the same --per-prompt file, untouched.");
      std::filesystem::resize_file(*a.per_prompt, static_cast<uintmax_t>(state.per_prompt_bytes));
      per_prompt.open(*a.per_prompt, std::ios::binary | std::ios::app);
    } else {
      state.per_prompt_bytes = 0;
      per_prompt.open(*a.per_prompt, std::ios::binary | std::ios::trunc);
    }
    if (!per_prompt) throw hs::Error("cannot write " + *a.per_prompt + "; check the folder exists and is writable.");
  }

  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
  ScanProgressPrinter printer;
  hs::ScanControl control;
  control.progress = [&](const hs::ScanProgress& p) { printer(p); };
  control.stop = [] { return g_stop_signal != 0; };
  control.stop_after = a.stop_after;
  if (a.per_prompt)
    control.per_prompt = [&](const std::string& row) {
      per_prompt << row;
      if (!per_prompt) throw hs::Error("writing " + *a.per_prompt + " failed (is the disk full?).");
    };
  hs::run_scan(*m, o, state, control);
  printer.finish();
  if (a.per_prompt) {
    per_prompt.flush();
    if (!per_prompt) throw hs::Error("writing " + *a.per_prompt + " failed (is the disk full?).");
  }
  write_scan_output(state, *a.out);
  const std::string bad = bad_line_summary(state);
  std::cerr << "headscope-cli scan: " << state.prompts << " prompts" << (state.patch_rows ? ", " + std::to_string(state.patch_rows) + " patch rows" : "")
            << (state.truncated ? ", " + std::to_string(state.truncated) + " truncated" : "")
            << (bad.empty() ? ", no bad lines" : "; bad lines: " + bad) << "\n";
  if (!state.complete) {
    std::cerr << "headscope-cli scan: stopped before the end; " << state_path.string()
              << " is marked incomplete. Run the same command with --resume to continue.\n";
    if (g_stop_signal) return 128 + g_stop_signal;
  }
  return 0;
}

int cmd_merge(const Args& a) {
  if (!a.out) throw UsageError("merge needs -o OUT.json (or OUT.npz).");
  output_extension(a, {".json", ".npz"});
  if (a.files.empty()) throw UsageError("merge needs the shard outputs to combine: merge -o OUT.json SHARD0.json SHARD1.json ...");
  std::vector<hs::ScanState> shards;
  std::vector<std::string> sources;
  for (const std::string& f : a.files) {
    const std::filesystem::path p = scan_json_path(f);
    shards.push_back(read_scan_output(p));
    sources.push_back(p.string());
  }
  write_scan_output(hs::merge_scans(shards, sources), *a.out);
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
  // A model opened for the first time has its packed matrices written to the cache on disk in the
  // background (core/model/pack_cache.h); a command that ends sooner waits for it, so that the
  // next command opens the model from the cache.
  struct WaitForPackCache {
    ~WaitForPackCache() { hs::PackCache::wait_for_writes(); }
  } wait_for_pack_cache;
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
      throw UsageError("unknown command \"" + a.command + "\"; commands are info, tokenize, run, patch, heads, generate, lens, circuits, scan, merge.");
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
    if (a.command == "scan") return cmd_scan(a);
    if (a.command == "merge") return cmd_merge(a);
    return cmd_generate(a);
  } catch (const UsageError& e) {
    std::cerr << "headscope-cli: " << one_line(e.what()) << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "headscope-cli: error: " << one_line(e.what()) << "\n";
    return 1;
  }
}
