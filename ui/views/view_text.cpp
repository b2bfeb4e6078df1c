#include "ui/views/view_text.h"

#include "core/model/model.h"
#include "ui/widgets/labels.h"

namespace hs::ui {

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

}  // namespace hs::ui
