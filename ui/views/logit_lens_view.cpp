#include "ui/views/logit_lens_view.h"

#include <QComboBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QVBoxLayout>

#include <cmath>
#include <mutex>

#include "core/model/model.h"
#include "ui/controller/selection.h"
#include "ui/views/view_text.h"
#include "ui/widgets/heatmap_view.h"
#include "ui/widgets/labels.h"
#include "ui/widgets/refresh_when_shown.h"
#include "ui/widgets/target_picker.h"

namespace hs::ui {
namespace {

// The last summary computed, so that the next run's summary copies the columns of the tokens
// both share (typing at the end of the prompt computes one column; see logit_lens_summary).
// Analyses run on several workers, hence the mutex.
struct LensMemo {
  std::mutex mutex;
  std::shared_ptr<const hs::LogitLensSummary> last;
};

// A probability: 0.412, or 3.1e-05 when below a thousandth.
QString probabilityText(float p) {
  if (!std::isfinite(p)) return QStringLiteral("–");
  return p >= 0.001f ? QString::number(p, 'f', 3) : formatNumber(p);
}

}  // namespace

ViewDescriptor LogitLensView::descriptor() {
  ViewDescriptor d;
  d.id = QStringLiteral("lens");
  d.title = QStringLiteral("Logit Lens");
  d.menu_text = QStringLiteral("&Logit Lens");
  d.help = QStringLiteral("the logit lens: the top next token after each layer at every position, coloured by "
                          "its probability or the target's");
  d.export_size = QSize(1400, 760);
  auto memo = std::make_shared<LensMemo>();
  d.analysis.id = d.id;
  d.analysis.reads = kReadsTarget;
  d.analysis.compute = [memo](const RunResult& run, const AnalysisKey& key) {
    std::shared_ptr<const hs::LogitLensSummary> previous;
    {
      std::lock_guard<std::mutex> lock(memo->mutex);
      previous = memo->last;
    }
    auto summary = std::make_shared<const hs::LogitLensSummary>(
        hs::logit_lens_summary(*run.run.cache, key.target, kTopK, previous.get()));
    {
      std::lock_guard<std::mutex> lock(memo->mutex);
      memo->last = summary;
    }
    auto r = std::make_shared<LensResult>();
    r->lens = std::move(summary);
    return std::shared_ptr<ViewResult>(std::move(r));
  };
  // A full lens is (n_layers + 1) unembeddings of every position, many times the run's own work:
  // it follows the run as its own job rather than delaying the run's delivery.
  d.analysis.with_every_run = false;
  d.create = [](Selection* selection, QWidget* parent) { return new LogitLensView(selection, parent); };
  return d;
}

LogitLensView::LogitLensView(Selection* selection, QWidget* parent) : AnalysisView(selection, parent) {
  setObjectName(QStringLiteral("logitLensView"));
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(8, 8, 8, 4);
  layout->setSpacing(6);

  auto* controls = new QHBoxLayout;
  controls->setSpacing(10);
  title_ = new QLabel(this);
  title_->setObjectName(QStringLiteral("viewTitle"));
  title_->setWordWrap(true);  // a long title must not set the view's minimum width
  controls->addWidget(title_, 1);  // takes the width the target's controls leave
  controls->addSpacing(12);
  target_ = new TargetPicker(QStringLiteral("Colour by:"), this);
  target_->combo()->setObjectName(QStringLiteral("lensTargetCombo"));
  target_->combo()->setToolTip(QStringLiteral("Colour each cell by the probability of its top token, or of one "
                                              "target token (shared with the Contributions view). Type a token and "
                                              "press Enter (␣ or a leading space for a space)."));
  target_->setResolver([this](const QString& typed, QString* error) -> std::optional<int32_t> {
    return run_ ? typedSingleToken(*run_, typed, error) : std::nullopt;
  });
  controls->addWidget(target_);
  layout->addLayout(controls);

  grid_ = new HeatmapView(this);
  grid_->setObjectName(QStringLiteral("lensGrid"));
  grid_->setColorMap(ColorMap::Sequential);
  grid_->setRangeMode(HeatmapView::RangeMode::Fixed, 0.0, 1.0);
  grid_->setAxisTitles(QStringLiteral("residual stream"), QStringLiteral("position (predicts the next token)"));
  layout->addWidget(grid_, 1);

  caption_ = new QLabel(this);
  caption_->setObjectName(QStringLiteral("sectionCaption"));
  caption_->setWordWrap(true);
  caption_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  layout->addWidget(caption_);

  grid_->setTooltipFormatter([this](int row, int col, float) { return cellTooltip(row, col); });
  connect(grid_, &HeatmapView::cellClicked, this, [this](int row, int col) {
    if (!result_) return;
    // Row i < n_layers is layer i's input; the last row is the last layer's output.
    selection_->setLayer(std::min(row, result_->lens->n_streams - 2));
    selection_->setPosition(col);
  });
  connect(target_, &TargetPicker::targetChosen, selection_, &Selection::setTarget);
  connect(selection_, &Selection::headChanged, this, [this] {
    if (!refresher_->pending()) updateHighlight();
  });
  connect(selection_, &Selection::positionChanged, this, [this] {
    if (!refresher_->pending()) updateHighlight();
  });
  refresher_ = new RefreshWhenShown(this, [this] {
    refreshTargets();
    refresh();
  });
  refresh();
}

void LogitLensView::setResult(std::shared_ptr<const ViewResult> result) {
  result_ = std::dynamic_pointer_cast<const LensResult>(std::move(result));
  if (result_) run_ = result_->run;
  refresher_->request();
}

std::vector<ExportFigure> LogitLensView::exportFigures(const RunResult&) {
  const AnalysisKey key = keyFromSelection(*selection_, descriptor().analysis.reads);
  return {{key, [this]() -> ExportFigure::Target { return {this, size()}; }}};
}

void LogitLensView::refreshTargets() {
  if (!result_) return;
  const RunResult& run = *result_->run;
  setTargetChoices(*target_, run, QStringLiteral("top token's probability"), run.next, result_->lens->target);
}

QComboBox* LogitLensView::targetCombo() const { return target_->combo(); }

QString LogitLensView::cellTooltip(int stream, int pos) const {
  if (!result_) return {};
  const hs::LogitLensSummary& s = *result_->lens;
  const RunResult& run = *result_->run;
  if (stream < 0 || pos < 0 || stream >= s.n_streams || pos >= s.n_pos) return {};
  QStringList lines;
  lines << QStringLiteral("<b>%1</b> after %2")
               .arg(QString::fromStdString(s.stream_labels[static_cast<size_t>(stream)]).toHtmlEscaped(),
                    tokenAt(run.labels.value(pos), pos).toHtmlEscaped());
  for (int k = 0; k < s.top_k; ++k)
    lines << QStringLiteral("%1. %2 &nbsp; %3")
                 .arg(k + 1)
                 .arg(tokenText(run, s.top_id(stream, pos, k)).toHtmlEscaped(), probabilityText(s.top_prob(stream, pos, k)));
  if (s.target) {
    const size_t c = s.cell(stream, pos);
    lines << QStringLiteral("target %1: %2 (rank %3)")
                 .arg(tokenText(run, *s.target).toHtmlEscaped(), probabilityText(s.target_probs[c]))
                 .arg(s.target_ranks[c] + 1);
  }
  return lines.join(QStringLiteral("<br>"));
}

void LogitLensView::refresh() {
  if (!result_) {
    title_->setText(QStringLiteral("<b>Logit Lens</b>"));
    caption_->setText(QStringLiteral("Type a prompt to see what the model would predict after each layer."));
    grid_->clear();
    return;
  }
  const hs::LogitLensSummary& s = *result_->lens;
  const RunResult& run = *result_->run;
  const hs::ModelConfig& c = run.run.cache->config();
  title_->setText(QStringLiteral("<b>Logit Lens</b> &nbsp;the next token the model would predict if the residual "
                                 "stream stopped here"));

  QStringList row_labels, texts;
  for (const std::string& label : s.stream_labels) row_labels << QString::fromStdString(label);
  for (int i = 0; i < s.n_streams; ++i)
    for (int p = 0; p < s.n_pos; ++p) texts << tokenText(run, s.top_id(i, p, 0));
  grid_->setMatrix(s.n_streams, s.n_pos, s.colour_values);
  grid_->setRowLabels(row_labels);
  grid_->setColumnLabels(run.labels);
  grid_->setCellTexts(texts);
  const QString target_text = s.target ? tokenText(run, *s.target) : QString();
  grid_->setColorScaleTitle(s.target ? QStringLiteral("p(%1)").arg(target_text) : QStringLiteral("p(top token)"));
  grid_->setFigureText(figureText(), QStringLiteral("logit_lens_grid"));
  const QString norm = QString::fromUtf8(hs::to_string(c.architecture.norm).data(),
                                         static_cast<int>(hs::to_string(c.architecture.norm).size()));
  caption_->setText(
      QStringLiteral("Row “L<i>l</i> pre” reads the residual stream entering layer <i>l</i>; the last row, “L%1 "
                     "post”, the stream after the last layer, which is the model's own prediction. Each goes through "
                     "the final %2 (its own statistics per position, its learned weight%3), the unembedding%6 and a "
                     "softmax. The text is the most likely next token; the colour is %4. Hover for the top %5; click "
                     "to select the position and layer.")
          .arg(c.n_layers - 1)
          .arg(norm, c.architecture.norm_bias ? QStringLiteral(" and bias") : QString(),
               s.target ? QStringLiteral("the probability of the target %1").arg(target_text)
                        : QStringLiteral("its probability"))
          .arg(s.top_k)
          // Gemma 2: the model caps its logits, cap · tanh(x / cap), and so does the lens.
          .arg(c.architecture.final_softcap > 0.0f
                   ? QStringLiteral(", the final soft-cap (cap · tanh(x / cap), cap = %1)")
                         .arg(formatNumber(c.architecture.final_softcap))
                   : QString()));
  updateHighlight();
}

void LogitLensView::updateHighlight() {
  if (!result_) return;
  grid_->setHighlightedCell(std::clamp(selection_->layer(), 0, result_->lens->n_streams - 1), selection_->position());
}

FigureText LogitLensView::figureText() const {
  if (!result_) return {QStringLiteral("Logit lens"), {}};
  const auto& s = *result_->lens;
  return {s.target ? QStringLiteral("Logit lens: probability of %1 after each layer").arg(tokenText(*result_->run, *s.target))
                   : QStringLiteral("Logit lens: top token after each layer"),
          runSubtitle(*result_->run)};
}

}  // namespace hs::ui
