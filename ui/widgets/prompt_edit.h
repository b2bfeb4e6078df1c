// The prompt editor: plain text, as tall as its text (kMinLines to kMaxLines lines, then it
// scrolls). Enter runs at once; Shift+Enter adds a line; Esc hands the keyboard back to the views.
#pragma once

#include <QPlainTextEdit>

namespace hs::ui {

class PromptEdit : public QPlainTextEdit {
  Q_OBJECT

 public:
  explicit PromptEdit(QWidget* parent = nullptr);
  QSize sizeHint() const override;
  static constexpr int kMinLines = 2, kMaxLines = 8;
  // The lines the text takes at the editor's width (wrapped lines count), up to kMaxLines + 1.
  int wrappedLines() const;
  // The height for `lines` lines of text.
  int heightForLines(int lines) const;

 Q_SIGNALS:
  void submitted();
  void escapePressed();

 protected:
  void keyPressEvent(QKeyEvent* event) override;
  void resizeEvent(QResizeEvent* event) override;

 private:
  void fitHeight();
};

}  // namespace hs::ui
