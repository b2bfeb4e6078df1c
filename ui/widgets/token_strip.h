// The prompt as the model sees it: one chip per token, spaces and newlines made visible.
// Click a chip to select that position; hovering highlights it in every view.
#pragma once

#include <QStringList>
#include <QWidget>

#include <functional>
#include <vector>

namespace hs::ui {

class TokenStrip : public QWidget {
  Q_OBJECT

 public:
  explicit TokenStrip(QWidget* parent = nullptr);

  // Display labels, one per position; `bos` marks position 0 as the BOS token. Tooltips are
  // asked for when shown (a 1024-token prompt needs one, not 1024).
  void setTokens(const QStringList& labels, bool bos);
  void setTooltipProvider(std::function<QString(int pos)> provider);
  int tokenCount() const { return labels_.size(); }
  QString label(int pos) const { return labels_.value(pos); }
  // The selected chip is kept in view: when the strip sits in a QScrollArea, it scrolls to the
  // selection when that changes and when new tokens come (typing with the last token selected
  // follows the end of the prompt).
  void setSelectedPosition(int pos);
  void setHoverPosition(int pos);
  QRect chipRect(int pos) const;

  bool hasHeightForWidth() const override { return true; }
  int heightForWidth(int width) const override;
  QSize sizeHint() const override;

 Q_SIGNALS:
  void tokenClicked(int pos);
  void tokenHovered(int pos);  // -1 when leaving
  void contentHeightChanged(int height);

 protected:
  void paintEvent(QPaintEvent* event) override;
  void resizeEvent(QResizeEvent* event) override;
  void mousePressEvent(QMouseEvent* event) override;
  void mouseMoveEvent(QMouseEvent* event) override;
  void leaveEvent(QEvent* event) override;

 private:
  void layoutChips(int width, std::vector<QRect>* rects, int* height) const;
  int chipAt(const QPoint& pos) const;
  void revealSelection();  // queued: after the scroll area has taken the strip's new height

  QStringList labels_;
  std::function<QString(int)> tooltip_;
  bool bos_ = false;
  std::vector<QRect> rects_;
  int selected_ = -1;
  int hover_ = -1;
  int content_height_ = 0;
  bool reveal_queued_ = false;
};

}  // namespace hs::ui
