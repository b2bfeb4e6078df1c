// `headscope --model DIR --text TEXT --export OUTDIR`: every view's PNG, no window.
#pragma once

#include <QString>
#include <QStringList>

#include "core/model/intervention.h"
#include "ui/views/analysis_view.h"

namespace hs::ui {

struct HeadlessExportOptions {
  QString model_dir;   // empty: the built-in model
  QString text;
  QString out_dir;
  double scale = 1.0;
  int layer = 0, head = 0;  // the selected head (the views of one head or layer draw it)
  hs::Interventions ablations;  // run with these heads ablated (`--ablate`, as headscope-cli run's)
  ViewInputsById view_inputs;   // what the command line gives each view (its descriptor's options)
  bool keep_last = false;       // text longer than the context: keep BOS and its last tokens (`--keep last`)
  QStringList sae_dirs;         // sparse autoencoder folders for the features view (`--sae DIR`)
  QString sae_edits;            // their latent edits (`--sae-edit`, headscope-cli run's syntax)
};

// Needs a QApplication (the offscreen platform will do). Prints progress-free: one line on
// stdout when done, one line on stderr on failure. Returns the process exit code.
int runHeadlessExport(const HeadlessExportOptions& options);

}  // namespace hs::ui
