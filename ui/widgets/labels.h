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

}  // namespace hs::ui
