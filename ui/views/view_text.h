// Words the views share: head labels, figure subtitles, token descriptions.
#pragma once

#include <QString>

#include <functional>
#include <initializer_list>
#include <optional>
#include <vector>

#include "core/analysis/attribution_data.h"
#include "ui/controller/results.h"

class QLabel;
class QWidget;

namespace hs::ui {

// A word-wrapping caption above a section of a view (object name "sectionCaption").
QLabel* sectionCaption(QWidget* parent);

class TargetPicker;

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
// What a person typed for a token, in the tokenizer's own text: the visible-whitespace marks
// (␣ ↵ ⇥) mean the characters they stand for.
QString typedTokenText(QString text);
// The one token `typed` encodes to (no BOS), or nullopt with `error` saying why ("“x y” is 2
// tokens (x + ␣y); type a single token.").
std::optional<int32_t> typedSingleToken(const RunResult& run, const QString& typed, QString* error);
// A target picker's items for `run`: `none` (meaning "no target"), then `choices` with their
// probabilities, then `target` when it is not among them; the current item is the target's (or
// `none` without one).
void setTargetChoices(TargetPicker& picker, const RunResult& run, const QString& none,
                      const std::vector<hs::Prediction>& choices, std::optional<int32_t> target);
// The pickers of the views that explain a logit or a logit difference (Attribution, Neurons,
// Features): the target's items ("predicted: ..." meaning no target, then `top`) and the second
// token's ("— (the logit alone)", then `top`), each showing `metric`'s choice.
void setTargetPairChoices(TargetPicker& target, TargetPicker& versus, const RunResult& run,
                          const std::vector<hs::Prediction>& top, const hs::TargetMetric& metric);
// Each picker resolves typed text to a single token of the run `run()` gives (nullptr: none yet).
void resolveTypedTokens(std::initializer_list<TargetPicker*> pickers, std::function<const RunResult*()> run);

}  // namespace hs::ui
