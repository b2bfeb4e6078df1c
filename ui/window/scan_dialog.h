// File > Scan Data Set's dialog: what to scan (a text or JSON Lines file, or repeated random
// tokens), how many prompts and how many tokens at most. It only collects the choice; ScanJob runs
// it and the core says what is wrong with a file.
#pragma once

#include <QDialog>

#include "core/analysis/scan.h"

class QCheckBox;
class QComboBox;
class QLineEdit;
class QRadioButton;
class QSpinBox;

namespace hs::ui {

class ScanDialog : public QDialog {
  Q_OBJECT

 public:
  // `n_ctx`: the model's context, which bounds the token counts offered.
  explicit ScanDialog(int n_ctx, QWidget* parent = nullptr);

  hs::ScanOptions options() const;

  // The choice, as a person would make it (also for tests).
  void setInputFile(const QString& path);
  void setRepeatRandom(int length);
  void setLimit(int limit);        // 0: every line
  void setMaxTokens(int tokens);   // 0: prompts longer than the context are bad lines
  // Also describe each head over the data set (ScanOptions::heads; the Heads over Data view).
  // On by default: it costs a little time per prompt, and without it that view has nothing.
  void setDescribeHeads(bool on);
  // The units a scan can describe with dashboards (ScanOptions::units): the MLP neurons of every
  // layer or of one, and each loaded SAE's folder. "None" stays the default.
  void setUnitSources(int n_layers, const QStringList& sae_folders);
  // Chooses the item whose spec (ScanOptions::units: "", "mlp", "mlp:L", "sae:DIR") is `spec`.
  void setUnits(const QString& spec);

  void accept() override;

 private:
  void browse();
  void updateEnabled();

  QRadioButton* from_file_;
  QRadioButton* from_random_;
  QLineEdit* path_;
  QSpinBox* repeat_;
  QSpinBox* limit_;
  QSpinBox* max_tokens_;
  QCheckBox* heads_;
  QComboBox* units_;
};

}  // namespace hs::ui
