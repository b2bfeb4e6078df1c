#include "ui/views/head_dataset_view.h"

#include <QComboBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QScrollArea>
#include <QSplitter>
#include <QTableWidget>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/analysis/head_dataset.h"
#include "core/analysis/scan.h"
#include "core/model/model.h"
#include "ui/controller/head_metrics.h"
#include "ui/controller/selection.h"
#include "ui/style/colormap.h"
#include "ui/views/view_text.h"
#include "ui/widgets/bar_chart_view.h"
#include "ui/widgets/labels.h"
#include "ui/widgets/refresh_when_shown.h"
#include "ui/widgets/scatter_view.h"
#include "ui/widgets/shaded_token_rows.h"

namespace hs::ui {
namespace {

const QString kCopying = QStringLiteral("copying");  // the heads panel's Model metric (head_metrics.cpp)
const QString kInputX = QStringLiteral("head-data-x");
const QString kInputY = QStringLiteral("head-data-y");

QString modelName(const nlohmann::json& settings) {
  const nlohmann::json model = settings.value("model", nlohmann::json::object());
  return QString::fromStdString(model.value("name", std::string("an unnamed model")));
}

std::string modelFingerprint(const nlohmann::json& settings) {
  const nlohmann::json model = settings.value("model", nlohmann::json::object());
  return model.value("fingerprint", std::string());
}

QString tokenCell(const std::string& text) { return elideLabel(QString::fromStdString(text), 18); }

void fillTokenTable(QTableWidget& table, const std::vector<hs::HeadTokenMass>& tokens, const QString& mass_meaning) {
  table.clearContents();
  table.setRowCount(static_cast<int>(tokens.size()));
  for (int i = 0; i < static_cast<int>(tokens.size()); ++i) {
    const hs::HeadTokenMass& t = tokens[static_cast<size_t>(i)];
    const QString tooltip = QStringLiteral("%1: %2 %3 in total over %4 occurrence%5 (%6 each on average)")
                                .arg(QString::fromStdString(t.text), formatNumber(t.mass), mass_meaning)
                                .arg(t.count)
                                .arg(t.count == 1 ? "" : "s")
                                .arg(formatNumber(t.count > 0 ? t.mass / static_cast<double>(t.count) : 0.0));
    const QStringList cells = {tokenCell(t.text), formatNumber(t.mass), QString::number(t.count)};
    for (int c = 0; c < 3; ++c) {
      auto* item = new QTableWidgetItem(cells[c]);
      item->setToolTip(tooltip);
      if (c > 0) item->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
      table.setItem(i, c, item);
    }
  }
}

QTableWidget* newTokenTable(QWidget* parent, const QString& name) {
  auto* table = new QTableWidget(0, 3, parent);
  table->setObjectName(name);
  table->setHorizontalHeaderLabels({QStringLiteral("token"), QStringLiteral("mass"), QStringLiteral("count")});
  table->verticalHeader()->setVisible(false);
  table->setEditTriggers(QAbstractItemView::NoEditTriggers);
  table->setSelectionMode(QAbstractItemView::NoSelection);
  table->setAlternatingRowColors(true);
  table->setWordWrap(false);
  table->horizontalHeader()->setSectionResizeMode(0, QHeaderView::Stretch);
  table->horizontalHeader()->setSectionResizeMode(1, QHeaderView::ResizeToContents);
  table->horizontalHeader()->setSectionResizeMode(2, QHeaderView::ResizeToContents);
  table->verticalHeader()->setDefaultSectionSize(table->fontMetrics().height() + 4);
  table->setMinimumWidth(150);
  return table;
}

}  // namespace

const std::vector<HeadDatasetView::Axis>& HeadDatasetView::axes() {
  static const std::vector<Axis> list = {
      {QStringLiteral("previous_token"), QStringLiteral("previous-token score"),
       QStringLiteral("The data set's mean of each prompt's previous-token score (attention to the position before).")},
      {QStringLiteral("duplicate_token"), QStringLiteral("duplicate-token score"),
       QStringLiteral("The data set's mean of each prompt's duplicate-token score (attention to earlier occurrences "
                      "of the same token).")},
      {QStringLiteral("induction"), QStringLiteral("induction score"),
       QStringLiteral("The data set's mean of each prompt's induction score (attention to the token after an earlier "
                      "occurrence of the current one).")},
      {QStringLiteral("attention_entropy"), QStringLiteral("attention entropy (nats)"),
       QStringLiteral("The data set's mean entropy of the head's pattern rows (queries 1 and later): 0 when all "
                      "attention goes to one key.")},
      {QStringLiteral("dla_next_token"), QStringLiteral("DLA to the next token"),
       QStringLiteral("The data set's mean direct logit attribution of the head to the token that comes next.")},
      {QStringLiteral("mean_distance"), QStringLiteral("mean distance (tokens)"),
       QStringLiteral("How far back the head looks on average: the sum over d of d times its mean attention at "
                      "distance d = query - key.")},
      {QStringLiteral("output_norm"), QStringLiteral("mean output norm ‖z W_O‖"),
       QStringLiteral("The mean over every query of the norm of what the head writes to the residual stream.")},
      {kCopying, QStringLiteral("OV copying score (weights)"),
       QStringLiteral("The heads panel's OV copying score: sum(λ) / sum(|λ|) over the eigenvalues of the head's full "
                      "OV circuit, from the weights alone (not from the data set).")},
  };
  return list;
}

ViewDescriptor HeadDatasetView::descriptor() {
  ViewDescriptor d;
  d.id = QStringLiteral("head_data");
  d.title = QStringLiteral("Heads over Data");
  d.menu_text = QStringLiteral("&Heads over Data");
  d.help = QStringLiteral("every head over the last data-set scan with heads (File > Open Scan Results): a scatter "
                          "by two per-head scores, and the selected head's distances, tokens, entropy and examples");
  d.export_size = QSize(1500, 1000);
  QStringList ids;
  for (const Axis& a : axes()) ids << a.id;
  d.options = {
      {kInputX, QStringLiteral("SCORE"), QStringLiteral("Heads over Data: the scatter's x axis"), ViewOption::Type::Text,
       ids},
      {kInputY, QStringLiteral("SCORE"), QStringLiteral("Heads over Data: the scatter's y axis"), ViewOption::Type::Text,
       ids},
  };
  d.analysis.id = d.id;  // nothing to compute: the scan computed it all
  d.create = [](Selection* selection, QWidget* parent) { return new HeadDatasetView(selection, parent); };
  return d;
}

HeadDatasetView::HeadDatasetView(Selection* selection, QWidget* parent) : AnalysisView(selection, parent) {
  setObjectName(QStringLiteral("headDatasetView"));
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(8, 8, 8, 4);
  layout->setSpacing(6);
  title_ = new QLabel(this);
  title_->setObjectName(QStringLiteral("viewTitle"));
  title_->setWordWrap(true);
  layout->addWidget(title_);
  caption_ = sectionCaption(this);
  layout->addWidget(caption_);

  empty_ = new QLabel(this);
  empty_->setObjectName(QStringLiteral("headDataEmpty"));
  empty_->setWordWrap(true);
  empty_->setAlignment(Qt::AlignCenter);
  empty_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  empty_->setMargin(40);
  layout->addWidget(empty_, 1);

  body_ = new QWidget(this);
  layout->addWidget(body_, 1);
  auto* body = new QHBoxLayout(body_);
  body->setContentsMargins(0, 0, 0, 0);
  auto* columns = new QSplitter(Qt::Horizontal, body_);
  columns->setChildrenCollapsible(false);
  body->addWidget(columns);

  // Left: every head, then the selected head's tokens.
  auto* left = new QWidget(columns);
  auto* left_layout = new QVBoxLayout(left);
  left_layout->setContentsMargins(0, 0, 4, 0);
  auto* axes_row = new QHBoxLayout;
  x_combo_ = new QComboBox(left);
  x_combo_->setObjectName(QStringLiteral("headDataX"));
  y_combo_ = new QComboBox(left);
  y_combo_->setObjectName(QStringLiteral("headDataY"));
  for (QComboBox* combo : {x_combo_, y_combo_}) {
    for (const Axis& a : axes()) {
      combo->addItem(a.name, a.id);
      combo->setItemData(combo->count() - 1, a.definition, Qt::ToolTipRole);
    }
    combo->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
    combo->setMinimumContentsLength(12);
  }
  x_combo_->setCurrentIndex(x_combo_->findData(QStringLiteral("previous_token")));
  y_combo_->setCurrentIndex(y_combo_->findData(QStringLiteral("induction")));
  axes_row->addWidget(new QLabel(QStringLiteral("x:"), left));
  axes_row->addWidget(x_combo_, 1);
  axes_row->addSpacing(8);
  axes_row->addWidget(new QLabel(QStringLiteral("y:"), left));
  axes_row->addWidget(y_combo_, 1);
  left_layout->addLayout(axes_row);
  scatter_ = new ScatterView(left);
  scatter_->setObjectName(QStringLiteral("headDataScatter"));
  scatter_->setDiagonalShown(false);  // two different quantities: y = x means nothing
  left_layout->addWidget(scatter_, 3);
  auto* tables = new QHBoxLayout;
  auto* key_box = new QVBoxLayout;
  key_caption_ = sectionCaption(left);
  key_table_ = newTokenTable(left, QStringLiteral("headDataKeyTokens"));
  key_box->addWidget(key_caption_);
  key_box->addWidget(key_table_, 1);
  auto* query_box = new QVBoxLayout;
  query_caption_ = sectionCaption(left);
  query_table_ = newTokenTable(left, QStringLiteral("headDataQueryTokens"));
  query_box->addWidget(query_caption_);
  query_box->addWidget(query_table_, 1);
  tables->addLayout(key_box);
  tables->addLayout(query_box);
  left_layout->addLayout(tables, 2);

  // Right: the selected head's distances and entropy, then its examples.
  auto* right = new QWidget(columns);
  auto* right_layout = new QVBoxLayout(right);
  right_layout->setContentsMargins(4, 0, 0, 0);
  head_title_ = new QLabel(right);
  head_title_->setObjectName(QStringLiteral("viewTitle"));
  head_title_->setWordWrap(true);
  right_layout->addWidget(head_title_);
  auto* charts = new QHBoxLayout;
  auto* distance_box = new QVBoxLayout;
  auto* distance_caption = sectionCaption(right);
  distance_caption->setText(QStringLiteral("<b>Attention by distance</b> d = query − key: the mean attention a query "
                                           "pays at each distance (sums to 1)"));
  distance_ = new BarChartView(right);
  distance_->setObjectName(QStringLiteral("headDataDistance"));
  distance_->setValueAxisTitle(QStringLiteral("mean attention"));
  distance_box->addWidget(distance_caption);
  distance_box->addWidget(distance_, 1);
  auto* entropy_box = new QVBoxLayout;
  auto* entropy_caption = sectionCaption(right);
  entropy_caption->setText(QStringLiteral("<b>Entropy of each pattern row</b> (nats; 0: all on one key), as a share "
                                          "of the queries"));
  entropy_ = new BarChartView(right);
  entropy_->setObjectName(QStringLiteral("headDataEntropy"));
  entropy_->setValueAxisTitle(QStringLiteral("share of queries"));
  entropy_box->addWidget(entropy_caption);
  entropy_box->addWidget(entropy_, 1);
  charts->addLayout(distance_box, 3);
  charts->addLayout(entropy_box, 2);
  right_layout->addLayout(charts, 3);
  examples_caption_ = sectionCaption(right);
  right_layout->addWidget(examples_caption_);
  examples_ = new ShadedTokenRows;
  examples_->setObjectName(QStringLiteral("headDataExamples"));
  auto* scroll = new QScrollArea(right);
  scroll->setWidget(examples_);
  scroll->setWidgetResizable(true);
  scroll->setFrameShape(QFrame::NoFrame);
  scroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  right_layout->addWidget(scroll, 7);
  columns->addWidget(left);
  columns->addWidget(right);
  columns->setStretchFactor(0, 4);
  columns->setStretchFactor(1, 5);

  scatter_->setTooltipFormatter([this](int index) -> QString {
    const auto [l, h] = pointHead(index);
    if (l < 0) return {};
    return QStringLiteral("%1: x = %2, y = %3 — click to select it")
        .arg(headLabel(l, h), formatNumber(scatter_->point(index).x), formatNumber(scatter_->point(index).y));
  });
  connect(scatter_, &ScatterView::pointClicked, this, [this](int index) {
    const auto [l, h] = pointHead(index);
    if (l >= 0) selection_->setHead(l, h);
  });
  for (QComboBox* combo : {x_combo_, y_combo_})
    connect(combo, &QComboBox::currentIndexChanged, this, [this] { refreshScatter(); });
  connect(selection_, &Selection::headChanged, this, [this] {
    if (refresher_->pending()) return;
    updateHighlight();
    refreshHead();
  });
  refresher_ = new RefreshWhenShown(this, [this] { refresh(); });
  refresh();
}

void HeadDatasetView::setRun(std::shared_ptr<const RunResult> run) {
  // The view follows the prompt only through the model: a new run of the same model and scan
  // changes nothing it shows (except a copying score that has just arrived).
  const bool same_model = run_ && run && &run_->model() == &run->model();
  const bool copying_arrived = run && !(run_ && run_->headMetric(kCopying)) && run->headMetric(kCopying);
  run_ = std::move(run);
  if (!same_model) copying_asked_ = false;
  if (!same_model || copying_arrived) refresher_->request();
}

void HeadDatasetView::setScan(std::shared_ptr<const DataSetScan> scan) {
  scan_ = std::move(scan);
  refresher_->request();
}

const hs::HeadDatasetStats* HeadDatasetView::stats() const {
  return scan_ && scan_->state && !scan_->state->heads.empty() ? &scan_->state->heads : nullptr;
}

bool HeadDatasetView::showsScan() const { return emptyMessage().isEmpty(); }

std::pair<int, int> HeadDatasetView::pointHead(int index) const {
  const hs::HeadDatasetStats* s = stats();
  if (!s || index < 0 || index >= static_cast<int>(point_heads_.size())) return {-1, -1};
  const int i = point_heads_[static_cast<size_t>(index)];
  return {i / s->n_heads(), i % s->n_heads()};
}

QString HeadDatasetView::xAxis() const { return x_combo_->currentData().toString(); }
QString HeadDatasetView::yAxis() const { return y_combo_->currentData().toString(); }

void HeadDatasetView::setAxes(const QString& x, const QString& y) {
  if (const int i = x_combo_->findData(x); i >= 0) x_combo_->setCurrentIndex(i);
  if (const int i = y_combo_->findData(y); i >= 0) y_combo_->setCurrentIndex(i);
}

ViewInputs HeadDatasetView::viewInputs() const { return {{kInputX, xAxis()}, {kInputY, yAxis()}}; }

void HeadDatasetView::setViewInputs(const ViewInputs& inputs) {
  setAxes(inputs.value(kInputX, xAxis()).toString(), inputs.value(kInputY, yAxis()).toString());
}

double HeadDatasetView::axisValue(const QString& id, int l, int h) const {
  const hs::ScanState& state = *scan_->state;
  constexpr double kNone = std::numeric_limits<double>::quiet_NaN();
  if (id == QLatin1String("mean_distance")) return state.heads.mean_distance(l, h);
  if (id == QLatin1String("output_norm")) return state.heads.mean_output_norm(l, h);
  if (id == kCopying) {
    const HeadMetricValues* v = run_ ? run_->headMetric(kCopying) : nullptr;
    if (!v || l >= v->values.rows() || h >= v->values.cols()) return kNone;
    return v->values(l, h);
  }
  const auto grid = state.grids.find(id.toStdString());
  if (grid == state.grids.end() || l >= grid->second.rows() || h >= grid->second.cols()) return kNone;
  return grid->second.mean(l, h);
}

QString HeadDatasetView::scanSubtitle() const {
  if (!scan_ || !scan_->state) return {};
  const hs::ScanState& s = *scan_->state;
  QString text = QStringLiteral("%1 · %2 prompt%3 of %4")
                     .arg(modelName(s.settings))
                     .arg(s.prompts)
                     .arg(s.prompts == 1 ? "" : "s")
                     .arg(scan_->source);
  if (!s.complete) text += QStringLiteral(" · partial scan (%1 of %2 lines)").arg(s.next_index).arg(s.total_indices);
  return text;
}

QString HeadDatasetView::emptyMessage() const {
  const hs::HeadDatasetStats* s = stats();
  if (!s)
    return QStringLiteral("No data-set scan that describes each head yet.\n\nRun File › Scan Data Set… with “Describe "
                          "each head” checked, or on the command line\n  headscope-cli scan --heads PROMPTS.txt -o "
                          "OUT.json\nand open OUT.json with File › Open Scan Results….");
  if (!run_) return QStringLiteral("Waiting for the model…");
  if (modelFingerprint(scan_->state->settings) != run_->model().fingerprint() || s->n_layers() != run_->n_layer() ||
      s->n_heads() != run_->n_head())
    return QStringLiteral("The scan of %1 was made with the model “%2”, not the loaded “%3”: nothing of it is shown as "
                          "this model's.\n\nLoad %2 (the same weights) to see it, or scan the data set again with "
                          "this model.")
        .arg(scan_->source, modelName(scan_->state->settings), QString::fromStdString(run_->model().name()));
  return {};
}

void HeadDatasetView::refresh() {
  const QString empty_message = emptyMessage();
  const hs::HeadDatasetStats* s = stats();
  const bool shown = empty_message.isEmpty();
  empty_->setText(empty_message);
  empty_->setVisible(!shown);
  body_->setVisible(shown);
  if (!shown) {
    title_->setText(QStringLiteral("<b>Heads over Data</b>"));
    caption_->setText(QStringLiteral("What each head does over a whole data set: where it looks, at which tokens, how "
                                     "spread out, and examples from the weakest to the strongest outputs."));
    point_heads_.clear();
    scatter_->clear();
    return;
  }
  const hs::ScanState& state = *scan_->state;
  QString title = QStringLiteral("<b>Heads over Data</b> &nbsp;%1 heads over %2 prompt%3 of %4")
                      .arg(s->n_layers() * s->n_heads())
                      .arg(state.prompts)
                      .arg(state.prompts == 1 ? "" : "s")
                      .arg(scan_->source.toHtmlEscaped());
  if (!state.complete)
    title += QStringLiteral(" &nbsp;<span style='color:#b03000'><b>partial scan:</b> stopped after %1 of %2 "
                            "lines</span>")
                 .arg(state.next_index)
                 .arg(state.total_indices);
  title_->setText(title);
  caption_->setText(QStringLiteral("Each point is a head, coloured by its layer; click one to select it (every view "
                                   "follows). The right side describes the selected head over the data set (%1 "
                                   "query positions); nothing here depends on the prompt.")
                        .arg(s->queries()));
  refreshScatter();
  refreshHead();
}

void HeadDatasetView::refreshScatter() {
  if (!showsScan()) return;
  const hs::HeadDatasetStats& s = *stats();
  const QString x = xAxis(), y = yAxis();
  auto axisName = [](const QString& id) {
    for (const Axis& a : axes())
      if (a.id == id) return a.name;
    return id;
  };
  if ((x == kCopying || y == kCopying) && !run_->headMetric(kCopying)) {
    // The heads panel's Model metric: asked for once, it comes with the next run (and every run of
    // this model after it, memoized on the weights).
    wantModelMetric(kCopying);
    if (!copying_asked_) {
      copying_asked_ = true;
      Q_EMIT runWanted();
    }
    point_heads_.clear();
    scatter_->clear(QStringLiteral("Computing the OV copying score from the weights…"));
    scatter_->setAxisTitles(axisName(x), axisName(y));
    return;
  }
  std::vector<ScatterView::Point> points;
  point_heads_.clear();
  int missing = 0;
  for (int l = 0; l < s.n_layers(); ++l)
    for (int h = 0; h < s.n_heads(); ++h) {
      const double vx = axisValue(x, l, h), vy = axisValue(y, l, h);
      if (!std::isfinite(vx) || !std::isfinite(vy)) {
        ++missing;
        continue;
      }
      points.push_back({vx, vy, l});
      point_heads_.push_back(l * s.n_heads() + h);
    }
  scatter_->setAxisTitles(axisName(x), axisName(y));
  if (points.empty()) {
    scatter_->clear(QStringLiteral("No head has both values in this scan (the scan left these aggregates out)."));
  } else {
    scatter_->setPoints(std::move(points), s.n_layers(), QStringLiteral("layer"));
  }
  scatter_->setToolTip(missing > 0 ? QStringLiteral("%1 head%2 without a value on an axis are not drawn.")
                                         .arg(missing)
                                         .arg(missing == 1 ? "" : "s")
                                   : QString());
  scatter_->setFigureText({QStringLiteral("Every head: %1 against %2").arg(axisName(y), axisName(x)), scanSubtitle()},
                          QStringLiteral("head_data_scatter_%1_%2").arg(x, y));
  updateHighlight();
}

void HeadDatasetView::updateHighlight() {
  if (!showsScan()) return;
  const int want = selection_->layer() * stats()->n_heads() + selection_->head();
  const auto it = std::find(point_heads_.begin(), point_heads_.end(), want);
  scatter_->setHighlighted(it == point_heads_.end() ? -1 : static_cast<int>(it - point_heads_.begin()));
}

void HeadDatasetView::refreshHead() {
  if (!showsScan()) return;
  const hs::HeadDatasetStats& s = *stats();
  const hs::ScanState& state = *scan_->state;
  const int l = std::clamp(selection_->layer(), 0, s.n_layers() - 1);
  const int h = std::clamp(selection_->head(), 0, s.n_heads() - 1);
  const QString label = headLabel(l, h);
  head_title_->setText(QStringLiteral("<b>%1</b> &nbsp;mean distance %2 · mean output norm %3 ± %4")
                           .arg(label, formatNumber(s.mean_distance(l, h)), formatNumber(s.mean_output_norm(l, h)),
                                formatNumber(s.output_norm_std(l, h))));

  // Distance: d = 0 .. the largest with mass, the tail past kMaxDistanceBars summed in one bar.
  const std::vector<double> profile = s.distance_profile(l, h);
  int last = 0;
  for (int d = 0; d < static_cast<int>(profile.size()); ++d)
    if (profile[static_cast<size_t>(d)] > 0.0) last = d;
  std::vector<BarChartView::Bar> bars;
  const QColor bar_color = QColor::fromRgb(colorAt(ColorMap::Sequential, 0.75));
  for (int d = 0; d <= std::min(last, kMaxDistanceBars - 1); ++d)
    bars.push_back({QString::number(d), profile[static_cast<size_t>(d)], bar_color});
  if (last >= kMaxDistanceBars) {
    double tail = 0.0;
    for (int d = kMaxDistanceBars; d <= last; ++d) tail += profile[static_cast<size_t>(d)];
    bars.push_back({QStringLiteral("≥%1").arg(kMaxDistanceBars), tail, QColor(0x90, 0x90, 0x90)});
  }
  distance_->setBars(std::move(bars));
  distance_->setTooltipFormatter([this](int i) {
    const auto& b = distance_->bar(i);
    return QStringLiteral("distance %1: %2 of a query's attention on average").arg(b.label, formatNumber(b.value));
  });
  distance_->setFigureText({QStringLiteral("%1 attention by distance over the data set").arg(label), scanSubtitle()},
                           QStringLiteral("head_data_distance_%1").arg(label));

  // Entropy: the histogram as shares of the queries.
  const int64_t* hist = s.entropy_histogram(l, h);
  const double width = s.entropy_bin_width();
  int64_t total = 0;
  for (int b = 0; b < hs::HeadDatasetStats::kEntropyBins; ++b) total += hist[b];
  std::vector<BarChartView::Bar> ebars;
  for (int b = 0; b < hs::HeadDatasetStats::kEntropyBins; ++b)
    ebars.push_back({QString::number(b * width, 'f', 2),
                     total > 0 ? static_cast<double>(hist[b]) / static_cast<double>(total) : 0.0, bar_color});
  entropy_->setBars(std::move(ebars));
  entropy_->setTooltipFormatter([this, width, total, hist_copy = std::vector<int64_t>(hist, hist + hs::HeadDatasetStats::kEntropyBins)](int i) {
    return QStringLiteral("entropy %1 – %2 nats: %3 of the queries (%4 of %5)")
        .arg(QString::number(i * width, 'f', 2), QString::number((i + 1) * width, 'f', 2),
             formatNumber(entropy_->bar(i).value))
        .arg(hist_copy[static_cast<size_t>(i)])
        .arg(total);
  });
  entropy_->setFigureText({QStringLiteral("%1 attention entropy over the data set").arg(label), scanSubtitle()},
                          QStringLiteral("head_data_entropy_%1").arg(label));

  // Tokens.
  const bool bos = state.settings.value("bos", true);
  key_caption_->setText(QStringLiteral("<b>Read from</b> (keys): total attention received from queries ≥ 1%1")
                            .arg(bos ? QStringLiteral(", BOS left out") : QString()));
  key_caption_->setToolTip(QStringLiteral("Tokens by the total attention they receive as keys from every query "
                                          "position q ≥ 1%1, largest first. Count: how often the token occurs (at any "
                                          "position but a prepended BOS).")
                               .arg(bos ? QStringLiteral(" (the BOS key left out: as the sink it would top every list)")
                                        : QString()));
  query_caption_->setText(bos ? QStringLiteral("<b>Looks away from BOS</b> (queries): total attention paid to keys "
                                               "other than BOS")
                              : QStringLiteral("<b>Looks from</b> (queries): total attention paid"));
  query_caption_->setToolTip(QStringLiteral("Tokens by the total attention their query positions pay to keys other "
                                            "than the BOS sink (without BOS: all of it), largest first: where the "
                                            "head does something rather than rest on the sink. Count: occurrences as "
                                            "a query (positions ≥ 1)."));
  key_table_->setToolTip(key_caption_->toolTip());
  query_table_->setToolTip(query_caption_->toolTip());
  fillTokenTable(*key_table_, s.key_tokens(l, h, kTopTokens), QStringLiteral("attention received"));
  fillTokenTable(*query_table_, s.query_tokens(l, h, kTopTokens),
                 bos ? QStringLiteral("attention paid away from BOS") : QStringLiteral("attention paid"));

  // Examples, lowest norms first.
  std::vector<ShadedTokenRows::Row> rows;
  const bool random = state.settings.value("input", nlohmann::json::object()).contains("repeat_random");
  for (const hs::HeadDecile& decile : s.deciles(l, h)) {
    const int n = std::min(kExamplesPerDecile, static_cast<int>(decile.examples.size()));
    for (int e = 0; e < n; ++e) {
      const hs::HeadExample& ex = decile.examples[static_cast<size_t>(e)];
      if (!ex.sample) continue;
      ShadedTokenRows::Row row;
      const int line = static_cast<int>(ex.sample->index + 1);
      row.label = QStringLiteral("%1 %2 · %3 %4")
                      .arg(e == 0 ? QStringLiteral("D%1").arg(decile.decile + 1) : QStringLiteral("    "))
                      .arg(formatNumber(ex.norm), random ? QStringLiteral("prompt") : QStringLiteral("line"))
                      .arg(line);
      row.label_tooltip =
          QStringLiteral("Decile %1 of 10 of %2's output norm over the sampled positions (%3 – %4).\nThis example: "
                         "‖z W_O‖ = %5 at position %6 of %7 %8.")
              .arg(decile.decile + 1)
              .arg(label, formatNumber(decile.norm_low), formatNumber(decile.norm_high), formatNumber(ex.norm))
              .arg(ex.sample->position)
              .arg(random ? QStringLiteral("prompt") : QStringLiteral("input line"))
              .arg(line);
      float sum = 0.0f;
      for (size_t i = 0; i < ex.sample->tokens.size(); ++i) {
        row.tokens << QString::fromStdString(s.token_text(ex.sample->tokens[i]));
        const float w = i < ex.pattern.size() ? ex.pattern[i] : 0.0f;
        row.weights.push_back(w);
        sum += w;
      }
      row.outlined = static_cast<int>(row.tokens.size()) - 1;
      row.before = std::max(0.0f, 1.0f - sum);
      row.gap_above = e == 0 && !rows.empty();
      row.token_tooltip = QStringLiteral("%1: %2 of the attention from the query (outlined)");
      rows.push_back(std::move(row));
    }
  }
  examples_caption_->setText(
      QStringLiteral("<b>Examples</b> by decile of the output norm ‖z W_O‖, lowest (D1) to highest (D10): contexts "
                     "ending at the query (outlined), each token shaded by %1's attention from it (white 0 to dark 1)")
          .arg(label));
  examples_->setMessage(QStringLiteral("No examples: the scan sampled no positions."));
  examples_->setRows(std::move(rows));
}

std::vector<ExportFigure> HeadDatasetView::exportFigures(const RunResult&) {
  if (!showsScan()) return {};
  return {{std::nullopt, [this]() -> ExportFigure::Target { return {this, size()}; }}};
}

QString HeadDatasetView::exportSkipReason(const RunResult&) const {
  if (showsScan()) return {};
  if (!stats()) return QStringLiteral("Heads over Data: no data-set scan with heads (File > Scan Data Set)");
  return QStringLiteral("Heads over Data: the scan was made with another model");
}

FigureText HeadDatasetView::figureText() const {
  if (!showsScan()) return {QStringLiteral("Heads over data"), {}};
  const int l = selection_->layer(), h = selection_->head();
  return {QStringLiteral("Heads over data: every head, and %1 in detail").arg(headLabel(l, h)), scanSubtitle()};
}

QString HeadDatasetView::figureFileStem() const {
  return QStringLiteral("head_data_%1").arg(headLabel(selection_->layer(), selection_->head()));
}

}  // namespace hs::ui
