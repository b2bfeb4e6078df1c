// Text for people: token labels, numbers with sensible precision, durations.
#pragma once

#include <QString>

namespace hs::ui {

// Shortens a label to at most `max_chars` characters, ending with an ellipsis.
QString elideLabel(const QString& label, int max_chars);
// 0.62, 3.21, -12.4, 2.4e-07: three significant digits, scientific when very small or large.
QString formatNumber(double value);
// A signed number with an explicit "+".
QString formatSigned(double value);
// "1.8 ms", "240 ms", "1.2 s"
QString formatDuration(double ms);
// "␣sat (2)": a token label with its position.
QString tokenAt(const QString& label, int pos);
// `text` for a word-wrapping label: words longer than `long_word` characters (a tensor name, a
// path) get invisible break opportunities (U+200B) after each '.', '/', '\\' and '_', so they wrap
// between their parts rather than mid-part; shorter words are untouched. The characters shown
// are the same; copy the original text where it must be exact.
QString breakableText(const QString& text, int long_word = 24);

}  // namespace hs::ui
