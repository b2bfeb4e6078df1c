#include "ui/widgets/labels.h"

#include <cmath>

namespace hs::ui {

QString elideLabel(const QString& label, int max_chars) {
  if (label.size() <= max_chars) return label;
  return label.left(std::max(1, max_chars - 1)) + QChar(0x2026);
}

QString formatNumber(double value) {
  if (!std::isfinite(value)) return std::isnan(value) ? QStringLiteral("–") : (value > 0 ? "∞" : "−∞");
  const double a = std::fabs(value);
  if (a == 0.0) return QStringLiteral("0");
  QString text;
  if (a < 1e-3 || a >= 1e5) {
    text = QString::number(value, 'e', 1);
  } else if (a < 1.0) {
    text = QString::number(value, 'f', a < 0.01 ? 4 : (a < 0.1 ? 3 : 2));
  } else if (a < 100.0) {
    text = QString::number(value, 'f', a < 10.0 ? 2 : 1);
  } else {
    text = QString::number(value, 'f', 0);
  }
  if (text.startsWith('-')) text.replace(0, 1, QChar(0x2212));  // a real minus sign
  return text;
}

QString formatSigned(double value) {
  const QString text = formatNumber(value);
  return value > 0 ? "+" + text : text;
}

QString formatDuration(double ms) {
  if (ms < 10.0) return QString::number(ms, 'f', 1) + " ms";
  if (ms < 1000.0) return QString::number(ms, 'f', 0) + " ms";
  return QString::number(ms / 1000.0, 'f', 1) + " s";
}

QString tokenAt(const QString& label, int pos) { return QStringLiteral("%1 (%2)").arg(label).arg(pos); }

QString breakableText(const QString& text, int long_word) {
  QString out;
  out.reserve(text.size() + text.size() / 8);
  qsizetype word_start = 0;
  for (qsizetype i = 0; i <= text.size(); ++i) {
    if (i < text.size() && !text[i].isSpace()) continue;
    const QStringView word = QStringView(text).mid(word_start, i - word_start);
    if (word.size() > long_word) {
      for (qsizetype j = 0; j < word.size(); ++j) {
        out += word[j];
        const QChar c = word[j];
        if ((c == u'.' || c == u'/' || c == u'\\' || c == u'_') && j + 1 < word.size()) out += QChar(0x200B);
      }
    } else {
      out += word;
    }
    if (i < text.size()) out += text[i];
    word_start = i + 1;
  }
  return out;
}

}  // namespace hs::ui
