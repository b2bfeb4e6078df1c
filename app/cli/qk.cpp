// headscope-cli qk: why a head attends (QK tracing): one attention score split into pairwise
// terms between the query side's and the key side's residual components.
#include <charconv>
#include <chrono>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "app/cli/commands.h"
#include "app/cli/common.h"
#include "core/analysis/attribution_graph.h"
#include "core/analysis/qk_trace.h"
#include "core/features/sae.h"
#include "core/io/export.h"

namespace hs::cli {
namespace {

using nlohmann::json;

// "3.2" or "L3H2" -> (3, 2); ranges are checked by qk_trace with the model's sizes.
std::pair<int, int> head_of(const std::string& text) {
  std::string s = text;
  if (s.size() > 1 && (s[0] == 'L' || s[0] == 'l')) {
    const size_t h = s.find_first_of("Hh");
    if (h != std::string::npos) s = s.substr(1, h - 1) + "." + s.substr(h + 1);
  }
  const size_t dot = s.find('.');
  int layer = -1, head = -1;
  if (dot != std::string::npos) {
    const std::string ls = s.substr(0, dot), hs_ = s.substr(dot + 1);
    const auto [pl, el] = std::from_chars(ls.data(), ls.data() + ls.size(), layer);
    const auto [ph, eh] = std::from_chars(hs_.data(), hs_.data() + hs_.size(), head);
    if (!ls.empty() && !hs_.empty() && el == std::errc() && eh == std::errc() && pl == ls.data() + ls.size() &&
        ph == hs_.data() + hs_.size())
      return {layer, head};
  }
  throw UsageError("--head expects LAYER.HEAD like 1.3 (or L1H3), got \"" + text + "\".");
}

json component_json(const hs::QkTrace& t, const hs::QkComponent& c, bool query_side, const std::vector<std::string>& text) {
  json j = {{"label", hs::qk_component_label(t, c, query_side, text)},
            {"kind", std::string(hs::to_string(c.kind))},
            {"layer", c.layer},
            {"index", c.index},
            {"pos", c.pos},
            {"marginal", c.marginal}};
  if (c.kind == hs::QkComponent::Kind::Feature || c.kind == hs::QkComponent::Kind::Neuron) j["activation"] = c.activation;
  return j;
}

int qk(const Args& a) {
  if (a.has("--text") == a.has("--tokens")) throw UsageError("qk needs exactly one of --text TEXT or --tokens 1,2,3.");
  if (a.has("--neurons") && a.has("--transcoders"))
    throw UsageError("qk takes --transcoders DIR or --neurons, not both.");
  const auto [layer, head] = head_of(a.text("--head"));
  const int query = static_cast<int>(a.integer("--query")), key = static_cast<int>(a.integer("--key"));
  const std::string out = a.text("-o");
  output_extension(out, {".json"});
  const auto m = load_model(a);
  std::vector<std::shared_ptr<const hs::Sae>> transcoders;
  if (!a.has("--neurons")) {
    std::vector<std::filesystem::path> dirs;
    for (const std::string& d : a.texts("--transcoders")) dirs.emplace_back(d);
    if (dirs.empty()) {
      const std::filesystem::path own = m->dir() / "saes";
      if (!std::filesystem::is_directory(own))
        throw UsageError("qk needs --transcoders DIR (a transcoder set, or a folder of one transcoder per layer) or "
                         "--neurons; this model's folder has no saes/ of its own.");
      dirs.push_back(own);
    }
    transcoders = hs::load_graph_transcoders(dirs, m->config());
  }
  const hs::TextRun r = run_input(a, m);
  hs::QkOptions options;
  options.top = static_cast<int>(a.integer("--top"));
  const auto start = std::chrono::steady_clock::now();
  const hs::QkTrace t = hs::qk_trace(*r.cache, layer, head, query, key, transcoders, options);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();

  std::vector<std::string> text;
  for (int32_t id : r.tokens) text.push_back(m->tokenizer().decode(std::span<const int32_t>(&id, 1)));
  json j;
  j["model"] = m->name();
  j["tokens"] = r.tokens;
  j["prompt_tokens"] = text;
  j["layer"] = t.layer;
  j["head"] = t.head;
  j["kv_head"] = t.kv_head;
  j["query_pos"] = t.query_pos;
  j["key_pos"] = t.key_pos;
  j["units"] = t.transcoders ? "transcoder features" : "mlp neurons";
  j["attention_scale"] = t.attention_scale;
  j["softcap"] = t.softcap;
  j["score"] = t.score;
  j["score_before_softcap"] = t.score_before_softcap;
  j["total"] = t.total;
  j["remainder"] = t.remainder;
  j["query_resid_error"] = t.query_resid_error;
  j["key_resid_error"] = t.key_resid_error;
  json q = json::array(), k = json::array(), pairs = json::array();
  for (const hs::QkComponent& c : t.query) q.push_back(component_json(t, c, true, text));
  for (const hs::QkComponent& c : t.key) k.push_back(component_json(t, c, false, text));
  for (const hs::QkPair& p : t.pairs)
    pairs.push_back({{"query", p.query},
                     {"key", p.key},
                     {"query_label", q[static_cast<size_t>(p.query)]["label"]},
                     {"key_label", k[static_cast<size_t>(p.key)]["label"]},
                     {"term", p.term}});
  j["pairs"] = std::move(pairs);
  j["query_components"] = std::move(q);
  j["key_components"] = std::move(k);
  hs::write_file_atomically(out, j.dump(1) + "\n");
  std::fprintf(stderr,
               "qk: L%dH%d, query %d, key %d: score %.6g (terms sum to %.6g; %s); %zu query and %zu key components, "
               "%zu pairs listed, remainder %.6g; %.0f ms\n",
               t.layer, t.head, t.query_pos, t.key_pos, double{t.score}, t.total,
               t.softcap > 0.0f ? "before the soft-cap" : "the score", t.query.size(), t.key.size(), t.pairs.size(),
               t.remainder, ms);
  return 0;
}

}  // namespace

const CommandSpec& qk_command() {
  static const CommandSpec c{
      .name = "qk",
      .summary = "why a head attends: one attention score as pairwise query x key component terms",
      .synopsis = {"[--model DIR] (--text TEXT | --tokens 1,2,3) [--no-bos] --head L.H --query Q --key K",
                   "[--transcoders DIR... | --neurons] [--top 50] -o OUT.json"},
      .help = R"(Usage: headscope-cli qk [--model DIR] (--text TEXT | --tokens 1,2,3) [--no-bos] --head L.H --query Q --key K
                        [--transcoders DIR... | --neurons] [--top 50] -o OUT.json

QK tracing: splits the attention score of head L.H from query position Q to key position K into
terms, one per pair of a query-side and a key-side component. Each side's residual stream
entering layer L is a sum of components: the token embedding, the position embedding, every
earlier head's output, the attention biases, and the MLPs' outputs in units (transcoder features
with an error node and the decoder bias, or MLP neurons and b_out). With ln1's scale (and any
q/k norm's) frozen at the run's value the score is bilinear in them, so the terms, plus the
constant rows (ln1's bias and b_Q / b_K), sum to the run's score exactly. With an attention
soft-cap (Gemma 2) the score before the cap is what is split.

The JSON holds the score (hook_attn_scores), score_before_softcap, the terms' total, the --top
pairs by |term| with their labels, the remainder (the sum of the other terms), and every
component of each side with its marginal (its terms summed over the other side).
--transcoders as in graph; without it, the model's own saes/. --neurons uses MLP neurons.
)",
      .options = {model_option(),
                  text_option("the prompt"), tokens_option(), no_bos_option(),
                  required({.name = "--head", .metavar = "L.H", .help = "the head: LAYER.HEAD like 1.3, or L1H3"},
                           "qk needs --head LAYER.HEAD (e.g. --head 1.3)."),
                  required({.name = "--query", .metavar = "Q", .kind = ValueKind::Integer, .help = "the query position",
                            .min = 0, .max = 1 << 30},
                           "qk needs --query POSITION."),
                  required({.name = "--key", .metavar = "K", .kind = ValueKind::Integer,
                            .help = "the key position (at most the query's)", .min = 0, .max = 1 << 30},
                           "qk needs --key POSITION."),
                  {.name = "--transcoders", .metavar = "DIR", .help = "a transcoder folder or a folder of them (repeatable)",
                   .repeatable = true},
                  {.name = "--neurons", .kind = ValueKind::Flag,
                   .help = "MLP neurons as the MLP components, without transcoders (any model)"},
                  {.name = "--top", .metavar = "N", .kind = ValueKind::Integer,
                   .help = "pairs listed, largest |term| first (0: every pair)", .default_value = "50", .min = 0,
                   .max = 1 << 30},
                  output_option(".json", "qk needs -o OUT.json.")},
      .run = qk,
  };
  return c;
}

}  // namespace hs::cli
