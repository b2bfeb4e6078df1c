#include "ui/widgets/prompt_edit.h"

#include <QKeyEvent>

namespace hs::ui {

PromptEdit::PromptEdit(QWidget* parent) : QPlainTextEdit(parent) {
  setTabChangesFocus(true);
  setLineWrapMode(QPlainTextEdit::WidgetWidth);
  setPlaceholderText(QStringLiteral("Type a sentence… (Enter runs it now; Shift+Enter adds a line)"));
  const int lines = 2;
  const int h = fontMetrics().lineSpacing() * lines + 2 * static_cast<int>(document()->documentMargin()) + frameWidth() * 2 + 4;
  setFixedHeight(h);
  setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Fixed);
}

QSize PromptEdit::sizeHint() const { return QSize(600, height()); }

void PromptEdit::keyPressEvent(QKeyEvent* event) {
  if ((event->key() == Qt::Key_Return || event->key() == Qt::Key_Enter) && !(event->modifiers() & Qt::ShiftModifier)) {
    Q_EMIT submitted();
    event->accept();
    return;
  }
  if (event->key() == Qt::Key_Escape) {
    Q_EMIT escapePressed();
    event->accept();
    return;
  }
  QPlainTextEdit::keyPressEvent(event);
}

}  // namespace hs::ui
