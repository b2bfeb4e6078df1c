// The application's look: Fusion with a light palette, so it reads the same on every desktop
// (and under Xvfb), plus a few named styles (view titles, captions, the banner).
#pragma once

class QApplication;

namespace hs::ui {

void applyAppStyle(QApplication& app);

}  // namespace hs::ui
