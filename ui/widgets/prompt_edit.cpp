#include "ui/widgets/prompt_edit.h"

#include <QKeyEvent>
#include <QTextBlock>
#include <QTextLayout>

#include <algorithm>

namespace hs::ui {

PromptEdit::PromptEdit(QWidget* parent) : QPlainTextEdit(parent) {
  setTabChangesFocus(true);
  setLineWrapMode(QPlainTextEdit::WidgetWidth);
  setPlaceholderText(QStringLiteral("Type a sentence… (Enter runs it now; Shift+Enter adds a line)"));
  setFixedHeight(heightForLines(kMinLines));
  setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Fixed);
  connect(document(), &QTextDocument::contentsChanged, this, &PromptEdit::fitHeight);
}

QSize PromptEdit::sizeHint() const { return QSize(600, height()); }

int PromptEdit::heightForLines(int lines) const {
  return fontMetrics().lineSpacing() * lines + 2 * static_cast<int>(document()->documentMargin()) + frameWidth() * 2 + 4;
}

int PromptEdit::wrappedLines() const {
  // Laid out here at the viewport's width, as the editor wraps (QPlainTextEdit lays out only the
  // blocks it shows, so its own line count is not yet known for the rest).
  const qreal width = viewport()->width() - 2 * document()->documentMargin();
  if (width <= 10) return kMinLines;
  QTextOption option = document()->defaultTextOption();
  option.setWrapMode(QTextOption::WrapAtWordBoundaryOrAnywhere);
  int lines = 0;
  for (QTextBlock block = document()->begin(); block.isValid() && lines <= kMaxLines; block = block.next()) {
    QTextLayout layout(block.text(), font());
    layout.setTextOption(option);
    layout.beginLayout();
    int in_block = 0;
    for (QTextLine line = layout.createLine(); line.isValid() && lines + in_block <= kMaxLines; line = layout.createLine()) {
      line.setLineWidth(width);
      ++in_block;
    }
    layout.endLayout();
    lines += std::max(1, in_block);
  }
  return lines;
}

void PromptEdit::fitHeight() {
  // Grows a line at a time with the text, from kMinLines up to kMaxLines; past that it scrolls.
  const int h = heightForLines(std::clamp(wrappedLines(), kMinLines, kMaxLines));
  if (h != height()) {
    setFixedHeight(h);
    ensureCursorVisible();
  }
}

void PromptEdit::resizeEvent(QResizeEvent* event) {
  QPlainTextEdit::resizeEvent(event);
  fitHeight();  // a new width wraps the text again; the height it sets changes no width
}

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
