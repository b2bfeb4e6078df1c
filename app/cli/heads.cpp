// headscope-cli heads: every head's previous-token, duplicate-token and induction scores.
#include <iostream>

#include "app/cli/commands.h"
#include "app/cli/common.h"
#include "core/analysis/head_detectors.h"
#include "core/analysis/head_scores.h"

namespace hs::cli {
namespace {

int heads(const Args& a) {
  if (a.has("--text")) {
    if (a.has("--seed")) throw UsageError("--seed chooses the random sequences of the fixed scores; it does not apply with --text.");
    const auto m = load_model(a);
    const hs::TextRun r = run_input(a, m);
    const hs::PromptHeadScores s = hs::score_heads_on_prompt(*r.cache, r.bos_prepended);
    std::cout << hs::prompt_head_scores_to_json(*m, r.text, r.tokens, r.bos_prepended, s) << "\n";
    return 0;
  }
  const auto m = load_model(a);
  hs::HeadScoreOptions o;
  o.seed = static_cast<uint64_t>(a.integer("--seed"));
  const hs::HeadScores s = hs::compute_head_scores(*m, o);
  std::cout << hs::head_scores_to_json(*m, s) << "\n";
  return 0;
}

}  // namespace

const CommandSpec& heads_command() {
  static const CommandSpec c{
      .name = "heads",
      .summary = "every head's previous-token, duplicate-token and induction scores, as JSON",
      .synopsis = {"[--model DIR] [--text TEXT [--no-bos]]"},
      .help = R"(Usage: headscope-cli heads [--model DIR] [--seed S]
       headscope-cli heads [--model DIR] --text TEXT [--no-bos]

Prints, for every head, the previous-token score, the duplicate-token score and the induction
score as JSON (TransformerLens definitions; see docs/head-scores.md for the exact sequences).

With --text, scores that prompt instead (BOS prepended unless --no-bos): each score is averaged
over the query positions where it applies ("query_positions" says how many), and is null when
there is none (duplicate-token and induction need a token that occurs twice).
)",
      .options = {model_option(), seed_option("chooses the random sequences of the fixed scores (default 0)"),
                  text_option("score this prompt instead"), no_bos_option(),
                  threads_option("threads for the run of --text (default: all cores)")},
      .run = heads,
  };
  return c;
}

}  // namespace hs::cli
