// `headscope --model DIR --text TEXT --export OUTDIR`: every view's PNG, no window.
#pragma once

#include <QString>

namespace hs::ui {

struct HeadlessExportOptions {
  QString model_dir;   // empty: the built-in model
  QString text;
  QString out_dir;
  double scale = 1.0;
};

// Needs a QApplication (the offscreen platform will do). Prints progress-free: one line on
// stdout when done, one line on stderr on failure. Returns the process exit code.
int runHeadlessExport(const HeadlessExportOptions& options);

}  // namespace hs::ui
