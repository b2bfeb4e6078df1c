#include "ui/views/contributions_view.h"

#include <QButtonGroup>
#include <QComboBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QMenu>
#include <QRadioButton>
#include <QSplitter>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>

#include "core/model/model.h"
#include "ui/controller/selection.h"
#include "ui/base/figure.h"
#include "ui/views/view_text.h"
#include "ui/widgets/bar_chart_view.h"
#include "ui/widgets/heatmap_view.h"
#include "ui/widgets/labels.h"
#include "ui/widgets/refresh_when_shown.h"
#include "ui/widgets/target_picker.h"

namespace hs::ui {
namespace {

QColor kindColor(hs::ComponentKind kind) {
  switch (kind) {
    case hs::ComponentKind::Embed: return QColor(0x52, 0x52, 0x52);
    case hs::ComponentKind::PosEmbed: return QColor(0x96, 0x96, 0x96);
    case hs::ComponentKind::Head: return QColor(0x31, 0x82, 0xbd);
    case hs::ComponentKind::AttnBias: return QColor(0x9e, 0xca, 0xe1);
    case hs::ComponentKind::Mlp: return QColor(0x31, 0xa3, 0x54);
  }
  return Qt::gray;
}

QString kindLabel(hs::ComponentKind kind) {
  switch (kind) {
    case hs::ComponentKind::Embed: return QStringLiteral("embed");
    case hs::ComponentKind::PosEmbed: return QStringLiteral("pos_embed");
    case hs::ComponentKind::Head: return QStringLiteral("head result");
    case hs::ComponentKind::AttnBias: return QStringLiteral("attention bias b_O");
    case hs::ComponentKind::Mlp: return QStringLiteral("MLP out");
  }
  return {};
}

}  // namespace

ViewDescriptor ContributionsView::descriptor() {
  ViewDescriptor d;
  d.id = QStringLiteral("contributions");
  d.title = QStringLiteral("Contributions");
  d.menu_text = QStringLiteral("&Contributions");
  d.help = QStringLiteral("what each head and MLP adds to the residual stream at the selected position "
                          "(write norms and direct logit attribution)");
  d.export_size = QSize(1400, 900);
  d.analysis.id = d.id;
  d.analysis.reads = kReadsPosition | kReadsTarget;
  d.analysis.compute = [](const RunResult& run, const AnalysisKey& key) {
    auto r = std::make_shared<PositionResult>();
    static_cast<hs::PositionAnalysis&>(*r) = hs::analyze_position(*run.run.cache, key.pos, key.target, kTopK);
    return std::shared_ptr<ViewResult>(std::move(r));
  };
  d.create = [](Selection* selection, QWidget* parent) { return new ContributionsView(selection, parent); };
  return d;
}

ContributionsView::ContributionsView(Selection* selection, QWidget* parent) : AnalysisView(selection, parent) {
  setObjectName(QStringLiteral("contributionsView"));
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(8, 8, 8, 4);
  layout->setSpacing(6);

  auto* controls = new QHBoxLayout;
  controls->setSpacing(10);
  position_ = new QLabel(this);
  position_->setObjectName(QStringLiteral("viewTitle"));
  controls->addWidget(position_);
  controls->addSpacing(12);
  norm_button_ = new QRadioButton(QStringLiteral("Head write norm ‖r_h‖"), this);
  norm_button_->setObjectName(QStringLiteral("modeNorm"));
  dla_button_ = new QRadioButton(QStringLiteral("Direct logit attribution"), this);
  dla_button_->setObjectName(QStringLiteral("modeDla"));
  norm_button_->setChecked(true);
  auto* group = new QButtonGroup(this);
  group->addButton(norm_button_);
  group->addButton(dla_button_);
  controls->addWidget(norm_button_);
  controls->addWidget(dla_button_);
  controls->addSpacing(12);
  target_ = new TargetPicker(QStringLiteral("Target token:"), this);
  target_->combo()->setObjectName(QStringLiteral("targetCombo"));
  target_->combo()->setToolTip(QStringLiteral("The token whose logit the attribution explains. Pick one of the "
                                              "model's top predictions, or type a token (␣ or a leading space for "
                                              "a space)."));
  target_->setResolver([this](const QString& typed, QString* error) -> std::optional<int32_t> {
    return run_ ? typedSingleToken(*run_, typed, error) : std::nullopt;
  });
  controls->addWidget(target_);
  controls->addStretch(1);
  layout->addLayout(controls);

  auto* splitter = new QSplitter(Qt::Vertical, this);
  splitter->setChildrenCollapsible(false);
  auto* top = new QWidget(splitter);
  auto* top_layout = new QVBoxLayout(top);
  top_layout->setContentsMargins(0, 0, 0, 0);
  top_layout->setSpacing(2);
  heads_caption_ = new QLabel(top);
  heads_caption_->setObjectName(QStringLiteral("sectionCaption"));
  heads_ = new HeatmapView(top);
  heads_->setObjectName(QStringLiteral("contribHeadHeatmap"));
  heads_->setAxisTitles(QStringLiteral("layer"), QStringLiteral("head"));
  top_layout->addWidget(heads_caption_);
  top_layout->addWidget(heads_, 1);
  auto* bottom = new QWidget(splitter);
  auto* bottom_layout = new QVBoxLayout(bottom);
  bottom_layout->setContentsMargins(0, 0, 0, 0);
  bottom_layout->setSpacing(2);
  bars_caption_ = new QLabel(bottom);
  bars_caption_->setObjectName(QStringLiteral("sectionCaption"));
  bars_ = new BarChartView(bottom);
  bars_->setObjectName(QStringLiteral("contribBars"));
  check_ = new QLabel(bottom);
  check_->setObjectName(QStringLiteral("contribCheck"));
  check_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  bottom_layout->addWidget(bars_caption_);
  bottom_layout->addWidget(bars_, 1);
  bottom_layout->addWidget(check_);
  splitter->addWidget(top);
  splitter->addWidget(bottom);
  splitter->setStretchFactor(0, 2);
  splitter->setStretchFactor(1, 3);
  layout->addWidget(splitter, 1);

  connect(norm_button_, &QRadioButton::toggled, this, [this](bool on) {
    if (on) setMode(Mode::WriteNorm);
  });
  connect(dla_button_, &QRadioButton::toggled, this, [this](bool on) {
    if (on) setMode(Mode::LogitAttribution);
  });
  // Choosing a target is asking for its attribution.
  connect(target_, &TargetPicker::targetChosen, this, [this](std::optional<int32_t> target) {
    selection_->setTarget(target);
    if (mode_ != Mode::LogitAttribution) dla_button_->setChecked(true);
  });
  connect(heads_, &HeatmapView::cellClicked, this, [this](int row, int col) { selection_->setHead(row, col); });
  connect(heads_, &HeatmapView::cellContextMenu, this,
          [this](int row, int col, QMenu* menu) { Q_EMIT headContextMenu(row, col, menu); });
  connect(bars_, &BarChartView::barClicked, this, [this](int index) {
    if (!result_) return;
    const auto& parts = result_->parts;
    if (index < static_cast<int>(parts.heads.size()) && parts.heads[static_cast<size_t>(index)] >= 0)
      selection_->setHead(parts.layers[static_cast<size_t>(index)], parts.heads[static_cast<size_t>(index)]);
  });
  connect(selection_, &Selection::headChanged, this, [this] {
    if (!refresher_->pending()) updateHighlights();  // else the owed refresh draws them
  });
  refresher_ = new RefreshWhenShown(this, [this] {
    refreshTargets();
    refresh();
  });
  refresh();
}

void ContributionsView::setRun(std::shared_ptr<const RunResult> run) { run_ = std::move(run); }

void ContributionsView::setResult(std::shared_ptr<const ViewResult> result) {
  setPositionResult(std::dynamic_pointer_cast<const PositionResult>(std::move(result)));
}

std::vector<ExportFigure> ContributionsView::exportFigures(const RunResult&) {
  const AnalysisKey key = keyFromSelection(*selection_, descriptor().analysis.reads);
  std::vector<ExportFigure> figures;
  for (Mode mode : {Mode::WriteNorm, Mode::LogitAttribution})
    figures.push_back({key, [this, mode]() -> ExportFigure::Target {
                         setMode(mode);
                         return {this, size()};
                       }});
  return figures;
}

void ContributionsView::setPositionResult(std::shared_ptr<const PositionResult> result) {
  result_ = std::move(result);
  if (result_) run_ = result_->run;
  refresher_->request();
}

void ContributionsView::setMode(Mode mode) {
  mode_ = mode;
  QSignalBlocker b1(norm_button_), b2(dla_button_);
  norm_button_->setChecked(mode == Mode::WriteNorm);
  dla_button_->setChecked(mode == Mode::LogitAttribution);
  if (!refresher_->pending()) refresh();  // else the owed refresh uses the new mode
}

void ContributionsView::refreshTargets() {
  if (!result_) return;
  const RunResult& run = *result_->run;
  const QString predicted = result_->top.empty() ? QStringLiteral("–") : predictionText(run, result_->top.front());
  setTargetChoices(*target_, run, QStringLiteral("predicted: %1").arg(predicted), result_->top,
                   result_->target_is_prediction ? std::nullopt : std::optional<int32_t>(result_->target));
}

QString ContributionsView::checkText() const { return check_->text(); }

void ContributionsView::refresh() {
  if (!result_) {
    position_->setText(QStringLiteral("Contributions"));
    heads_caption_->clear();
    bars_caption_->setText(QStringLiteral("Type a prompt to see what each head and MLP adds to the residual stream."));
    check_->clear();
    heads_->clear();
    bars_->setBars({});
    return;
  }
  const RunResult& run = *result_->run;
  const auto& parts = result_->parts;
  const auto& dla = result_->dla;
  const int pos = result_->pos;
  const QString pos_text = tokenAt(run.labels.value(pos), pos);
  const QString target_text = tokenText(run, result_->target);
  // Gemma: each head's result passes the post-attention norm before it joins the stream; the heads
  // are linear parts of it with that norm's scale frozen (the MLP part is hook_mlp_out itself).
  const hs::Architecture& arch = run.run.cache->config().architecture;
  const QString post_norm_text =
      arch.post_attn_norm
          ? QStringLiteral(", each head's result through the post-attention norm, its scale frozen at this run's value")
          : QString();
  // Gemma 2: logits = cap · tanh(x / cap); the parts add up to x, the logit before the cap.
  const float final_cap = arch.final_softcap;
  const QString softcap_text =
      final_cap > 0.0f ? QStringLiteral(", logits before the final soft-cap (cap = %1)").arg(formatNumber(final_cap))
                       : QString();
  position_->setText(QStringLiteral("<b>Position %1</b>").arg(pos_text.toHtmlEscaped()));
  const bool norms = mode_ == Mode::WriteNorm;

  QStringList layer_labels, head_labels;
  for (int l = 0; l < run.n_layer(); ++l) layer_labels << QStringLiteral("L%1").arg(l);
  for (int h = 0; h < run.n_head(); ++h) head_labels << QStringLiteral("H%1").arg(h);
  const hs::RowMatrixXf& grid = norms ? result_->write_norms : dla.per_head;  // [layer, head]
  heads_->setMatrix(static_cast<int>(grid.rows()), static_cast<int>(grid.cols()),
                    std::vector<float>(grid.data(), grid.data() + grid.size()));
  heads_->setRowLabels(layer_labels);
  heads_->setColumnLabels(head_labels);
  heads_->setColumnLabelsRotated(false);
  if (norms) {
    heads_->setColorMap(ColorMap::Sequential);
    heads_->setRangeMode(HeatmapView::RangeMode::ZeroToMax);
    // Not "‖r_h‖": rotated at the scale's size, U+2016 draws as two solid bars and the title
    // cannot be read (issue 21 item 7).
    heads_->setColorScaleTitle(QStringLiteral("write norm |r_h|"));
    heads_caption_->setText(QStringLiteral("How much each head writes into the residual stream at %1: the norm of its "
                                           "result z_h · W_O[h]%2. Click a cell to select the head.")
                                .arg(pos_text, post_norm_text));
  } else {
    heads_->setColorMap(ColorMap::Diverging);
    heads_->setRangeMode(HeatmapView::RangeMode::Symmetric);
    heads_->setColorScaleTitle(QStringLiteral("logit of %1").arg(target_text));
    heads_caption_->setText(QStringLiteral("Direct logit attribution of each head to %1 at %2 (final %3 scale "
                                           "frozen%4)%5: red pushes the logit up, blue pushes it down.")
                                .arg(target_text, pos_text, QString::fromStdString(std::string(hs::to_string(run.run.cache->config().architecture.norm))),
                                     post_norm_text, softcap_text));
  }
  heads_->setTooltipFormatter([norms, target_text](int l, int h, float v) {
    return norms ? QStringLiteral("%1: ‖r_h‖ = %2").arg(headLabel(l, h), formatNumber(v))
                 : QStringLiteral("%1: %2 to the logit of %3").arg(headLabel(l, h), formatSigned(v), target_text);
  });
  const QString stem_mode = norms ? QStringLiteral("norm") : QStringLiteral("dla");
  heads_->setFigureText({norms ? QStringLiteral("Head write norms at %1").arg(pos_text)
                               : QStringLiteral("Direct logit attribution to %1 at %2").arg(target_text, pos_text),
                         runSubtitle(run)},
                        QStringLiteral("contributions_heads_%1_pos%2").arg(stem_mode).arg(pos));

  std::vector<BarChartView::Bar> bars;
  bars.reserve(parts.labels.size());
  for (size_t i = 0; i < parts.labels.size(); ++i) {
    const double v = norms ? parts.norms[i] : dla.per_component[i];
    bars.push_back({QString::fromStdString(parts.labels[i]), v, kindColor(parts.kinds[i])});
  }
  // The legend names the kinds this model's decomposition has: no pos_embed bar for a model whose
  // positions enter inside attention (rotary), no b_O bar for one without attention biases.
  std::vector<std::pair<QString, QColor>> legend;
  for (hs::ComponentKind kind : {hs::ComponentKind::Embed, hs::ComponentKind::PosEmbed, hs::ComponentKind::Head,
                                 hs::ComponentKind::AttnBias, hs::ComponentKind::Mlp})
    if (std::find(parts.kinds.begin(), parts.kinds.end(), kind) != parts.kinds.end())
      legend.push_back({kindLabel(kind), kindColor(kind)});
  if (legend != bars_->legend()) bars_->setLegend(legend);
  bars_->setBars(std::move(bars));
  const QString no_positions =
      run.run.cache->has_pos_embed()
          ? QString()
          : QStringLiteral(" No part stands for position: this model has no position embedding (positions "
                           "enter inside attention, rotating queries and keys).");
  bars_->setValueAxisTitle(norms ? QStringLiteral("norm |component|") : QStringLiteral("logit contribution"));
  bars_->setTooltipFormatter([this, norms, target_text](int i) {
    const auto& b = bars_->bar(i);
    return norms ? QStringLiteral("%1: ‖·‖ = %2").arg(b.label, formatNumber(b.value))
                 : QStringLiteral("%1: %2 to the logit of %3").arg(b.label, formatSigned(b.value), target_text);
  });
  bars_->setFigureText({norms ? QStringLiteral("Residual stream components at %1").arg(pos_text)
                              : QStringLiteral("Logit attribution to %1 at %2, by component").arg(target_text, pos_text),
                        runSubtitle(run)},
                       QStringLiteral("contributions_components_%1_pos%2").arg(stem_mode).arg(pos));
  if (norms) {
    bars_caption_->setText(QStringLiteral("The final residual stream at %1 is the sum of these %2 parts (norm of "
                                          "each%3).%4")
                               .arg(pos_text)
                               .arg(parts.labels.size())
                               .arg(post_norm_text, no_positions));
    // Rounding is all a plain run leaves; an edited run (latent edits or steering spliced at a hook
    // of the stream) adds to the residual something that is none of these parts: said, not called
    // rounding.
    const double scale = std::max(1.0, static_cast<double>(parts.residual.cwiseAbs().maxCoeff()));
    const bool beyond_rounding = parts.max_abs_error > 1e-3 * scale;
    const QString why = beyond_rounding && !run.ablations().empty()
                            ? QStringLiteral("the run is edited: an edit of the residual stream is none of these parts")
                        : beyond_rounding ? QStringLiteral("more than float32 rounding")
                                          : QStringLiteral("float32 rounding");
    check_->setText(QStringLiteral("Check: max |sum of parts − residual| = %1  (over d_model = %2; %3)")
                        .arg(formatNumber(parts.max_abs_error))
                        .arg(parts.residual.size())
                        .arg(why));
  } else {
    bars_caption_->setText(QStringLiteral("Each part's direct contribution to the logit of %1 (logit = %2)%3.%4")
                               .arg(target_text, formatNumber(dla.logit), softcap_text, no_positions));
    check_->setText(QStringLiteral("Check: sum of parts + final norm's bias term (%1) − logit%4 (%2) = %3")
                        .arg(formatSigned(dla.bias_term), formatNumber(dla.logit), formatNumber(dla.max_abs_error),
                             final_cap > 0.0f ? QStringLiteral(" before the final soft-cap") : QString()));
  }
  updateHighlights();
}

void ContributionsView::updateHighlights() {
  heads_->setHighlightedCell(selection_->layer(), selection_->head());
  if (!result_) return;
  const auto& parts = result_->parts;
  int index = -1;
  for (size_t i = 0; i < parts.heads.size(); ++i)
    if (parts.layers[i] == selection_->layer() && parts.heads[i] == selection_->head()) index = static_cast<int>(i);
  bars_->setHighlighted(index);
}

FigureText ContributionsView::figureText() const {
  if (!result_) return {QStringLiteral("Contributions"), {}};
  const RunResult& run = *result_->run;
  const QString pos_text = tokenAt(run.labels.value(result_->pos), result_->pos);
  return {mode_ == Mode::WriteNorm
              ? QStringLiteral("Contributions to the residual stream at %1").arg(pos_text)
              : QStringLiteral("Direct logit attribution to %1 at %2").arg(tokenText(run, result_->target), pos_text),
          runSubtitle(run)};
}

QString ContributionsView::figureFileStem() const {
  const int pos = result_ ? result_->pos : 0;
  return QStringLiteral("contributions_%1_pos%2").arg(mode_ == Mode::WriteNorm ? "norm" : "dla").arg(pos);
}

}  // namespace hs::ui
