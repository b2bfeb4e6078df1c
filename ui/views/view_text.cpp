#include "ui/views/view_text.h"

#include <QLabel>

#include "core/model/model.h"
#include "ui/widgets/labels.h"
#include "ui/widgets/target_picker.h"

namespace hs::ui {

QLabel* sectionCaption(QWidget* parent) {
  auto* label = new QLabel(parent);
  label->setObjectName(QStringLiteral("sectionCaption"));
  label->setWordWrap(true);
  return label;
}

QString headLabel(int layer, int head) { return QStringLiteral("L%1H%2").arg(layer).arg(head); }

QString quotedPrompt(const QString& text, int max_chars) {
  QString flat = text;
  flat.replace('\n', QChar(0x21b5));
  return QChar(0x201c) + elideLabel(flat, max_chars) + QChar(0x201d);
}

QString runSubtitle(const RunResult& run) {
  return QStringLiteral("%1 · %2 · %3 tokens")
      .arg(QString::fromStdString(run.model().name()), quotedPrompt(QString::fromStdString(run.run.text)))
      .arg(run.n_pos());
}

QString tokenText(const RunResult& run, int32_t id) {
  try {
    return QString::fromStdString(run.model().tokenizer().display(id));
  } catch (const std::exception&) {
    return QStringLiteral("#%1").arg(id);
  }
}

QString predictionText(const RunResult& run, const hs::Prediction& p) {
  return QStringLiteral("%1 (p = %2)").arg(tokenText(run, p.id), QString::number(p.probability, 'f', 2));
}

QString typedTokenText(QString text) {
  text.replace(QChar(0x2423), ' ');   // ␣
  text.replace(QChar(0x21b5), '\n');  // ↵
  text.replace(QChar(0x21e5), '\t');  // ⇥
  return text;
}

std::optional<int32_t> typedSingleToken(const RunResult& run, const QString& typed, QString* error) {
  std::vector<int32_t> ids;
  try {
    ids = run.model().encode(typedTokenText(typed).toStdString(), false);
  } catch (const std::exception& e) {
    *error = QString::fromStdString(e.what());
    return std::nullopt;
  }
  if (ids.size() == 1) return ids.front();
  QStringList pieces;
  for (int32_t id : ids) pieces << tokenText(run, id);
  *error = ids.empty() ? QStringLiteral("Type a token.")
                       : QStringLiteral("“%1” is %2 tokens (%3); type a single token.")
                             .arg(typed)
                             .arg(ids.size())
                             .arg(pieces.join(QStringLiteral(" + ")));
  return std::nullopt;
}

void setTargetChoices(TargetPicker& picker, const RunResult& run, const QString& none,
                      const std::vector<hs::Prediction>& choices, std::optional<int32_t> target) {
  std::vector<TargetPicker::Choice> items;
  for (const hs::Prediction& p : choices) items.push_back({predictionText(run, p), p.id});
  std::optional<TargetPicker::Choice> current;
  if (target) current = TargetPicker::Choice{tokenText(run, *target), *target};
  picker.setChoices(none, items, current);
}

void setTargetPairChoices(TargetPicker& target, TargetPicker& versus, const RunResult& run,
                          const std::vector<hs::Prediction>& top, const hs::TargetMetric& metric) {
  const QString predicted = top.empty() ? QStringLiteral("–") : predictionText(run, top.front());
  setTargetChoices(target, run, QStringLiteral("predicted: %1").arg(predicted), top,
                   metric.target_is_prediction ? std::nullopt : std::optional<int32_t>(metric.target));
  setTargetChoices(versus, run, QStringLiteral("— (the logit alone)"), top, metric.versus);
}

void resolveTypedTokens(std::initializer_list<TargetPicker*> pickers, std::function<const RunResult*()> run) {
  for (TargetPicker* picker : pickers)
    picker->setResolver([run](const QString& typed, QString* error) -> std::optional<int32_t> {
      const RunResult* r = run();
      return r ? typedSingleToken(*r, typed, error) : std::nullopt;
    });
}

}  // namespace hs::ui
