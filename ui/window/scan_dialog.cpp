#include "ui/window/scan_dialog.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDialogButtonBox>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QMessageBox>
#include <QPushButton>
#include <QRadioButton>
#include <QSettings>
#include <QSpinBox>
#include <QVBoxLayout>

namespace hs::ui {

ScanDialog::ScanDialog(int n_ctx, QWidget* parent) : QDialog(parent) {
  setWindowTitle(QStringLiteral("Scan Data Set"));
  setObjectName(QStringLiteral("scanDialog"));
  auto* layout = new QVBoxLayout(this);
  auto* intro = new QLabel(QStringLiteral("Runs every prompt through the model (several to a pass; one at a time with "
                                          "unit dashboards) and shows each head's mean score over the data set in "
                                          "the head grid (Scores: … (data set)); "
                                          "with “Describe each head”, the Heads over Data view describes every head."),
                           this);
  intro->setWordWrap(true);
  layout->addWidget(intro);

  from_file_ = new QRadioButton(QStringLiteral("A file: one prompt a line, or JSON Lines with a \"text\" field"), this);
  from_file_->setObjectName(QStringLiteral("scanFromFile"));
  from_file_->setChecked(true);
  layout->addWidget(from_file_);
  auto* file_row = new QHBoxLayout;
  path_ = new QLineEdit(this);
  path_->setObjectName(QStringLiteral("scanPath"));
  path_->setPlaceholderText(QStringLiteral("prompts.txt or prompts.jsonl"));
  auto* browse = new QPushButton(QStringLiteral("Browse…"), this);
  connect(browse, &QPushButton::clicked, this, &ScanDialog::browse);
  file_row->addWidget(path_);
  file_row->addWidget(browse);
  layout->addLayout(file_row);

  from_random_ = new QRadioButton(QStringLiteral("Repeated random tokens: BOS + R + R (as the fixed induction scores)"), this);
  from_random_->setObjectName(QStringLiteral("scanFromRandom"));
  layout->addWidget(from_random_);

  auto* form = new QFormLayout;
  repeat_ = new QSpinBox(this);
  repeat_->setObjectName(QStringLiteral("scanRepeat"));
  repeat_->setRange(2, std::max(2, (n_ctx - 1) / 2));
  repeat_->setValue(std::min(50, repeat_->maximum()));
  repeat_->setSuffix(QStringLiteral(" tokens in R"));
  form->addRow(QStringLiteral("Length of R:"), repeat_);
  limit_ = new QSpinBox(this);
  limit_->setObjectName(QStringLiteral("scanLimit"));
  limit_->setRange(0, 100000000);
  limit_->setSpecialValueText(QStringLiteral("every line"));
  form->addRow(QStringLiteral("Prompts:"), limit_);
  max_tokens_ = new QSpinBox(this);
  max_tokens_->setObjectName(QStringLiteral("scanMaxTokens"));
  max_tokens_->setRange(0, n_ctx);
  max_tokens_->setSpecialValueText(QStringLiteral("no cut (longer than the context: skipped)"));
  form->addRow(QStringLiteral("Cut prompts to:"), max_tokens_);
  layout->addLayout(form);

  heads_ = new QCheckBox(QStringLiteral("Describe each head (attention by distance, top tokens, entropy, examples)"), this);
  heads_->setObjectName(QStringLiteral("scanHeads"));
  heads_->setToolTip(QStringLiteral("Also keeps, for every head, where its attention goes by distance, which tokens it "
                                    "reads from and looks from, how spread its patterns are, and example contexts "
                                    "from each decile of its output norm: the Heads over Data view shows them. "
                                    "Makes the scan somewhat slower."));
  heads_->setChecked(QSettings().value(QStringLiteral("scan/heads"), true).toBool());
  layout->addWidget(heads_);

  auto* units_form = new QFormLayout;
  units_ = new QComboBox(this);
  units_->setObjectName(QStringLiteral("scanUnits"));
  units_->setToolTip(QStringLiteral("Also describes every unit of one source over the data set, as Neuronpedia's "
                                    "feature dashboards do (frequency, histogram, top and quantile examples, logit "
                                    "effects): the Neurons and Features views show the chosen unit's. Written as a "
                                    "folder (headscope-cli scan --units, docs/scan.md) and opened when done."));
  units_->addItem(QStringLiteral("none"), QString());
  units_form->addRow(QStringLiteral("Unit dashboards:"), units_);
  layout->addLayout(units_form);

  auto* buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel, this);
  buttons->button(QDialogButtonBox::Ok)->setText(QStringLiteral("Scan"));
  connect(buttons, &QDialogButtonBox::accepted, this, &ScanDialog::accept);
  connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
  layout->addWidget(buttons);

  connect(from_file_, &QRadioButton::toggled, this, &ScanDialog::updateEnabled);
  QSettings settings;
  path_->setText(settings.value(QStringLiteral("scan/lastFile")).toString());
  updateEnabled();
}

void ScanDialog::updateEnabled() {
  const bool file = from_file_->isChecked();
  path_->setEnabled(file);
  repeat_->setEnabled(!file);
  max_tokens_->setEnabled(file);
  limit_->setSpecialValueText(file ? QStringLiteral("every line") : QStringLiteral("10 (the fixed scores' batch)"));
}

void ScanDialog::browse() {
  const QString path = QFileDialog::getOpenFileName(this, QStringLiteral("Scan Data Set"), path_->text(),
                                                    QStringLiteral("Prompts (*.txt *.jsonl);;All files (*)"));
  if (!path.isEmpty()) path_->setText(path);
}

void ScanDialog::setInputFile(const QString& path) {
  from_file_->setChecked(true);
  path_->setText(path);
}
void ScanDialog::setRepeatRandom(int length) {
  from_random_->setChecked(true);
  repeat_->setValue(length);
}
void ScanDialog::setLimit(int limit) { limit_->setValue(limit); }
void ScanDialog::setMaxTokens(int tokens) { max_tokens_->setValue(tokens); }
void ScanDialog::setDescribeHeads(bool on) { heads_->setChecked(on); }

void ScanDialog::setUnitSources(int n_layers, const QStringList& sae_folders) {
  units_->clear();
  units_->addItem(QStringLiteral("none"), QString());
  units_->addItem(QStringLiteral("MLP neurons of every layer"), QStringLiteral("mlp"));
  for (int l = 0; l < n_layers; ++l)
    units_->addItem(QStringLiteral("MLP neurons of layer %1").arg(l), QStringLiteral("mlp:%1").arg(l));
  for (const QString& folder : sae_folders)
    units_->addItem(QStringLiteral("SAE %1").arg(QFileInfo(folder).fileName()), QStringLiteral("sae:") + folder);
}

void ScanDialog::setUnits(const QString& spec) {
  const int i = units_->findData(spec);
  if (i >= 0) units_->setCurrentIndex(i);
}

void ScanDialog::accept() {
  if (from_file_->isChecked() && path_->text().trimmed().isEmpty()) {
    QMessageBox::information(this, QStringLiteral("Scan Data Set"),
                             QStringLiteral("Choose the file to scan (Browse…), or choose repeated random tokens."));
    return;
  }
  if (from_file_->isChecked()) QSettings().setValue(QStringLiteral("scan/lastFile"), path_->text().trimmed());
  QSettings().setValue(QStringLiteral("scan/heads"), heads_->isChecked());
  QDialog::accept();
}

hs::ScanOptions ScanDialog::options() const {
  hs::ScanOptions o;
  o.heads = heads_->isChecked();
  o.units = units_->currentData().toString().toStdString();
  if (from_file_->isChecked()) {
    o.input = path_->text().trimmed().toStdString();
    o.limit = limit_->value() > 0 ? limit_->value() : -1;
    o.max_tokens = max_tokens_->value();
  } else {
    o.repeat_random = repeat_->value();
    o.limit = limit_->value() > 0 ? limit_->value() : 10;
  }
  return o;
}

}  // namespace hs::ui
