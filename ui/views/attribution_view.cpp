#include "ui/views/attribution_view.h"

#include <QButtonGroup>
#include <QComboBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QMenu>
#include <QRadioButton>
#include <QSpinBox>
#include <QSplitter>
#include <QTableWidget>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrentRun>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/model/backward.h"
#include "core/model/model.h"
#include "core/model/thread_scope.h"
#include "ui/base/deliver.h"
#include "ui/controller/selection.h"
#include "ui/views/view_text.h"
#include "ui/widgets/bar_chart_view.h"
#include "ui/widgets/heatmap_view.h"
#include "ui/widgets/labels.h"
#include "ui/widgets/refresh_when_shown.h"
#include "ui/widgets/target_picker.h"

namespace hs::ui {
namespace {

// The ends of the diverging map (ColorBrewer RdBu): red raises the metric, blue lowers it.
QColor signedColor(double v) { return v >= 0 ? QColor(0xb2, 0x18, 0x2b) : QColor(0x21, 0x66, 0xac); }

QString methodTitle(hs::InputAttributionMethod m, int steps) {
  return m == hs::InputAttributionMethod::GradXInput ? QStringLiteral("gradient × input")
                                                     : QStringLiteral("integrated gradients, %1 steps").arg(steps);
}

// A word-wrapped label whose text can be selected and copied.
QLabel* textLabel(QWidget* parent, const QString& name) {
  auto* label = new QLabel(parent);
  label->setObjectName(name);
  label->setWordWrap(true);
  label->setTextInteractionFlags(Qt::TextSelectableByMouse);
  return label;
}

// One panel of the view: a caption, a plot, a line below, stacked tightly.
QVBoxLayout* sectionLayout(QWidget* panel) {
  auto* layout = new QVBoxLayout(panel);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->setSpacing(2);
  return layout;
}

QString warningsHtml(const std::vector<std::string>& warnings) {
  QString html;
  for (const std::string& w : warnings)
    html += QStringLiteral("<br><span style=\"color: #b3261e;\">Warning: %1</span>").arg(QString::fromStdString(w).toHtmlEscaped());
  return html;
}

QString methodName(hs::InputAttributionMethod m) {
  const std::string_view name = hs::to_string(m);
  return QString::fromLatin1(name.data(), static_cast<int>(name.size()));
}

}  // namespace

ViewDescriptor AttributionView::descriptor() {
  ViewDescriptor d;
  d.id = QStringLiteral("attribution");
  d.title = QStringLiteral("Attribution");
  d.menu_text = QStringLiteral("A&ttribution");
  d.help = QStringLiteral("gradients explaining the target's logit: input tokens (gradient x input, integrated "
                          "gradients), each head's, MLP's and neuron's estimated ablation effect");
  d.export_size = QSize(1400, 900);
  d.options = {
      {kMethod, QStringLiteral("METHOD"),
       QStringLiteral("the attribution view's input attribution: grad_x_input (default) or integrated_gradients")},
      {kSteps, QStringLiteral("N"), QStringLiteral("the attribution view's integrated-gradients steps (default 32)"),
       ViewOption::Type::Integer},
  };
  d.analysis.id = d.id;
  d.analysis.reads = kReadsPosition | kReadsTarget | kReadsVersus;
  // Integrated gradients is many passes, and even one backward pass costs about a forward pass:
  // its own job, asked for while the view is on screen, never delaying the run's delivery.
  d.analysis.with_every_run = false;
  d.analysis.compute_long = [](const RunResult& run, const AnalysisKey& key, const AnalysisJob& job) {
    return std::shared_ptr<ViewResult>(compute(run, key, job));
  };
  d.analysis.compute = [](const RunResult& run, const AnalysisKey& key) {
    return std::shared_ptr<ViewResult>(compute(run, key));
  };
  d.create = [](Selection* selection, QWidget* parent) { return new AttributionView(selection, parent); };
  return d;
}

std::shared_ptr<AttributionResult> AttributionView::compute(const RunResult& run, const AnalysisKey& key,
                                                            const AnalysisJob& job) {
  auto method = hs::InputAttributionMethod::GradXInput;
  int steps = 0;
  if (!key.params.isEmpty()) {
    const auto parsed = hs::parse_input_attribution_method(key.params[0].toStdString());
    if (!parsed)
      throw hs::Error("unknown input attribution method \"" + key.params[0].toStdString() +
                      "\": use grad_x_input or integrated_gradients.");
    method = *parsed;
  }
  if (method == hs::InputAttributionMethod::IntegratedGradients) {
    steps = key.params.size() > 1 ? key.params[1].toInt() : kDefaultSteps;
    if (steps < 1) throw hs::Error("integrated gradients needs at least 1 step.");
  }
  auto r = std::make_shared<AttributionResult>();
  // Gradients explain a plain run (backward() refuses edits): the run on screen without its
  // ablations, and the view says so.
  r->plain = run.plainCache();
  r->ablations_left_out = !run.ablations().empty();
  const hs::ActivationCache& cache = *r->plain;
  r->target = hs::target_metric(cache, key.pos, key.target, key.versus);
  r->top = hs::top_predictions(cache, r->target.pos, kTopK);
  hs::AttributionControl control;
  control.cancelled = job.cancelled;
  r->input = hs::input_attribution(cache, r->target.metric, method, std::max(1, steps), control);
  r->warnings = hs::input_attribution_warnings(r->input);
  if (job.cancelled()) throw hs::Cancelled();
  hs::GradOptions options;
  options.keep = hs::component_gradient_hooks();
  const hs::GradientCache grad = hs::backward(cache, r->target.metric, options);
  r->components = hs::component_attribution(cache, grad);
  r->top_neurons = hs::top_neurons(r->components.neurons, kTopNeurons);
  r->backward_passes = (method == hs::InputAttributionMethod::GradXInput ? 1 : steps) + 1;
  return r;
}

AttributionView::AttributionView(Selection* selection, QWidget* parent) : AnalysisView(selection, parent) {
  setObjectName(QStringLiteral("attributionView"));
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(8, 8, 8, 4);
  layout->setSpacing(6);

  title_ = textLabel(this, QStringLiteral("viewTitle"));
  layout->addWidget(title_);

  auto* controls = new QHBoxLayout;
  controls->setSpacing(10);
  target_ = new TargetPicker(QStringLiteral("Target token:"), this);
  target_->combo()->setObjectName(QStringLiteral("attrTargetCombo"));
  target_->combo()->setToolTip(QStringLiteral("The token whose logit is explained (shared with the Contributions "
                                              "view). Pick a prediction, or type a token and press Enter."));
  versus_ = new TargetPicker(QStringLiteral("minus the logit of:"), this);
  versus_->combo()->setObjectName(QStringLiteral("attrVersusCombo"));
  versus_->combo()->setToolTip(QStringLiteral("A second token: explain logit(target) − logit(this token), the logit "
                                              "difference, instead of the target's logit alone."));
  resolveTypedTokens({target_, versus_}, [this] { return run_.get(); });
  gxi_button_ = new QRadioButton(QStringLiteral("Gradient × input"), this);
  gxi_button_->setObjectName(QStringLiteral("attrGradXInput"));
  gxi_button_->setToolTip(QStringLiteral("(x − x′) · ∂M/∂x at each token embedding: one backward pass."));
  ig_button_ = new QRadioButton(QStringLiteral("Integrated gradients"), this);
  ig_button_->setObjectName(QStringLiteral("attrIntegratedGradients"));
  ig_button_->setToolTip(QStringLiteral("(x − x′) · the mean gradient on the straight path from the baseline x′ "
                                        "(zero token embeddings after the first position) to x, by the midpoint "
                                        "rule: one forward and backward pass per step."));
  gxi_button_->setChecked(true);
  auto* group = new QButtonGroup(this);
  group->addButton(gxi_button_);
  group->addButton(ig_button_);
  steps_ = new QSpinBox(this);
  steps_->setObjectName(QStringLiteral("attrSteps"));
  steps_->setRange(1, 1024);
  steps_->setValue(kDefaultSteps);
  steps_->setSuffix(QStringLiteral(" steps"));
  steps_->setToolTip(QStringLiteral("Integrated gradients' steps: more steps, a smaller completeness error."));
  steps_->setEnabled(false);
  // Two rows, so that the view fits beside the heads panel in a 1280-pixel window.
  controls->addWidget(target_);
  controls->addWidget(versus_);
  controls->addStretch(1);
  layout->addLayout(controls);
  auto* method_row = new QHBoxLayout;
  method_row->setSpacing(10);
  method_row->addWidget(new QLabel(QStringLiteral("Input tokens by:"), this));
  method_row->addWidget(gxi_button_);
  method_row->addWidget(ig_button_);
  method_row->addWidget(steps_);
  method_row->addStretch(1);
  layout->addLayout(method_row);
  status_ = textLabel(this, QStringLiteral("attrStatus"));
  layout->addWidget(status_);

  auto* splitter = new QSplitter(Qt::Vertical, this);
  splitter->setChildrenCollapsible(false);
  auto* top = new QWidget(splitter);
  auto* top_layout = sectionLayout(top);
  tokens_caption_ = textLabel(top, QStringLiteral("sectionCaption"));
  token_bars_ = new BarChartView(top);
  token_bars_->setObjectName(QStringLiteral("attrTokenBars"));
  token_bars_->setLegend({{QStringLiteral("raises the metric"), signedColor(1)},
                          {QStringLiteral("lowers it"), signedColor(-1)}});
  completeness_ = textLabel(top, QStringLiteral("attrCompleteness"));
  completeness_->setTextFormat(Qt::RichText);
  top_layout->addWidget(tokens_caption_);
  top_layout->addWidget(token_bars_, 1);
  top_layout->addWidget(completeness_);

  auto* bottom = new QSplitter(Qt::Horizontal, splitter);
  bottom->setChildrenCollapsible(false);
  auto* left = new QWidget(bottom);
  auto* left_layout = sectionLayout(left);
  heads_caption_ = textLabel(left, QStringLiteral("sectionCaption"));
  heads_ = new HeatmapView(left);
  heads_->setObjectName(QStringLiteral("attrHeadHeatmap"));
  heads_->setAxisTitles(QStringLiteral("layer"), QStringLiteral("head"));
  heads_->setColorMap(ColorMap::Diverging);
  heads_->setRangeMode(HeatmapView::RangeMode::Symmetric);
  heads_->setColorScaleTitle(QStringLiteral("estimated ΔM"));
  ablation_ = textLabel(left, QStringLiteral("attrAblation"));
  left_layout->addWidget(heads_caption_);
  left_layout->addWidget(heads_, 1);
  left_layout->addWidget(ablation_);
  auto* right = new QWidget(bottom);
  auto* right_layout = sectionLayout(right);
  mlp_caption_ = textLabel(right, QStringLiteral("sectionCaption"));
  mlp_bars_ = new BarChartView(right);
  mlp_bars_->setObjectName(QStringLiteral("attrMlpBars"));
  mlp_bars_->setValueAxisTitle(QStringLiteral("estimated ΔM"));
  neurons_ = new QTableWidget(0, 3, right);
  neurons_->setObjectName(QStringLiteral("attrNeurons"));
  neurons_->setHorizontalHeaderLabels({QStringLiteral("layer"), QStringLiteral("neuron"), QStringLiteral("estimated ΔM")});
  neurons_->verticalHeader()->setVisible(false);
  neurons_->horizontalHeader()->setStretchLastSection(true);
  neurons_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  neurons_->setSelectionBehavior(QAbstractItemView::SelectRows);
  neurons_->setSelectionMode(QAbstractItemView::SingleSelection);
  right_layout->addWidget(mlp_caption_);
  right_layout->addWidget(mlp_bars_, 2);
  right_layout->addWidget(neurons_, 3);
  bottom->addWidget(left);
  bottom->addWidget(right);
  bottom->setStretchFactor(0, 3);
  bottom->setStretchFactor(1, 2);
  splitter->addWidget(top);
  splitter->addWidget(bottom);
  // The tokens' bars need the height their rotated labels take and then some: half the view.
  splitter->setStretchFactor(0, 1);
  splitter->setStretchFactor(1, 1);
  token_bars_->setMinimumHeight(220);
  layout->addWidget(splitter, 1);

  connect(target_, &TargetPicker::targetChosen, selection_, &Selection::setTarget);
  connect(versus_, &TargetPicker::targetChosen, selection_, &Selection::setVersus);
  connect(gxi_button_, &QRadioButton::toggled, this, [this] {
    steps_->setEnabled(ig_button_->isChecked());
    Q_EMIT analysisKeyChanged();
    updateStatus();
  });
  connect(steps_, qOverload<int>(&QSpinBox::valueChanged), this, [this] {
    if (method() != hs::InputAttributionMethod::IntegratedGradients) return;
    Q_EMIT analysisKeyChanged();
    updateStatus();
  });
  connect(heads_, &HeatmapView::cellClicked, this, [this](int layer, int head) {
    asked_head_ = {layer, head};
    selection_->setHead(layer, head);
    startExactAblation(layer, head);
  });
  connect(heads_, &HeatmapView::cellContextMenu, this,
          [this](int layer, int head, QMenu* menu) { Q_EMIT headContextMenu(layer, head, menu); });
  connect(mlp_bars_, &BarChartView::barClicked, this, [this](int layer) { selection_->setLayer(layer); });
  connect(neurons_, &QTableWidget::cellClicked, this, [this](int row, int) {
    if (result_ && row < static_cast<int>(result_->top_neurons.size()))
      selection_->setLayer(result_->top_neurons[static_cast<size_t>(row)].layer);
  });
  connect(selection_, &Selection::headChanged, this, [this](int layer, int head) {
    heads_->setHighlightedCell(layer, head);
    // A head chosen anywhere (the head grid, arrow keys) is compared too, while this view is seen.
    if (isVisible() && result_) {
      asked_head_ = {layer, head};
      startExactAblation(layer, head);
    }
    updateAblation();
  });
  connect(selection_, &Selection::targetChanged, this, [this] { updateStatus(); });
  connect(selection_, &Selection::positionChanged, this, [this] { updateStatus(); });
  heads_->setTooltipFormatter([this](int l, int h, float v) {
    QString text = QStringLiteral("%1: estimated ΔM = −z·∂M/∂z = %2").arg(headLabel(l, h), formatSigned(v));
    if (const auto exact = exactAblation(l, h)) text += QStringLiteral("; exact zero ablation %1").arg(formatSigned(*exact));
    return text + QStringLiteral("\nclick: run the exact zero ablation");
  });
  token_bars_->setTooltipFormatter([this](int i) {
    if (!result_) return QString();
    const auto& b = token_bars_->bar(i);
    return QStringLiteral("%1: %2 to %3").arg(tokenAt(b.label, i), formatSigned(b.value), metricText());
  });
  mlp_bars_->setTooltipFormatter([this](int i) {
    const auto& b = mlp_bars_->bar(i);
    return QStringLiteral("%1: estimated ΔM = −mlp_out·∂M/∂mlp_out = %2").arg(b.label, formatSigned(b.value));
  });
  refresher_ = new RefreshWhenShown(this, [this] {
    refreshTargets();
    refresh();
  });
  refresh();
}

AttributionView::~AttributionView() {
  ++ablation_job_;
  for (QFuture<void>& f : in_flight_) f.waitForFinished();
}

hs::InputAttributionMethod AttributionView::method() const {
  return ig_button_->isChecked() ? hs::InputAttributionMethod::IntegratedGradients
                                 : hs::InputAttributionMethod::GradXInput;
}

void AttributionView::setMethod(hs::InputAttributionMethod m) {
  (m == hs::InputAttributionMethod::IntegratedGradients ? ig_button_ : gxi_button_)->setChecked(true);
}

int AttributionView::steps() const { return steps_->value(); }
void AttributionView::setSteps(int steps) { steps_->setValue(steps); }

AnalysisKey AttributionView::analysisKey(AnalysisKey selected) const {
  const bool ig = method() == hs::InputAttributionMethod::IntegratedGradients;
  selected.params = {methodName(method()), QString::number(ig ? steps() : 0)};
  return selected;
}

ViewInputs AttributionView::viewInputs() const {
  ViewInputs inputs;
  if (method() != hs::InputAttributionMethod::GradXInput) inputs[kMethod] = methodName(method());
  if (steps() != kDefaultSteps) inputs[kSteps] = steps();
  return inputs;
}

void AttributionView::setViewInputs(const ViewInputs& inputs) {
  const QString m = inputs.value(kMethod).toString();
  if (m.isEmpty() || m == QStringLiteral("grad_x_input")) setMethod(hs::InputAttributionMethod::GradXInput);
  else if (m == QStringLiteral("integrated_gradients")) setMethod(hs::InputAttributionMethod::IntegratedGradients);
  else failure_ = QStringLiteral("--attr-method must be grad_x_input or integrated_gradients (got '%1').").arg(m);
  setSteps(inputs.contains(kSteps) ? inputs.value(kSteps).toInt() : kDefaultSteps);
}

void AttributionView::setRun(std::shared_ptr<const RunResult> run) {
  run_ = std::move(run);
  updateStatus();  // says at once that what is drawn is of the previous prompt
}

void AttributionView::setResult(std::shared_ptr<const ViewResult> result) {
  auto r = std::dynamic_pointer_cast<const AttributionResult>(std::move(result));
  // A late answer for an earlier run is never drawn over the current one.
  if (!r || (run_ && r->run_job != run_->job)) return;
  const bool same_run = result_ && result_->plain == r->plain && result_->target.metric.token == r->target.metric.token &&
                        result_->target.metric.wrong == r->target.metric.wrong &&
                        result_->target.metric.kind == r->target.metric.kind && result_->target.pos == r->target.pos;
  result_ = std::move(r);
  run_ = result_->run;
  failure_.clear();
  if (!same_run) {
    // Exact ablations belong to one run and metric; the head asked about is compared again.
    ++ablation_job_;
    exact_.clear();
    ablation_error_.clear();
    if (asked_head_.first >= 0 && isVisible()) startExactAblation(asked_head_.first, asked_head_.second);
  }
  refresher_->request();
}

void AttributionView::showFailure(const QString& message) {
  failure_ = message;
  updateStatus();
}

bool AttributionView::isCurrent() const {
  if (!result_ || !run_ || result_->run_job != run_->job) return false;
  return result_->key == analysisKey(keyFromSelection(*selection_, descriptor().analysis.reads));
}

std::optional<double> AttributionView::exactAblation(int layer, int head) const {
  if (auto it = exact_.find({layer, head}); it != exact_.end()) return it->second;
  return std::nullopt;
}

void AttributionView::startExactAblation(int layer, int head) {
  if (!result_ || exact_.count({layer, head})) {
    updateAblation();
    return;
  }
  const quint64 job = ++ablation_job_;
  ablation_error_.clear();
  auto ran = QtConcurrent::run([model = result_->run->run.model, plain = result_->plain,
                                metric = result_->target.metric, layer, head]() -> std::pair<double, QString> {
    std::pair<double, QString> out{0.0, {}};
    try {
      out.first = hs::head_zero_ablation_effect(*model, *plain, metric, layer, head);
    } catch (const std::exception& e) {
      out.second = QString::fromStdString(e.what());
    }
    hs::release_thread_team();
    return out;
  });
  std::erase_if(in_flight_, [](const QFuture<void>& f) { return f.isFinished(); });
  in_flight_.push_back(QFuture<void>(ran));
  deliverLater(ran, this, [this, job, layer, head](std::pair<double, QString> out) {
    if (job != ablation_job_) return;  // another head, or another run, was asked for meanwhile
    if (out.second.isEmpty()) exact_[{layer, head}] = out.first;
    else ablation_error_ = out.second;
    updateAblation();
  });
  updateAblation();
}

QString AttributionView::metricText() const {
  if (!result_) return {};
  const RunResult& run = *result_->run;
  const hs::TargetMetric& t = result_->target;
  const QString at = tokenAt(run.labels.value(t.pos), t.pos);
  if (t.versus)
    return QStringLiteral("logit(%1) − logit(%2) at %3").arg(tokenText(run, t.target), tokenText(run, *t.versus), at);
  return QStringLiteral("logit(%1) at %2").arg(tokenText(run, t.target), at);
}

QString AttributionView::titleText() const { return title_->text(); }
QString AttributionView::completenessText() const { return completeness_->text(); }
QString AttributionView::ablationText() const { return ablation_->text(); }
QString AttributionView::statusText() const { return status_->text(); }

void AttributionView::refreshTargets() {
  if (!result_) return;
  setTargetPairChoices(*target_, *versus_, *result_->run, result_->top, result_->target);
}

void AttributionView::updateStatus() {
  QStringList parts;
  QString style;
  if (!failure_.isEmpty()) {
    parts << QStringLiteral("<span style=\"color: #b3261e;\">%1</span>").arg(failure_.toHtmlEscaped());
  } else if (!run_) {
    parts << QStringLiteral("Type a prompt to see which tokens, heads and neurons its prediction depends on.");
  } else if (!result_) {
    parts << QStringLiteral("Computing…");
  } else if (!isCurrent()) {
    // The drawing is of another prompt or setting: say so until the new result lands.
    const bool other_run = result_->run_job != run_->job && result_->run->run.tokens != run_->run.tokens;
    parts << QStringLiteral("<b>Updating…</b> shown: %1.")
                 .arg(other_run ? QStringLiteral("the previous prompt's attributions")
                                : QStringLiteral("the attributions of the previous setting"));
  } else {
    parts << QStringLiteral("%1 backward pass%2 in %3.")
                 .arg(result_->backward_passes)
                 .arg(result_->backward_passes == 1 ? QString() : QStringLiteral("es"))
                 .arg(formatDuration(result_->compute_ms));
  }
  if (result_ && result_->ablations_left_out)
    parts << QStringLiteral("Gradients explain the run without the ablations (the plain prompt).");
  status_->setText(parts.join(QLatin1Char(' ')));
  Q_UNUSED(style);
}

void AttributionView::refresh() {
  updateStatus();
  if (!result_) {
    title_->setText(QStringLiteral("<b>Attribution</b>"));
    tokens_caption_->setText(QStringLiteral("Type a prompt: each token's share of the target's logit appears here."));
    completeness_->clear();
    heads_caption_->clear();
    mlp_caption_->clear();
    ablation_->clear();
    token_bars_->setBars({});
    mlp_bars_->setBars({});
    heads_->clear();
    neurons_->setRowCount(0);
    return;
  }
  const AttributionResult& r = *result_;
  const RunResult& run = *r.run;
  const hs::InputAttribution& in = r.input;
  const QString metric = metricText();
  const QString method = methodTitle(in.method, in.steps);
  title_->setText(QStringLiteral("<b>Attribution</b> of M = %1 = %2").arg(metric.toHtmlEscaped(), formatNumber(r.target.value)));

  // Input tokens. Positions after the metric's cannot reach it (their bars are 0); position 0 is
  // the baseline's too (BOS), so it is attributed nothing.
  std::vector<BarChartView::Bar> bars;
  bars.reserve(in.attributions.size());
  for (size_t p = 0; p < in.attributions.size(); ++p)
    bars.push_back({run.labels.value(static_cast<int>(p)), in.attributions[p], signedColor(in.attributions[p])});
  token_bars_->setBars(std::move(bars));
  token_bars_->setHighlighted(r.target.pos);
  token_bars_->setValueAxisTitle(QStringLiteral("attribution to M"));
  tokens_caption_->setText(
      QStringLiteral("Each input token's attribution to M by %1: (x − x′) · %2 at its token embedding, x′ the "
                     "baseline (zero token embeddings after the first position).%3")
          .arg(method,
               in.method == hs::InputAttributionMethod::GradXInput ? QStringLiteral("∂M/∂x")
                                                                   : QStringLiteral("the mean of ∂M/∂x along the path"),
               r.target.pos + 1 < run.n_pos()
                   ? QStringLiteral(" Tokens after %1 cannot change it.").arg(tokenAt(run.labels.value(r.target.pos), r.target.pos))
                   : QString()));
  double sum = 0;
  for (double a : in.attributions) sum += a;
  completeness_->setText(QStringLiteral("Completeness: sum of attributions %1 − (M %2 − M(baseline) %3) = %4%5")
                             .arg(formatNumber(sum), formatNumber(in.metric), formatNumber(in.baseline_metric),
                                  formatSigned(in.completeness_error),
                                  in.method == hs::InputAttributionMethod::GradXInput
                                      ? QStringLiteral("  (gradient × input is a first-order estimate: "
                                                       "integrated gradients drives this to 0)")
                                      : QStringLiteral("  (→ 0 as the steps grow)"))
                             .toHtmlEscaped() +
                         warningsHtml(r.warnings));
  const FigureText tokens_text{QStringLiteral("Input attribution (%1) to %2").arg(method, metric), runSubtitle(run)};
  token_bars_->setFigureText(tokens_text, QStringLiteral("attribution_tokens_%1").arg(methodName(in.method)));

  // Heads.
  QStringList layer_labels, head_labels;
  for (int l = 0; l < run.n_layer(); ++l) layer_labels << QStringLiteral("L%1").arg(l);
  for (int h = 0; h < run.n_head(); ++h) head_labels << QStringLiteral("H%1").arg(h);
  const hs::RowMatrixXf& grid = r.components.heads;  // [layer, head]
  heads_->setMatrix(static_cast<int>(grid.rows()), static_cast<int>(grid.cols()),
                    std::vector<float>(grid.data(), grid.data() + grid.size()));
  heads_->setRowLabels(layer_labels);
  heads_->setColumnLabels(head_labels);
  heads_->setColumnLabelsRotated(false);
  heads_->setHighlightedCell(selection_->layer(), selection_->head());
  heads_caption_->setText(QStringLiteral("Each head's estimated effect on M of zero-ablating it, −z·∂M/∂z (its z at "
                                         "every position): red heads raise M, blue ones lower it. Click a head to "
                                         "run the exact ablation."));
  heads_->setFigureText({QStringLiteral("Each head's estimated zero-ablation effect −z·∂M/∂z on %1").arg(metric), runSubtitle(run)},
                        QStringLiteral("attribution_heads"));

  // MLP layers and neurons.
  std::vector<BarChartView::Bar> mlp;
  for (Eigen::Index l = 0; l < r.components.mlp_layers.size(); ++l)
    mlp.push_back({QStringLiteral("L%1 MLP").arg(l), r.components.mlp_layers(l), signedColor(r.components.mlp_layers(l))});
  mlp_bars_->setBars(std::move(mlp));
  mlp_bars_->setFigureText({QStringLiteral("Each MLP's estimated zero-ablation effect −mlp_out·∂M/∂mlp_out on %1").arg(metric), runSubtitle(run)},
                           QStringLiteral("attribution_mlp"));
  mlp_caption_->setText(QStringLiteral("Each MLP layer's estimate −mlp_out·∂M/∂mlp_out, and the %1 neurons with the "
                                       "largest |−post·∂M/∂post|.")
                            .arg(r.top_neurons.size()));
  neurons_->setRowCount(static_cast<int>(r.top_neurons.size()));
  for (size_t i = 0; i < r.top_neurons.size(); ++i) {
    const hs::NeuronEstimate& n = r.top_neurons[i];
    const int row = static_cast<int>(i);
    auto* layer = new QTableWidgetItem(QStringLiteral("L%1").arg(n.layer));
    auto* neuron = new QTableWidgetItem(QString::number(n.neuron));
    auto* value = new QTableWidgetItem(formatSigned(n.value));
    value->setForeground(signedColor(n.value));
    value->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
    neurons_->setItem(row, 0, layer);
    neurons_->setItem(row, 1, neuron);
    neurons_->setItem(row, 2, value);
  }
  updateAblation();
}

void AttributionView::updateAblation() {
  if (!result_) {
    ablation_->clear();
    return;
  }
  const int l = selection_->layer(), h = selection_->head();
  const hs::RowMatrixXf& heads = result_->components.heads;
  if (l >= heads.rows() || h >= heads.cols()) {
    ablation_->clear();
    return;
  }
  QString exact;
  if (const auto e = exactAblation(l, h))
    exact = QStringLiteral("exact zero ablation <b>%1</b> (M %2 → %3)")
                .arg(formatSigned(*e), formatNumber(result_->target.value), formatNumber(result_->target.value + *e));
  else if (asked_head_ == std::make_pair(l, h) && !ablation_error_.isEmpty())
    exact = QStringLiteral("<span style=\"color: #b3261e;\">the exact ablation failed: %1</span>")
                .arg(ablation_error_.toHtmlEscaped());
  else if (asked_head_ == std::make_pair(l, h))
    exact = QStringLiteral("exact zero ablation: running…");
  else
    exact = QStringLiteral("click it to run the exact zero ablation");
  ablation_->setText(QStringLiteral("<b>%1</b>: estimate −z·∂M/∂z <b>%2</b> · %3")
                         .arg(headLabel(l, h), formatSigned(heads(l, h)), exact));
}

std::vector<ExportFigure> AttributionView::exportFigures(const RunResult&) {
  const AnalysisKey key = analysisKey(keyFromSelection(*selection_, descriptor().analysis.reads));
  std::vector<ExportFigure> figures;
  auto plot = [this, key](FigureSource* source, QSize size) {
    return ExportFigure{key, [this, source, size]() -> ExportFigure::Target {
                          if (refresher_->pending()) refresh();
                          return {source, size};
                        }};
  };
  figures.push_back(plot(token_bars_, kFigureSize));
  figures.push_back({key, [this]() -> ExportFigure::Target {
                       if (refresher_->pending()) refresh();
                       heads_->replotNow();
                       return {heads_, QSize(900, 620)};
                     }});
  figures.push_back(plot(mlp_bars_, QSize(700, 500)));
  figures.push_back({key, [this]() -> ExportFigure::Target {
                       if (refresher_->pending()) refresh();
                       return {this, size()};
                     }});
  return figures;
}

FigureText AttributionView::figureText() const {
  if (!result_) return {QStringLiteral("Attribution"), {}};
  return {QStringLiteral("Attribution (%1) of %2")
              .arg(methodTitle(result_->input.method, result_->input.steps), metricText()),
          runSubtitle(*result_->run)};
}

}  // namespace hs::ui
