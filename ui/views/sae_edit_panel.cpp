#include "ui/views/sae_edit_panel.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QListWidget>
#include <QPushButton>
#include <QVBoxLayout>

#include "core/features/features.h"
#include "core/features/sae.h"
#include "core/model/cache.h"
#include "ui/base/background.h"
#include "ui/base/deliver.h"
#include "ui/controller/loaded_saes.h"
#include "ui/controller/sae_edits.h"
#include "ui/controller/selection.h"
#include "ui/views/units_view.h"
#include "ui/widgets/labels.h"

namespace hs::ui {

SaeEditPanel::SaeEditPanel(Selection* selection, QWidget* parent) : QWidget(parent), selection_(selection) {
  setObjectName(QStringLiteral("saeEditPanel"));
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);

  auto* edit_box = new QGroupBox(QStringLiteral("Edit the latent (SAE spliced in, error term kept)"), this);
  auto* edit_layout = new QVBoxLayout(edit_box);
  auto* row = new QHBoxLayout;
  kind_ = new QComboBox(edit_box);
  kind_->setObjectName(QStringLiteral("saeEditKind"));
  kind_->addItem(QStringLiteral("Zero"), static_cast<int>(hs::LatentEdit::Kind::Zero));
  kind_->addItem(QStringLiteral("Scale ×"), static_cast<int>(hs::LatentEdit::Kind::Scale));
  kind_->addItem(QStringLiteral("Steer +"), static_cast<int>(hs::LatentEdit::Kind::Add));
  kind_->setToolTip(QStringLiteral("Zero: the latent's activation set to 0. Scale: multiplied by the factor. Steer: "
                                   "the latent's decoder row times the strength added at the SAE's output hook."));
  value_ = new QDoubleSpinBox(edit_box);
  value_->setObjectName(QStringLiteral("saeEditValue"));
  value_->setRange(-1000, 1000);
  value_->setDecimals(2);
  value_->setValue(2.0);
  at_pos_ = new QCheckBox(QStringLiteral("only at the selected position"), edit_box);
  at_pos_->setObjectName(QStringLiteral("saeEditAtPosition"));
  apply_ = new QPushButton(QStringLiteral("Apply"), edit_box);
  apply_->setObjectName(QStringLiteral("saeEditApply"));
  row->addWidget(kind_);
  row->addWidget(value_);
  row->addWidget(at_pos_);
  row->addWidget(apply_);
  row->addStretch(1);
  edit_layout->addLayout(row);
  list_ = new QListWidget(edit_box);
  list_->setObjectName(QStringLiteral("saeEditList"));
  list_->setMaximumHeight(80);
  list_->setToolTip(QStringLiteral("Every run splices these SAEs in with their latents edited; every view shows that run."));
  edit_layout->addWidget(list_);
  auto* buttons = new QHBoxLayout;
  remove_ = new QPushButton(QStringLiteral("Remove"), edit_box);
  remove_->setObjectName(QStringLiteral("saeEditRemove"));
  clear_ = new QPushButton(QStringLiteral("Clear Edits"), edit_box);
  clear_->setObjectName(QStringLiteral("saeEditClear"));
  buttons->addWidget(remove_);
  buttons->addWidget(clear_);
  buttons->addStretch(1);
  edit_layout->addLayout(buttons);
  layout->addWidget(edit_box);

  quality_label_ = new QLabel(this);
  quality_label_->setObjectName(QStringLiteral("saeQuality"));
  quality_label_->setWordWrap(true);
  quality_label_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  layout->addWidget(quality_label_);

  connect(apply_, &QPushButton::clicked, this, &SaeEditPanel::applyEdit);
  connect(remove_, &QPushButton::clicked, this, [this] { SaeEdits::instance().removeAt(list_->currentRow()); });
  connect(clear_, &QPushButton::clicked, this, [] { SaeEdits::instance().clear(); });
  connect(kind_, qOverload<int>(&QComboBox::currentIndexChanged), this, &SaeEditPanel::refreshControls);
  connect(list_, &QListWidget::currentRowChanged, this, &SaeEditPanel::refreshControls);
  connect(&SaeEdits::instance(), &SaeEdits::changed, this, &SaeEditPanel::refreshList);
  connect(selection_, &Selection::positionChanged, this, &SaeEditPanel::refreshControls);
  refreshList();
}

SaeEditPanel::~SaeEditPanel() {
  quality_latest_->store(~quint64{0});  // queued jobs skip their work
  waitForJobs(in_flight_);  // never waitForFinished: it would run a queued job here (background.h)
}

void SaeEditPanel::setResult(std::shared_ptr<const UnitsResult> result) {
  result_ = std::move(result);
  refreshControls();
  requestQuality();
}

hs::LatentEdit SaeEditPanel::pendingEdit() const {
  hs::LatentEdit e;
  e.latent = result_ ? result_->unit : -1;
  e.kind = static_cast<hs::LatentEdit::Kind>(kind_->currentData().toInt());
  e.value = e.kind == hs::LatentEdit::Kind::Zero ? 0.0f : static_cast<float>(value_->value());
  e.pos = at_pos_->isChecked() ? selection_->position() : -1;
  return e;
}

void SaeEditPanel::applyEdit() {
  if (!result_ || !result_->base || result_->unit < 0) return;
  SaeEdits::instance().add(result_->base->sae_id, pendingEdit());
}

void SaeEditPanel::refreshControls() {
  const bool have = result_ && result_->base && result_->unit >= 0;
  const hs::LatentEdit e = pendingEdit();
  value_->setEnabled(e.kind != hs::LatentEdit::Kind::Zero);
  value_->setPrefix(e.kind == hs::LatentEdit::Kind::Scale ? QStringLiteral("×") : QString());
  apply_->setEnabled(have);
  apply_->setText(have ? QStringLiteral("Apply to latent %1%2")
                             .arg(e.latent)
                             .arg(e.pos >= 0 ? QStringLiteral(" at pos %1").arg(e.pos) : QString())
                       : QStringLiteral("Apply"));
  remove_->setEnabled(list_->currentRow() >= 0);
  clear_->setEnabled(list_->count() > 0);
}

void SaeEditPanel::refreshList() {
  list_->clear();
  for (const SaeLatentEdit& e : SaeEdits::instance().list()) list_->addItem(SaeEdits::describe(e));
  refreshControls();
}

QString SaeEditPanel::qualityText() const { return quality_label_->text(); }

// The quality of the shown SAE on the plain run of this prompt: one spliced forward pass on a
// worker (the clean run and its latents are the view's), never on the GUI thread.
void SaeEditPanel::requestQuality() {
  std::shared_ptr<const hs::ActivationCache> plain = result_ && result_->base ? result_->base->plain : nullptr;
  std::shared_ptr<const hs::Sae> sae = result_ && result_->base ? result_->base->sae : nullptr;
  if (!plain || !sae) {
    quality_.reset();
    quality_run_.reset();
    quality_sae_.reset();
    quality_label_->clear();
    return;
  }
  if (plain == quality_run_ && sae == quality_sae_) return;  // shown already, or on its way
  // Another prompt's (or SAE's) numbers are never shown beside this one.
  quality_.reset();
  quality_run_ = plain;
  quality_sae_ = sae;
  quality_label_->setText(QStringLiteral("Reconstruction on this prompt: computing…"));
  const quint64 job = ++quality_job_;
  quality_latest_->store(job);
  // Second-stage work, on the background pool's low-priority thread (background.h): on the global
  // pool at full priority it held a thread and a core the next keystroke's analyses wanted. The
  // view's latents of these rows are reused (they are sae_encode's bits, units_view.cpp), so only
  // the decoder and the spliced forward pass (logits only) are computed here.
  auto future = runInBackground([plain, sae, acts = result_->base, job,
                                  latest = quality_latest_]() -> std::shared_ptr<const hs::SaeQuality> {
    if (latest->load() != job) return nullptr;  // superseded while queued: nobody will see it
    try {
      const hs::RowMatrixXf latents = acts->acts.dense();  // [pos, d_sae]
      const hs::RowMatrixXf sae_out = hs::sae_decode(*sae, latents, hs::hook_rows(*plain, sae->hook_in));
      return std::make_shared<const hs::SaeQuality>(hs::sae_quality(*plain, *sae, latents, sae_out, 1));
    } catch (const std::exception&) {
      return nullptr;
    }
  });
  in_flight_.push_back(QFuture<void>(future));
  std::erase_if(in_flight_, [](const QFuture<void>& f) { return f.isFinished(); });
  deliverLater(future, this, [this, job](std::shared_ptr<const hs::SaeQuality> q) {
    if (job != quality_job_) return;  // another prompt or SAE was asked for since
    quality_ = q;
    if (!q) {
      quality_label_->setText(QStringLiteral("Reconstruction on this prompt: could not be computed."));
    } else {
      quality_label_->setText(
          QStringLiteral("<b>Reconstruction on this prompt</b> (%1 positions): MSE %2 · explained variance %3 · "
                         "L0 %4 · loss %5 clean, %6 with the SAE in place of the activation (no error term)")
              .arg(q->positions)
              .arg(formatNumber(q->mse), formatNumber(q->explained_variance), formatNumber(q->l0),
                   formatNumber(q->loss_clean), formatNumber(q->loss_spliced)));
    }
    Q_EMIT qualityReady();
  });
}

}  // namespace hs::ui
