#include "ui/widgets/activation_strip.h"

#include <QContextMenuEvent>
#include <QHelpEvent>
#include <QMenu>
#include <QMouseEvent>
#include <QPainter>
#include <QToolTip>

#include <algorithm>
#include <array>
#include <cmath>

#include "ui/widgets/labels.h"

namespace hs::ui {
namespace {

constexpr int kTokenChars = 16;   // a token's text is elided past this
constexpr double kStripPadX = 3.0;     // inside a chip, each side
constexpr double kSpacing = 2.0;  // between chips and between lines
constexpr double kMargin = 2.0;

// sRGB <-> CIE Lab (D65), for mixing as colord's mix plugin does.
using Lab = std::array<double, 3>;
double toLinear(double c) { return c <= 0.04045 ? c / 12.92 : std::pow((c + 0.055) / 1.055, 2.4); }
double toGamma(double c) { return c <= 0.0031308 ? 12.92 * c : 1.055 * std::pow(c, 1 / 2.4) - 0.055; }
constexpr double kXn = 0.95047, kYn = 1.0, kZn = 1.08883;
double f(double t) { return t > 216.0 / 24389 ? std::cbrt(t) : (24389.0 / 27 * t + 16) / 116; }
double finv(double t) { return t * t * t > 216.0 / 24389 ? t * t * t : (116 * t - 16) / (24389.0 / 27); }

Lab toLab(const QColor& c) {
  const double r = toLinear(c.redF()), g = toLinear(c.greenF()), b = toLinear(c.blueF());
  const double x = (0.4124564 * r + 0.3575761 * g + 0.1804375 * b) / kXn;
  const double y = (0.2126729 * r + 0.7151522 * g + 0.0721750 * b) / kYn;
  const double z = (0.0193339 * r + 0.1191920 * g + 0.9503041 * b) / kZn;
  return {116 * f(y) - 16, 500 * (f(x) - f(y)), 200 * (f(y) - f(z))};
}

QColor fromLab(const Lab& lab) {
  const double fy = (lab[0] + 16) / 116, fx = fy + lab[1] / 500, fz = fy - lab[2] / 200;
  const double x = finv(fx) * kXn, y = finv(fy) * kYn, z = finv(fz) * kZn;
  const double r = 3.2404542 * x - 1.5371385 * y - 0.4985314 * z;
  const double g = -0.9692660 * x + 1.8760108 * y + 0.0415560 * z;
  const double b = 0.0556434 * x - 0.2040259 * y + 1.0572252 * z;
  auto channel = [](double v) { return std::clamp(toGamma(std::clamp(v, 0.0, 1.0)), 0.0, 1.0); };
  return QColor::fromRgbF(static_cast<float>(channel(r)), static_cast<float>(channel(g)), static_cast<float>(channel(b)));
}

// colord(a).mix(b, ratio): ratio 0 is a, 1 is b.
QColor mixLab(const QColor& a, const QColor& b, double ratio) {
  const Lab la = toLab(a), lb = toLab(b);
  return fromLab({la[0] * (1 - ratio) + lb[0] * ratio, la[1] * (1 - ratio) + lb[1] * ratio,
                  la[2] * (1 - ratio) + lb[2] * ratio});
}

QString chipText(const QString& token) { return elideLabel(token, kTokenChars); }

}  // namespace

ActivationStrip::ActivationStrip(QWidget* parent) : QWidget(parent) {
  QSizePolicy policy(QSizePolicy::Expanding, QSizePolicy::Preferred);
  policy.setHeightForWidth(true);
  setSizePolicy(policy);
  setMouseTracking(true);
}

QColor ActivationStrip::backgroundColor(float value, float min, float max) {
  // CircuitsVis: value > 0 mixes the positive colour with white by 1 - value / max, anything else
  // the negative colour by 1 - value / min (so 0 is white).
  const QColor blue(0, 0, 255), red(255, 0, 0), white(255, 255, 255);
  if (value > 0 && max > 0) return mixLab(blue, white, 1.0 - std::min(1.0, double{value} / max));
  if (value < 0 && min < 0) return mixLab(red, white, 1.0 - std::min(1.0, double{value} / min));
  return white;
}

void ActivationStrip::setTokens(QStringList tokens, std::vector<float> values, int outlined) {
  tokens_ = std::move(tokens);
  values_ = std::move(values);
  values_.resize(static_cast<size_t>(tokens_.size()), 0.0f);
  // One range for both signs, symmetric around 0 (as every signed quantity in HeadScope):
  // CircuitsVis scales each sign to its own extreme, which draws a GELU's -0.17 as dark as a +3.
  float extreme = 0.0f;
  for (float v : values_)
    if (std::isfinite(v)) extreme = std::max(extreme, std::abs(v));
  min_ = -extreme;
  max_ = extreme;
  outlined_ = outlined;
  updateGeometry();
  update();
}

void ActivationStrip::setOutlined(int pos) {
  if (pos == outlined_) return;
  outlined_ = pos;
  update();
}

void ActivationStrip::setMessage(const QString& message) {
  message_ = message;
  update();
}

void ActivationStrip::setFigureText(const FigureText& text, const QString& stem) {
  figure_text_ = text;
  stem_ = stem;
}

std::vector<QRectF> ActivationStrip::layout(int width) const {
  std::vector<QRectF> rects;
  rects.reserve(static_cast<size_t>(tokens_.size()));
  const QFontMetricsF fm(font());
  const double h = fm.height() + 4.0;
  double x = kMargin, y = kMargin;
  for (const QString& token : tokens_) {
    const double w = fm.horizontalAdvance(chipText(token)) + 2 * kStripPadX;
    if (x > kMargin && x + w > width - kMargin) {
      x = kMargin;
      y += h + kSpacing;
    }
    rects.emplace_back(x, y, w, h);
    x += w + kSpacing;
  }
  return rects;
}

int ActivationStrip::heightForWidth(int width) const {
  const QFontMetricsF fm(font());
  const std::vector<QRectF> rects = layout(width);
  const double bottom = rects.empty() ? fm.height() + 4.0 : rects.back().bottom();
  return static_cast<int>(std::ceil(bottom + kMargin + 1));
}

QSize ActivationStrip::sizeHint() const { return {400, heightForWidth(400)}; }
QSize ActivationStrip::minimumSizeHint() const { return {160, fontMetrics().height() + 8}; }
QSize ActivationStrip::figureSize() const { return {width(), heightForWidth(width())}; }

void ActivationStrip::paintInto(QPainter& painter, int width) const {
  painter.setRenderHint(QPainter::Antialiasing, true);
  if (tokens_.isEmpty()) {
    painter.setPen(palette().color(QPalette::PlaceholderText));
    painter.drawText(QRectF(kMargin, kMargin, width - 2 * kMargin, fontMetrics().height() + 4.0),
                     Qt::AlignLeft | Qt::AlignVCenter, message_);
    return;
  }
  painter.setFont(font());
  const std::vector<QRectF> rects = layout(width);
  for (int i = 0; i < tokens_.size(); ++i) {
    const QRectF& r = rects[static_cast<size_t>(i)];
    const QColor bg = backgroundColor(values_[static_cast<size_t>(i)], min_, max_);
    painter.setPen(Qt::NoPen);
    painter.setBrush(bg);
    painter.drawRoundedRect(r, 2, 2);
    if (i == outlined_) {
      painter.setBrush(Qt::NoBrush);
      painter.setPen(QPen(QColor(0x20, 0x20, 0x20), 2.0));
      painter.drawRoundedRect(r.adjusted(1, 1, -1, -1), 2, 2);
    }
    // colord's isDark(): perceived brightness below 0.5.
    const double brightness = (bg.redF() * 299 + bg.greenF() * 587 + bg.blueF() * 114) / 1000;
    painter.setPen(brightness < 0.5 ? Qt::white : Qt::black);
    painter.drawText(r, Qt::AlignCenter, chipText(tokens_[i]));
  }
}

void ActivationStrip::paintEvent(QPaintEvent*) {
  QPainter painter(this);
  paintInto(painter, width());
}

void ActivationStrip::paintFigure(QPainter& painter, QSize size) {
  painter.fillRect(QRect(QPoint(0, 0), size), Qt::white);
  paintInto(painter, size.width());
}

int ActivationStrip::tokenAtPoint(QPointF point) const {
  const std::vector<QRectF> rects = layout(width());
  for (size_t i = 0; i < rects.size(); ++i)
    if (rects[i].contains(point)) return static_cast<int>(i);
  return -1;
}

void ActivationStrip::mousePressEvent(QMouseEvent* event) {
  if (event->button() == Qt::LeftButton) {
    const int pos = tokenAtPoint(event->position());
    if (pos >= 0) Q_EMIT tokenClicked(pos);
  }
  QWidget::mousePressEvent(event);
}

void ActivationStrip::contextMenuEvent(QContextMenuEvent* event) {
  QMenu menu(this);
  addFigureExportActions(menu, this, *this);
  menu.exec(event->globalPos());
}

bool ActivationStrip::event(QEvent* event) {
  if (event->type() == QEvent::ToolTip) {
    auto* help = static_cast<QHelpEvent*>(event);
    const int pos = tokenAtPoint(help->pos());
    if (pos >= 0)
      QToolTip::showText(help->globalPos(),
                         tooltip_format_.arg(tokens_[pos]).arg(pos).arg(formatNumber(values_[static_cast<size_t>(pos)])),
                         this);
    else
      QToolTip::hideText();
    return true;
  }
  return QWidget::event(event);
}

}  // namespace hs::ui
