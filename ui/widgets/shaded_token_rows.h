// Rows of tokens, each token on a background shaded by a weight on the sequential pattern map
// (white 0 to dark 1, the fixed [0, 1] range of the attention view), one token outlined: a
// context and where one query position's attention went in it. The rows are aligned on their
// outlined token at the right end (as a concordance), so that rows compare at a glance; a row too
// long for the width loses tokens at its left, and the "…" that stands for them is shaded by
// the weight they and anything before the row took together. Painted with QPainter, so a figure
// of the widget is vector in SVG and PDF.
#pragma once

#include <QString>
#include <QStringList>
#include <QWidget>

#include <vector>

namespace hs::ui {

class ShadedTokenRows : public QWidget {
  Q_OBJECT

 public:
  struct Row {
    QString label;           // left of the tokens ("D1 · 0.53 · line 12")
    QString label_tooltip;   // the label's tooltip (what the numbers are)
    QStringList tokens;      // display text (visible whitespace)
    std::vector<float> weights;  // [token] in [0, 1]
    int outlined = -1;       // the token drawn with an outline (the query)
    float before = 0.0f;     // weight on tokens before the first one (not listed)
    bool gap_above = false;  // a little room above (a new group of rows starts)
    QString token_tooltip;   // %1: token, %2: its weight; empty: a plain "token: weight"
  };

  explicit ShadedTokenRows(QWidget* parent = nullptr);

  void setRows(std::vector<Row> rows);
  int rowCount() const { return static_cast<int>(rows_.size()); }
  const Row& row(int index) const { return rows_[static_cast<size_t>(index)]; }
  void setMessage(const QString& message);  // shown instead of rows when there are none

  QSize sizeHint() const override;
  QSize minimumSizeHint() const override;

 protected:
  void paintEvent(QPaintEvent* event) override;
  bool event(QEvent* event) override;  // tooltips

 private:
  struct Cell {
    QRectF rect;
    int row = -1, token = -1;  // token -1: the row's "…"
    float weight = 0.0f;       // the token's, or for "…" all the weight left of the chips shown
  };
  int rowHeight() const;
  // Lays out every row for the current width: where each visible token is drawn.
  std::vector<Cell> layout() const;

  std::vector<Row> rows_;
  QString message_;
};

}  // namespace hs::ui
