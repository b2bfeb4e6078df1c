#include "ui/views/head_metrics_bar.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QSettings>
#include <QSignalBlocker>
#include <QVBoxLayout>

#include <cmath>

#include "ui/views/head_overview.h"
#include "ui/views/view_text.h"
#include "ui/widgets/color_legend.h"
#include "ui/widgets/image_grid_view.h"

namespace hs::ui {
namespace {

const char* kDefaultMetric = "induction";
constexpr double kDefaultThreshold = 0.4;

}  // namespace

HeadMetricsBar::HeadMetricsBar(ImageGridView* grid, QWidget* parent) : QWidget(parent), grid_(grid) {
  setObjectName(QStringLiteral("headMetricsBar"));
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->setSpacing(4);

  top_ = new QHBoxLayout;
  top_->setSpacing(6);
  options_ = new QHBoxLayout;
  options_->setSpacing(6);
  label_ = new QLabel(QStringLiteral("&Scores:"), this);
  combo_ = new QComboBox(this);
  combo_->setObjectName(QStringLiteral("headMetricCombo"));
  combo_->setSizeAdjustPolicy(QComboBox::AdjustToContents);
  // Clicks only: arrow keys belong to the window (they move through the heads).
  combo_->setFocusPolicy(Qt::ClickFocus);
  label_->setBuddy(combo_);
  sort_ = new QCheckBox(QStringLiteral("Sort"), this);
  sort_->setObjectName(QStringLiteral("headMetricSort"));
  sort_->setToolTip(QStringLiteral("Show the heads highest score first (no score last); each keeps its L·H label"));
  sort_->setFocusPolicy(Qt::ClickFocus);
  filter_ = new QCheckBox(QStringLiteral("Only ≥"), this);
  filter_->setObjectName(QStringLiteral("headMetricFilter"));
  filter_->setToolTip(QStringLiteral("Show only the heads whose score is at least this"));
  filter_->setFocusPolicy(Qt::ClickFocus);
  threshold_ = new QDoubleSpinBox(this);
  threshold_->setObjectName(QStringLiteral("headMetricThreshold"));
  threshold_->setDecimals(2);
  threshold_->setSingleStep(0.05);
  threshold_->setRange(0.0, 1.0);
  threshold_->setValue(kDefaultThreshold);
  threshold_->setFocusPolicy(Qt::ClickFocus);
  top_->addWidget(label_);
  top_->addWidget(combo_, 1);
  layout->addLayout(top_);
  layout->addLayout(options_);
  placeOptions(false);

  legend_ = new ColorLegend(this);
  legend_->setObjectName(QStringLiteral("headMetricLegend"));
  legend_->setSwatch(headMetricColor(HeadMetric{}, NAN), QStringLiteral("—"), QStringLiteral("no score"));
  layout->addWidget(legend_);
  note_ = new QLabel(this);
  note_->setObjectName(QStringLiteral("sectionCaption"));
  note_->setWordWrap(true);
  layout->addWidget(note_);

  rebuildCombo();
  const int start = combo_->findData(QString::fromLatin1(kDefaultMetric));
  combo_->setCurrentIndex(start >= 0 ? start : 0);
  grid_->setTooltipProvider([this](int index) { return tooltipFor(index); });
  connect(combo_, qOverload<int>(&QComboBox::currentIndexChanged), this, &HeadMetricsBar::onChoiceChanged);
  connect(sort_, &QCheckBox::toggled, this, &HeadMetricsBar::onChoiceChanged);
  connect(filter_, &QCheckBox::toggled, this, &HeadMetricsBar::onChoiceChanged);
  connect(threshold_, qOverload<double>(&QDoubleSpinBox::valueChanged), this, [this] {
    if (filter_->isChecked()) onChoiceChanged();
  });
  onChoiceChanged();
}

void HeadMetricsBar::placeOptions(bool beside) {
  // Beside the combo when the panel is wide enough (more room for the thumbnails), else on a row
  // of their own (a model with few heads gets a narrow panel).
  if (options_placed_ && beside == options_beside_) return;
  options_placed_ = true;
  options_beside_ = beside;
  QHBoxLayout* to = beside ? top_ : options_;
  for (QWidget* w : {static_cast<QWidget*>(sort_), static_cast<QWidget*>(filter_), static_cast<QWidget*>(threshold_)}) {
    top_->removeWidget(w);
    options_->removeWidget(w);
    to->addWidget(w);
  }
  if (!beside) options_->addStretch(1);
  else
    while (QLayoutItem* item = options_->takeAt(0)) delete item;  // the stretch
}

QSize HeadMetricsBar::minimumSizeHint() const {
  const int choice = label_->sizeHint().width() + 6 + combo_->minimumSizeHint().width();
  const int options = sort_->sizeHint().width() + filter_->sizeHint().width() + threshold_->sizeHint().width() + 12;
  return QSize(std::max(choice, options), QWidget::minimumSizeHint().height());
}

void HeadMetricsBar::resizeEvent(QResizeEvent* event) {
  QWidget::resizeEvent(event);
  const int wanted = label_->sizeHint().width() + combo_->sizeHint().width() + sort_->sizeHint().width() +
                     filter_->sizeHint().width() + threshold_->sizeHint().width() + 4 * 6;
  placeOptions(width() >= wanted);
}

void HeadMetricsBar::rebuildCombo() {
  const QString current = metricId();
  QSignalBlocker block(combo_);
  combo_->clear();
  combo_->addItem(QStringLiteral("none"), QString());
  combo_->setItemData(0, QStringLiteral("Thumbnails only"), Qt::ToolTipRole);
  for (const HeadMetric& m : headMetrics()) {
    // An External metric is listed once someone has handed over its values.
    if (m.source == HeadMetric::Source::External && !external_.count(m.id)) continue;
    combo_->addItem(m.name, m.id);
    combo_->setItemData(combo_->count() - 1, m.definition, Qt::ToolTipRole);
  }
  const int index = combo_->findData(current);
  combo_->setCurrentIndex(index >= 0 ? index : 0);
}

QString HeadMetricsBar::metricId() const { return combo_->currentData().toString(); }

void HeadMetricsBar::setMetricId(const QString& id) {
  const int index = combo_->findData(id);
  combo_->setCurrentIndex(index >= 0 ? index : 0);
}

bool HeadMetricsBar::sorted() const { return sort_->isChecked(); }
void HeadMetricsBar::setSorted(bool sorted) { sort_->setChecked(sorted); }

std::optional<float> HeadMetricsBar::threshold() const {
  if (!filter_->isChecked()) return std::nullopt;
  return static_cast<float>(threshold_->value());
}

void HeadMetricsBar::setThreshold(std::optional<float> threshold) {
  {
    QSignalBlocker block(threshold_);
    if (threshold) threshold_->setValue(*threshold);
  }
  if (filter_->isChecked() != threshold.has_value())
    filter_->setChecked(threshold.has_value());  // redraws
  else
    onChoiceChanged();
}

void HeadMetricsBar::restoreSettings() {
  QSettings settings;
  if (settings.contains(QStringLiteral("heads/metric"))) setMetricId(settings.value(QStringLiteral("heads/metric")).toString());
  setSorted(settings.value(QStringLiteral("heads/sorted"), false).toBool());
  const float threshold = settings.value(QStringLiteral("heads/threshold"), kDefaultThreshold).toFloat();
  if (settings.value(QStringLiteral("heads/filter"), false).toBool())
    setThreshold(threshold);
  else
    threshold_->setValue(threshold);
}

void HeadMetricsBar::saveSettings() const {
  QSettings settings;
  settings.setValue(QStringLiteral("heads/metric"), metricId());
  settings.setValue(QStringLiteral("heads/sorted"), sorted());
  settings.setValue(QStringLiteral("heads/filter"), filter_->isChecked());
  settings.setValue(QStringLiteral("heads/threshold"), threshold_->value());
}

void HeadMetricsBar::setExternalValues(HeadMetricValues values) {
  if (!findHeadMetric(values.id)) return;  // only registered metrics have a name, a range and colours
  const bool is_new = !external_.count(values.id);
  external_[values.id] = std::move(values);
  if (is_new) rebuildCombo();
  refresh();
}

void HeadMetricsBar::clearExternalValues(const QString& id) {
  if (!external_.erase(id)) return;
  rebuildCombo();
  onChoiceChanged();
}

const HeadMetricValues* HeadMetricsBar::valuesFor(const QString& id) const {
  if (!run_) return nullptr;
  if (const auto it = external_.find(id); it != external_.end())
    return it->second.model.empty() || it->second.model == run_->model().fingerprint() ? &it->second : nullptr;
  return run_->headMetric(id);
}

const HeadMetricValues* HeadMetricsBar::currentValues() const {
  const QString id = metricId();
  return id.isEmpty() ? nullptr : valuesFor(id);
}

void HeadMetricsBar::onChoiceChanged() {
  const HeadMetric* metric = findHeadMetric(metricId());
  sort_->setEnabled(metric != nullptr);
  filter_->setEnabled(metric != nullptr);
  threshold_->setEnabled(metric != nullptr && filter_->isChecked());
  legend_->setVisible(metric != nullptr);
  note_->setVisible(metric != nullptr);
  if (metric && metric->source == HeadMetric::Source::Model && !modelMetricWanted(metric->id)) {
    wantModelMetric(metric->id);
    if (run_) Q_EMIT runWanted();  // the next run computes it: ask for one now
  }
  if (metric) {
    legend_->setScale(metric->colors, metric->name,
                      QString::number(metric->low, 'g', 3), QString::number(metric->high, 'g', 3));
    legend_->setToolTip(metric->definition);
    combo_->setToolTip(metric->definition);
    QSignalBlocker block(threshold_);
    threshold_->setRange(metric->low, metric->high);
  } else {
    combo_->setToolTip(QStringLiteral("Choose a per-head score to show on every thumbnail"));
  }
  refresh();
  Q_EMIT changed();
}

void HeadMetricsBar::refresh() {
  if (!run_) return;
  HeadBadges badges;
  badges.metric = findHeadMetric(metricId());
  badges.values = currentValues();
  badges.sorted = sorted();
  badges.threshold = threshold();
  showHeadOverview(*grid_, *run_, false, badges);
  if (!badges.metric) return;
  QString note = badges.values ? badges.values->note : QStringLiteral("no values for this model");
  if (const auto it = external_.find(metricId()); !badges.values && it != external_.end())
    note = QStringLiteral("no values for this model: the data-set scores were made with another model (%1, "
                          "whose files differ from this one's); File > Scan Data Set scans this one")
               .arg(it->second.model_name);
  if (badges.threshold && badges.values) {
    int shown = 0;
    for (int index : grid_->displayOrder()) shown += index >= 0 ? 1 : 0;
    note += QStringLiteral(" · %1 of %2 heads ≥ %3")
                .arg(shown)
                .arg(grid_->itemCount())
                .arg(QString::number(*badges.threshold, 'f', badges.metric->decimals));
  }
  note_->setText(note);  // QLabel ignores an unchanged text: typing rarely relays it out
}

void HeadMetricsBar::setRun(std::shared_ptr<const RunResult> run) {
  run_ = std::move(run);
  refresh();
}

QString HeadMetricsBar::tooltipFor(int index) const {
  if (!run_ || run_->n_head() == 0) return {};
  const int l = index / run_->n_head(), h = index % run_->n_head();
  QStringList lines{QStringLiteral("%1 — click to show its pattern").arg(headLabel(l, h))};
  for (const HeadMetric& m : headMetrics()) {
    const HeadMetricValues* v = valuesFor(m.id);
    if (!v || v->values.rows() != run_->n_layer() || v->values.cols() != run_->n_head()) continue;
    const float x = v->values(l, h);
    lines << QStringLiteral("%1: %2").arg(m.name, std::isnan(x) ? QStringLiteral("no score") : headMetricText(m, x));
  }
  return lines.join(QLatin1Char('\n'));
}

}  // namespace hs::ui
