// Words the views share: head labels, figure subtitles, token descriptions.
#pragma once

#include <QString>

#include "ui/controller/results.h"

namespace hs::ui {

// "L3H7"
QString headLabel(int layer, int head);
// "headscope-tiny · “The cat sat on the mat.” · 12 tokens"
QString runSubtitle(const RunResult& run);
// The prompt shortened for titles, in quotes.
QString quotedPrompt(const QString& text, int max_chars = 60);
// "␣mat (p = 0.41)"
QString predictionText(const RunResult& run, const hs::Prediction& p);
// A token's display label by id, from the run's model.
QString tokenText(const RunResult& run, int32_t id);

}  // namespace hs::ui
