#include "ui/widgets/shaded_token_rows.h"

#include <QHelpEvent>
#include <QPainter>
#include <QToolTip>

#include <algorithm>
#include <cmath>

#include "ui/style/colormap.h"
#include "ui/widgets/labels.h"

namespace hs::ui {
namespace {

constexpr int kTokenChars = 12;   // a token's text is elided past this
constexpr double kRowsPadX = 2.5;     // inside a chip, each side
constexpr double kSpacing = 1.5;  // between chips
constexpr int kGap = 6;           // above a row that starts a group
constexpr int kLabelGap = 10;     // between the label column and the tokens

QString chipText(const QString& token) { return elideLabel(token, kTokenChars); }

QString ellipsis() { return QStringLiteral("…"); }

}  // namespace

ShadedTokenRows::ShadedTokenRows(QWidget* parent) : QWidget(parent) {
  setAttribute(Qt::WA_OpaquePaintEvent, false);
  setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Preferred);
}

void ShadedTokenRows::setRows(std::vector<Row> rows) {
  rows_ = std::move(rows);
  updateGeometry();
  update();
}

void ShadedTokenRows::setMessage(const QString& message) {
  message_ = message;
  update();
}

int ShadedTokenRows::rowHeight() const { return fontMetrics().height() + 5; }

QSize ShadedTokenRows::sizeHint() const {
  int h = 4;
  for (const Row& r : rows_) h += rowHeight() + (r.gap_above ? kGap : 0);
  // Narrow: in a scroll area that fits its width, a wider hint would push the query past the edge.
  return {260, std::max(h, 3 * rowHeight())};
}

QSize ShadedTokenRows::minimumSizeHint() const { return {200, sizeHint().height()}; }

std::vector<ShadedTokenRows::Cell> ShadedTokenRows::layout() const {
  std::vector<Cell> cells;
  const QFontMetricsF fm(font());
  double label_w = 0.0;
  for (const Row& r : rows_) label_w = std::max(label_w, fm.horizontalAdvance(r.label));
  const double left = label_w + kLabelGap;
  const double right = width() - 2.0;
  const double chip_h = rowHeight() - 3.0;
  double y = 2.0;
  for (int ri = 0; ri < rowCount(); ++ri) {
    const Row& r = rows_[static_cast<size_t>(ri)];
    if (r.gap_above) y += kGap;
    // From the outlined (last) token leftwards while the chips fit; "…" for the rest.
    const double ell_w = fm.horizontalAdvance(ellipsis()) + 2 * kRowsPadX;
    double x = right;
    int first = static_cast<int>(r.tokens.size());
    std::vector<Cell> row_cells;
    for (int t = static_cast<int>(r.tokens.size()) - 1; t >= 0; --t) {
      const double w = fm.horizontalAdvance(chipText(r.tokens[t])) + 2 * kRowsPadX;
      const bool more_left = t > 0 || r.before > 0.0f;
      if (x - w < left + (more_left ? ell_w + kSpacing : 0.0)) break;
      x -= w;
      row_cells.push_back({QRectF(x, y, w, chip_h), ri, t, r.weights[static_cast<size_t>(t)]});
      x -= kSpacing;
      first = t;
    }
    if (first > 0 || r.before > 0.0f) {
      float hidden = r.before;
      for (int t = 0; t < first; ++t) hidden += r.weights[static_cast<size_t>(t)];
      row_cells.push_back({QRectF(x - ell_w, y, ell_w, chip_h), ri, -1, hidden});
    }
    cells.insert(cells.end(), row_cells.begin(), row_cells.end());
    y += rowHeight();
  }
  return cells;
}

void ShadedTokenRows::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.setRenderHint(QPainter::Antialiasing, true);
  p.fillRect(rect(), palette().base());
  if (rows_.empty()) {
    p.setPen(QColor(0x50, 0x50, 0x50));
    p.drawText(rect().adjusted(8, 8, -8, -8), Qt::AlignLeft | Qt::AlignTop | Qt::TextWordWrap, message_);
    return;
  }
  // The labels, on each row's baseline.
  double y = 2.0;
  p.setPen(QColor(0x30, 0x30, 0x30));
  for (const Row& r : rows_) {
    if (r.gap_above) y += kGap;
    p.drawText(QRectF(0, y, width(), rowHeight() - 3.0), Qt::AlignLeft | Qt::AlignVCenter, r.label);
    y += rowHeight();
  }
  for (const Cell& c : layout()) {
    const Row& r = rows_[static_cast<size_t>(c.row)];
    float w = c.weight;
    const QString text = c.token < 0 ? ellipsis() : chipText(r.tokens[c.token]);
    w = std::clamp(std::isfinite(w) ? w : 0.0f, 0.0f, 1.0f);
    const QColor fill = QColor::fromRgb(colorAt(ColorMap::Sequential, w));
    p.setPen(QPen(QColor(0xd8, 0xd8, 0xd8), 0.8));
    p.setBrush(fill);
    p.drawRoundedRect(c.rect, 2.5, 2.5);
    if (c.token >= 0 && c.token == r.outlined) {
      p.setPen(QPen(accentColor(), 2.0));
      p.setBrush(Qt::NoBrush);
      p.drawRoundedRect(c.rect.adjusted(-0.5, -0.5, 0.5, 0.5), 2.5, 2.5);
    }
    p.setPen(fill.lightnessF() < 0.5 ? Qt::white : QColor(0x20, 0x20, 0x20));
    p.drawText(c.rect, Qt::AlignCenter, text);
  }
}

bool ShadedTokenRows::event(QEvent* event) {
  if (event->type() != QEvent::ToolTip) return QWidget::event(event);
  auto* help = static_cast<QHelpEvent*>(event);
  for (const Cell& c : layout()) {
    if (!c.rect.contains(help->pos())) continue;
    const Row& r = rows_[static_cast<size_t>(c.row)];
    QString text;
    if (c.token < 0) {
      text = QStringLiteral("the tokens not shown, and any before the context kept: %1 of the weight together")
                 .arg(formatNumber(c.weight));
    } else {
      const QString token = r.tokens[c.token];
      const QString weight = formatNumber(r.weights[static_cast<size_t>(c.token)]);
      text = r.token_tooltip.isEmpty() ? token + QStringLiteral(": ") + weight : r.token_tooltip.arg(token, weight);
    }
    QToolTip::showText(help->globalPos(), text, this);
    return true;
  }
  // The label column.
  double y = 2.0;
  for (const Row& r : rows_) {
    if (r.gap_above) y += kGap;
    if (help->pos().y() >= y && help->pos().y() < y + rowHeight() && !r.label_tooltip.isEmpty()) {
      QToolTip::showText(help->globalPos(), r.label_tooltip, this);
      return true;
    }
    y += rowHeight();
  }
  QToolTip::hideText();
  event->ignore();
  return true;
}

}  // namespace hs::ui
