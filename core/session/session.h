// The one face the GUI and the CLI use: find and load models, turn text into a run.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/model/model.h"

namespace hs {

// Where the built-in model lives: $HEADSCOPE_MODEL_DIR when set, else beside the executable
// (<exe_dir>/../share/headscope/models/headscope-tiny after install, or the build tree's copy),
// else the source tree's resources/models/headscope-tiny. Throws hs::Error listing where it looked.
std::filesystem::path builtin_model_dir();
// The running executable's folder (from /proc/self/exe).
std::filesystem::path executable_dir();

// What to do with text longer than the model's context.
enum class OverlongPolicy {
  Refuse,
  TruncateWithWarning,  // keep the first n_ctx tokens (BOS included), with a warning
  KeepLastWithWarning,  // keep BOS (when prepended) and the last tokens that fit, with a warning: the
                        // end of a long paste, where typing happens, stays in the run
};

struct TextRunOptions {
  bool prepend_bos = true;
  OverlongPolicy overlong = OverlongPolicy::Refuse;
  RunOptions run;
  // An earlier run of the same model: when the new tokens extend its tokens, the shared prefix
  // is reused instead of recomputed (typing at the end of the prompt recomputes one position).
  std::shared_ptr<const ActivationCache> previous;
};

struct TextRun {
  std::shared_ptr<const Model> model;
  std::shared_ptr<const ActivationCache> cache;
  std::string text;
  std::vector<int32_t> tokens;             // as run (BOS first when prepended)
  std::vector<std::string> token_labels;   // display strings, visible whitespace
  bool bos_prepended = false;
  int dropped_tokens = 0;                  // > 0 when truncated
  bool dropped_from_start = false;         // KeepLastWithWarning: the dropped tokens were the first ones
                                           // after BOS, not the last ones
  double tokenize_ms = 0.0;
  double forward_ms = 0.0;
  std::vector<std::string> warnings;       // truncation, non-finite activations, ...
};

// Tokenizes and runs. Throws hs::Error (invalid UTF-8, too long under Refuse, empty prompt).
TextRun run_text(std::shared_ptr<const Model> model, std::string_view text, const TextRunOptions& options = {});
// Runs given ids exactly.
TextRun run_tokens(std::shared_ptr<const Model> model, std::vector<int32_t> tokens, const RunOptions& options = {},
                   std::shared_ptr<const ActivationCache> previous = nullptr);

// Labels for views: the tokenizer's display string of each id, a character split across tokens
// named in each of them (hs::display_in_context).
std::vector<std::string> token_labels(const Model& model, const std::vector<int32_t>& tokens);

}  // namespace hs
