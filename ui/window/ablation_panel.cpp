#include "ui/window/ablation_panel.h"

#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPushButton>
#include <QTableWidget>
#include <QVBoxLayout>

#include <algorithm>

#include "core/model/model.h"
#include "ui/controller/ablations.h"
#include "ui/controller/selection.h"
#include "ui/views/view_text.h"
#include "ui/widgets/bar_chart_view.h"
#include "ui/widgets/labels.h"

namespace hs::ui {

AblationPanel::AblationPanel(Ablations* ablations, Selection* selection, QWidget* parent)
    : QWidget(parent), ablations_(ablations), selection_(selection) {
  setObjectName(QStringLiteral("ablationPanel"));
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(8, 8, 8, 8);
  layout->setSpacing(6);

  auto* heads_title = new QLabel(QStringLiteral("<b>Ablated heads</b>"), this);
  layout->addWidget(heads_title);
  empty_ = new QLabel(QStringLiteral("None. Right-click a head in the grid to zero-ablate it (its z set to 0) or "
                                     "mean-ablate it (its z set to its mean over the prompt's positions); Ctrl+click "
                                     "picks several."),
                      this);
  empty_->setObjectName(QStringLiteral("sectionCaption"));
  empty_->setWordWrap(true);
  layout->addWidget(empty_);
  list_ = new QVBoxLayout;
  list_->setSpacing(2);
  layout->addLayout(list_);
  clear_ = new QPushButton(QStringLiteral("Remove All"), this);
  clear_->setObjectName(QStringLiteral("clearAblations"));
  connect(clear_, &QPushButton::clicked, ablations_, &Ablations::clear);
  layout->addWidget(clear_, 0, Qt::AlignLeft);

  caption_ = new QLabel(this);
  caption_->setObjectName(QStringLiteral("sectionCaption"));
  caption_->setWordWrap(true);
  layout->addSpacing(6);
  layout->addWidget(caption_);
  top_ = new QTableWidget(0, 4, this);
  top_->setObjectName(QStringLiteral("ablationTopTable"));
  top_->setHorizontalHeaderLabels({QStringLiteral("before"), QStringLiteral("p"), QStringLiteral("after"), QStringLiteral("p")});
  top_->verticalHeader()->setVisible(false);
  top_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  top_->setSelectionMode(QAbstractItemView::NoSelection);
  top_->horizontalHeader()->setSectionResizeMode(0, QHeaderView::Stretch);
  top_->horizontalHeader()->setSectionResizeMode(2, QHeaderView::Stretch);
  top_->horizontalHeader()->setSectionResizeMode(1, QHeaderView::ResizeToContents);
  top_->horizontalHeader()->setSectionResizeMode(3, QHeaderView::ResizeToContents);
  top_->setMinimumHeight(top_->verticalHeader()->defaultSectionSize() * 10 + top_->horizontalHeader()->sizeHint().height() + 4);
  top_->setMinimumWidth(200);
  top_->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  layout->addWidget(top_);
  target_ = new QLabel(this);
  target_->setObjectName(QStringLiteral("ablationTarget"));
  target_->setWordWrap(true);
  target_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  layout->addWidget(target_);
  kl_caption_ = new QLabel(this);
  kl_caption_->setObjectName(QStringLiteral("sectionCaption"));
  kl_caption_->setWordWrap(true);
  layout->addWidget(kl_caption_);
  kl_ = new BarChartView(this);
  kl_->setObjectName(QStringLiteral("ablationKlBars"));
  kl_->setValueAxisTitle(QStringLiteral("KL(plain ‖ ablated), nats"));
  kl_->setMinimumHeight(160);
  layout->addWidget(kl_, 10);
  layout->addStretch(1);  // with nothing to compare, the list stays at the top
  connect(kl_, &BarChartView::barClicked, selection_, &Selection::setPosition);

  connect(ablations_, &Ablations::changed, this, &AblationPanel::rebuildList);
  connect(selection_, &Selection::targetChanged, this, &AblationPanel::refreshComparison);
  rebuildList();
  refreshComparison();
}

void AblationPanel::setRun(std::shared_ptr<const RunResult> run) {
  run_ = std::move(run);
  refreshComparison();
}

QPushButton* AblationPanel::removeButton(int layer, int head) const {
  return findChild<QPushButton*>(QStringLiteral("removeAblation_%1").arg(headLabel(layer, head)));
}

QString AblationPanel::targetText() const { return target_->text(); }

void AblationPanel::rebuildList() {
  while (QLayoutItem* item = list_->takeAt(0)) {
    if (QWidget* w = item->widget()) {
      // Later: the click of a row's own Remove button is what got us here.
      w->hide();
      for (QPushButton* b : w->findChildren<QPushButton*>()) b->setObjectName(QString());
      w->deleteLater();
    }
    delete item;
  }
  for (const hs::Intervention& i : ablations_->list()) {
    auto* row = new QWidget(this);
    auto* h = new QHBoxLayout(row);
    h->setContentsMargins(0, 0, 0, 0);
    const bool zero = i.kind == hs::InterventionKind::Zero;
    auto* label = new QLabel(QStringLiteral("<b>%1</b> %2").arg(headLabel(i.layer, i.head),
                                                              zero ? QStringLiteral("zero-ablated (z = 0)")
                                                                   : QStringLiteral("mean-ablated (z = its mean over positions)")),
                             row);
    label->setWordWrap(true);
    auto* remove = new QPushButton(QStringLiteral("Remove"), row);
    remove->setObjectName(QStringLiteral("removeAblation_%1").arg(headLabel(i.layer, i.head)));
    remove->setToolTip(QStringLiteral("Run %1 as it is again (Ctrl+Z undoes)").arg(headLabel(i.layer, i.head)));
    connect(remove, &QPushButton::clicked, ablations_, [this, l = i.layer, hd = i.head] { ablations_->remove(l, hd); });
    h->addWidget(label, 1);
    h->addWidget(remove);
    list_->addWidget(row);
  }
  empty_->setVisible(ablations_->isEmpty());
  clear_->setVisible(!ablations_->isEmpty());
}

void AblationPanel::refreshComparison() {
  const bool have = run_ && run_->ablation && run_->baseline;
  top_->setVisible(have);
  kl_->setVisible(have);
  target_->setVisible(have);
  kl_caption_->setVisible(have);
  if (!have) {
    caption_->setText(run_ && !ablations_->isEmpty() ? QStringLiteral("Running with the ablations…")
                                                     : QStringLiteral("With heads ablated, this panel compares the run "
                                                                      "with the plain run of the same prompt."));
    top_->setRowCount(0);
    kl_->setBars({});
    return;
  }
  const RunResult& run = *run_;
  const hs::RunComparison& c = *run.ablation;
  const QString last = tokenAt(run.labels.value(c.pos), c.pos);
  caption_->setText(QStringLiteral("Next token after %1, plain run → with the ablations:").arg(last.toHtmlEscaped()));
  const int rows = static_cast<int>(std::max(c.before.size(), c.after.size()));
  top_->setRowCount(rows);
  auto cell = [this](int r, int col, const QString& text, bool highlight) {
    auto* item = new QTableWidgetItem(text);
    if (highlight) {
      QFont f = item->font();
      f.setBold(true);
      item->setFont(f);
    }
    top_->setItem(r, col, item);
  };
  // The target token: the selection's, or the plain run's top prediction.
  const int32_t target = selection_->target().value_or(c.target);
  for (int r = 0; r < rows; ++r) {
    if (r < static_cast<int>(c.before.size())) {
      const hs::Prediction& p = c.before[static_cast<size_t>(r)];
      cell(r, 0, tokenText(run, p.id), p.id == target);
      cell(r, 1, QString::number(p.probability, 'f', 3), p.id == target);
    }
    if (r < static_cast<int>(c.after.size())) {
      const hs::Prediction& p = c.after[static_cast<size_t>(r)];
      cell(r, 2, tokenText(run, p.id), p.id == target);
      cell(r, 3, QString::number(p.probability, 'f', 3), p.id == target);
    }
  }
  // Reading two logits of the runs the worker made; no computation here.
  const float before = run.baseline->logits(c.pos, target), after = run.run.cache->logits(c.pos, target);
  target_->setText(QStringLiteral("Target %1%2: logit %3 → %4 (change %5)")
                       .arg(tokenText(run, target).toHtmlEscaped(),
                            selection_->target() ? QString() : QStringLiteral(" (the plain run's prediction)"),
                            formatNumber(before), formatNumber(after), formatSigned(after - before)));
  kl_caption_->setText(QStringLiteral("KL divergence of the next-token distribution at each position, plain run ‖ "
                                      "ablated (0: the ablation changed nothing there). Click a bar to select the "
                                      "position."));
  std::vector<BarChartView::Bar> bars;
  for (int p = 0; p < run.n_pos(); ++p)
    bars.push_back({tokenAt(run.labels.value(p), p), c.kl[static_cast<size_t>(p)], QColor(0xb2, 0x18, 0x2b)});
  kl_->setBars(std::move(bars));
  kl_->setTooltipFormatter([this](int i) {
    return QStringLiteral("%1: KL = %2 nats").arg(kl_->bar(i).label, formatNumber(kl_->bar(i).value));
  });
  QStringList heads;
  for (const hs::Intervention& i : run.ablations()) {
    if (i.hook != hs::HookPoint::Z || i.head < 0) {  // an SAE splice with latent edits (SaeEdits)
      if (!heads.contains(QStringLiteral("SAE latent edits"))) heads << QStringLiteral("SAE latent edits");
      continue;
    }
    heads << headLabel(i.layer, i.head) + (i.kind == hs::InterventionKind::Zero ? QStringLiteral(" zero") : QStringLiteral(" mean"));
  }
  kl_->setFigureText({QStringLiteral("KL(plain ‖ ablated) per position: %1").arg(heads.join(QStringLiteral(", "))),
                      runSubtitle(run)},
                     QStringLiteral("ablation_kl"));
}

}  // namespace hs::ui
