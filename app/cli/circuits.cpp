// headscope-cli circuits: one head's QK and OV circuits from the weights alone.
#include <charconv>
#include <nlohmann/json.hpp>

#include "app/cli/commands.h"
#include "app/cli/common.h"
#include "core/analysis/circuits.h"
#include "core/io/export.h"

namespace hs::cli {
namespace {

using nlohmann::json;

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

int circuits(const Args& a) {
  const std::string head_text = a.text("--head");
  if (a.has("--text") && a.has("--tokens")) throw UsageError("circuits takes at most one of --text TEXT or --tokens 1,2,3.");
  const std::string out = a.text("-o");
  output_extension(out, {".json"});
  const auto m = load_model(a);
  const auto [layer, head] = parse_head(head_text, m->config());
  hs::TokenVectors vectors;
  try {
    vectors = hs::parse_token_vectors(a.text("--embedding"));
  } catch (const hs::Error& e) {
    throw UsageError(std::string("--embedding: ") + e.what());
  }
  const hs::CircuitSpectrum s = hs::circuit_spectrum(*m->weights(), layer, head, vectors);
  json j = {{"layer", layer},
            {"head", head},
            {"d_head", m->config().d_head},
            {"d_model", m->config().d_model},
            {"folded", "the layer's first norm weight into W_Q, W_K, W_V; the final norm's weight into W_U"},
            {"ignored", s.vectors == hs::TokenVectors::Raw
                            ? "every bias (b_Q, b_K, b_V, b_O, the norms' biases), the norms' centring and scaling, "
                              "positions, the attention scale"
                            : "every bias (b_Q, b_K, b_V, b_O, the reading norm's bias), positions, the attention "
                              "scale"},
            // What a token is to the head (docs/circuits.md): its embedding row, or the extended
            // embedding through layer 0's MLP, normalized.
            {"token_vectors", std::string(hs::to_string(s.vectors))},
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
  if (a.has("--text") || a.has("--tokens")) {
    // Token identities only (no positions): tokenized, not run.
    const std::vector<int32_t> tokens =
        a.has("--text") ? m->encode(a.text("--text"), !a.flag("--no-bos")) : parse_tokens(a.text("--tokens"));
    const hs::PromptCircuits p =
        hs::prompt_circuits(*m->weights(), layer, head, tokens, static_cast<int>(a.integer("--top-k")), vectors);
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
  hs::write_file_atomically(out, j.dump(1) + "\n");
  return 0;
}

}  // namespace

const CommandSpec& circuits_command() {
  static const CommandSpec c{
      .name = "circuits",
      .summary = "one head's QK and OV circuits: spectra, copying score, and per-token scores",
      .synopsis = {"[--model DIR] --head L.H [--embedding raw|extended] [--text TEXT | --tokens 1,2,3] -o OUT.json"},
      .help = R"(Usage: headscope-cli circuits [--model DIR] --head L.H [--embedding raw|extended|default] [--text TEXT | --tokens 1,2,3] [--top-k K] -o OUT.json

Head L.H's QK and OV circuits (W_QK = W_Q W_K^T, W_OV = W_V W_O, factored at rank d_head;
docs/circuits.md). Folded: the layer's first norm weight into W_Q, W_K, W_V; the final norm's
weight into W_U. Ignored: every bias, positions. Token vectors E (--embedding): raw embedding
rows W_E (the norms' centring and scaling ignored), or the extended embedding W_E + MLP0(W_E)
through layer 0's MLP, normalized by the reading norm; default: raw for layer 0's heads, extended
after. Writes JSON: "token_vectors", "qk_singular_values", "ov_singular_values" (d_head each,
descending), "ov_eigenvalues_real", "ov_eigenvalues_imag" (the full OV circuit E W_OV W_U's
d_head nonzero eigenvalues, by descending real part) and "copying_score" (sum(lambda) /
sum(|lambda|)). With --text or
--tokens also "tokens", "qk_scores" ([query token][key token] of E W_QK E^T) and, for each
token, the --top-k (default 10) tokens its OV circuit promotes ("ov_top_ids", "ov_top_logits")
and its own entry ("ov_self_logits", "ov_self_ranks").
)",
      .options = {model_option(),
                  {.name = "--head",
                   .metavar = "L.H",
                   .help = "the head: LAYER.HEAD like 0.3, or L0H3",
                   .required = true,
                   .missing = "circuits needs --head LAYER.HEAD (e.g. --head 0.3)."},
                  {.name = "--embedding",
                   .metavar = "raw|extended|default",
                   .help = "the token vectors: raw embedding rows, or through layer 0's MLP (default: raw for "
                           "layer 0, extended after)",
                   .default_value = "default"},
                  text_option("score these tokens (tokenized, not run)"), tokens_option(), no_bos_option(),
                  {.name = "--top-k",
                   .metavar = "K",
                   .kind = ValueKind::Integer,
                   .help = "how many promoted tokens to list per token (default 10)",
                   .default_value = "10",
                   .min = 1,
                   .max = 1000},
                  output_option(".json", "circuits needs -o OUT.json.")},
      .run = circuits,
  };
  return c;
}

}  // namespace hs::cli
