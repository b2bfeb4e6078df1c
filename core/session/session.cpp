#include "core/session/session.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>

#include "core/error.h"
#include "core/model/memory_guard.h"

namespace hs {
namespace fs = std::filesystem;

fs::path executable_dir() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::current_path(ec) : exe.parent_path();
}

fs::path builtin_model_dir() {
  std::vector<fs::path> candidates;
  if (const char* env = std::getenv("HEADSCOPE_MODEL_DIR"); env && *env) candidates.emplace_back(env);
  // Installed: <prefix>/bin/../share/headscope/models; build tree: <build>/app/../share/...
  candidates.push_back(executable_dir() / ".." / HEADSCOPE_MODEL_SUBDIR / "headscope-tiny");
#ifdef HEADSCOPE_SOURCE_MODEL_DIR
  candidates.emplace_back(HEADSCOPE_SOURCE_MODEL_DIR);
#endif
  std::string looked;
  for (const auto& c : candidates) {
    std::error_code ec;
    if (fs::exists(c / "config.json", ec) && fs::exists(c / "model.safetensors", ec)) return c.lexically_normal();
    looked += "\n  " + c.lexically_normal().string();
  }
  throw Error("the built-in model was not found; looked in:" + looked +
              "\nReinstall HeadScope, set HEADSCOPE_MODEL_DIR, or pass --model DIR.");
}

std::vector<std::string> token_labels(const Model& model, const std::vector<int32_t>& tokens) {
  const Tokenizer& tok = model.tokenizer();
  const bool all_known = std::all_of(tokens.begin(), tokens.end(), [&](int32_t t) { return t >= 0 && t < tok.vocab_size(); });
  // A character split across tokens is named in each of them (display_in_context).
  if (all_known) return display_in_context(tok, tokens);
  std::vector<std::string> out;
  out.reserve(tokens.size());
  for (int32_t t : tokens) {
    if (t >= 0 && t < tok.vocab_size()) out.push_back(tok.display(t));
    else out.push_back("<" + std::to_string(t) + ">");
  }
  return out;
}

namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

void add_activation_warnings(TextRun& r) {
  if (!r.cache->logits_finite)
    r.warnings.push_back("the logits contain NaN or infinite values: the model's weights or activations overflowed, "
                         "so the views of this run are not meaningful.");
}

// True when `previous` already holds this run: same weights, same tokens, the same extras
// stored. The GUI then shows it again instead of recomputing its last position — which at long
// context meant copying the whole cache per key (e.g. typing past the context limit).
bool same_run(const ActivationCache* previous, const Model& model, const std::vector<int32_t>& tokens,
              const RunOptions& o) {
  return previous && previous->weights() == model.weights() && previous->tokens() == tokens &&
         cache_covers(*previous, o);
}

}  // namespace

TextRun run_tokens(std::shared_ptr<const Model> model, std::vector<int32_t> tokens, const RunOptions& options,
                   std::shared_ptr<const ActivationCache> previous) {
  TextRun r;
  r.model = model;
  r.tokens = std::move(tokens);
  // Too long or empty prompts are refused by the forward pass with their own message.
  if (!r.tokens.empty() && r.tokens.size() <= static_cast<size_t>(model->config().n_ctx))
    check_run_memory(model->config(), static_cast<int64_t>(r.tokens.size()), options, model->name());
  const auto t0 = std::chrono::steady_clock::now();
  if (same_run(previous.get(), *model, r.tokens, options))
    r.cache = std::move(previous);  // e.g. typing past the context limit: the kept tokens did not change
  else
    r.cache = model->run(r.tokens, options, std::move(previous));
  r.forward_ms = ms_since(t0);
  r.token_labels = token_labels(*model, r.tokens);
  r.warnings = model->warnings();
  add_activation_warnings(r);
  return r;
}

TextRun run_text(std::shared_ptr<const Model> model, std::string_view text, const TextRunOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<int32_t> tokens = model->encode(text, options.prepend_bos);
  const double tokenize_ms = ms_since(t0);
  if (tokens.empty()) throw Error("the prompt is empty: type some text (or keep BOS on).");
  const int n_ctx = model->config().n_ctx;
  int dropped = 0;
  if (tokens.size() > static_cast<size_t>(n_ctx)) {
    if (options.overlong == OverlongPolicy::Refuse)
      throw Error("the text is " + std::to_string(tokens.size()) + " tokens" +
                  (options.prepend_bos ? " with BOS" : "") + " but " + model->name() + "'s context is " +
                  std::to_string(n_ctx) + " tokens (n_positions); shorten the text.");
    dropped = static_cast<int>(tokens.size()) - n_ctx;
    if (options.overlong == OverlongPolicy::KeepLastWithWarning) {
      // BOS stays first (models are trained with it there); the text's first tokens go.
      const auto first_kept = tokens.begin() + (options.prepend_bos ? 1 : 0);
      tokens.erase(first_kept, first_kept + dropped);
    } else {
      tokens.resize(static_cast<size_t>(n_ctx));
    }
  }
  TextRun r = run_tokens(model, std::move(tokens), options.run, options.previous);
  r.text = std::string(text);
  r.bos_prepended = options.prepend_bos;
  r.tokenize_ms = tokenize_ms;
  r.dropped_tokens = dropped;
  r.dropped_from_start = dropped > 0 && options.overlong == OverlongPolicy::KeepLastWithWarning;
  if (dropped > 0)
    r.warnings.insert(r.warnings.begin(),
                      "the text is longer than the model's context of " + std::to_string(n_ctx) + " tokens: the " +
                          (r.dropped_from_start ? std::string("first ") + std::to_string(dropped) + " tokens" +
                                                      (options.prepend_bos ? " after BOS" : "")
                                                : "last " + std::to_string(dropped) + " tokens") +
                          " were left out of this run.");
  return r;
}

}  // namespace hs
