// The prompt editor: plain text, a few lines high. Enter runs at once; Shift+Enter adds a line;
// Esc hands the keyboard back to the views.
#pragma once

#include <QPlainTextEdit>

namespace hs::ui {

class PromptEdit : public QPlainTextEdit {
  Q_OBJECT

 public:
  explicit PromptEdit(QWidget* parent = nullptr);
  QSize sizeHint() const override;

 Q_SIGNALS:
  void submitted();
  void escapePressed();

 protected:
  void keyPressEvent(QKeyEvent* event) override;
};

}  // namespace hs::ui
