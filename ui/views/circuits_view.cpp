#include "ui/views/circuits_view.h"

#include <QComboBox>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QSplitter>
#include <QTableWidget>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <tuple>
#include <mutex>

#include "core/model/model.h"
#include "ui/controller/selection.h"
#include "ui/style/colormap.h"
#include "ui/views/view_text.h"
#include "ui/widgets/bar_chart_view.h"
#include "ui/widgets/heatmap_view.h"
#include "ui/widgets/labels.h"
#include "ui/widgets/refresh_when_shown.h"

namespace hs::ui {
namespace {

// The heads' spectra depend on the weights only: computed once per head and model, not per
// keystroke (each reads the whole vocabulary). Analyses run on several workers, hence the mutex.
struct SpectrumMemo {
  std::mutex mutex;
  std::weak_ptr<const hs::Weights> weights;
  std::map<std::tuple<int, int, hs::TokenVectors>, std::shared_ptr<const hs::CircuitSpectrum>> heads;
};

std::shared_ptr<const hs::CircuitSpectrum> spectrumOf(SpectrumMemo& memo, const std::shared_ptr<const hs::Weights>& w,
                                                      int layer, int head, hs::TokenVectors vectors) {
  {
    std::lock_guard<std::mutex> lock(memo.mutex);
    if (memo.weights.lock() != w) {
      memo.heads.clear();
      memo.weights = w;
    }
    const auto it = memo.heads.find({layer, head, vectors});
    if (it != memo.heads.end()) return it->second;
  }
  auto s = std::make_shared<const hs::CircuitSpectrum>(hs::circuit_spectrum(*w, layer, head, vectors));
  std::lock_guard<std::mutex> lock(memo.mutex);
  if (memo.weights.lock() == w) memo.heads[{layer, head, vectors}] = s;
  return s;
}

// The key's token vectors (AnalysisKey::params: empty for the default), resolved for `layer`:
// layer 0's heads read the raw embedding whatever was asked (no MLP runs before them), and the
// view says so.
hs::TokenVectors vectorsOf(const AnalysisKey& key) {
  return key.params.isEmpty() ? hs::TokenVectors::Default : hs::parse_token_vectors(key.params.front().toStdString());
}
hs::TokenVectors resolvedFor(hs::TokenVectors asked, int layer) {
  return layer == 0 ? hs::TokenVectors::Raw : hs::resolve_token_vectors(asked, layer);
}

// Signed bars in the diverging map's ends: red above zero, blue below (ColorBrewer RdBu).
QColor signColor(double v) { return v >= 0 ? QColor(0xb2, 0x18, 0x2b) : QColor(0x21, 0x66, 0xac); }

QString complexText(std::complex<double> z) {
  if (z.imag() == 0.0) return formatNumber(z.real());
  return QStringLiteral("%1 %2 %3i").arg(formatNumber(z.real()), z.imag() < 0 ? QStringLiteral("−") : QStringLiteral("+"),
                                        formatNumber(std::abs(z.imag())));
}

}  // namespace

ViewDescriptor CircuitsView::descriptor() {
  ViewDescriptor d;
  d.id = QStringLiteral("circuits");
  d.title = QStringLiteral("QK / OV");
  d.menu_text = QStringLiteral("&QK / OV Circuits");
  d.help = QStringLiteral("the selected head's QK and OV circuits: singular values, the full OV circuit's "
                          "eigenvalues and copying score, QK scores and promoted tokens over the prompt");
  d.export_size = QSize(1600, 1000);
  d.options = {{QString::fromLatin1(kEmbedding), QStringLiteral("raw|extended|default"),
                QStringLiteral("the QK / OV view's token vectors: raw embedding rows, or through layer 0's MLP "
                               "(default: raw for layer 0's heads, extended after)"),
                ViewOption::Type::Text,
                {QStringLiteral("raw"), QStringLiteral("extended"), QStringLiteral("default")}}};
  auto memo = std::make_shared<SpectrumMemo>();
  d.analysis.id = d.id;
  d.analysis.reads = kReadsLayer | kReadsHead;
  d.analysis.compute = [memo](const RunResult& run, const AnalysisKey& key) {
    const auto& weights = run.run.cache->weights();
    auto r = std::make_shared<CircuitsResult>();
    const hs::TokenVectors vectors = resolvedFor(vectorsOf(key), key.layer);
    r->spectrum = spectrumOf(*memo, weights, key.layer, key.head, vectors);
    r->prompt = hs::prompt_circuits(*weights, key.layer, key.head, run.run.tokens, kTopK, vectors);
    return std::shared_ptr<ViewResult>(std::move(r));
  };
  // A new head's spectrum reads the whole vocabulary, and every run unembeds each prompt token
  // once: its own job, after the run.
  d.analysis.with_every_run = false;
  d.create = [](Selection* selection, QWidget* parent) { return new CircuitsView(selection, parent); };
  return d;
}

CircuitsView::CircuitsView(Selection* selection, QWidget* parent) : AnalysisView(selection, parent) {
  setObjectName(QStringLiteral("circuitsView"));
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(8, 8, 8, 4);
  layout->setSpacing(4);
  title_ = new QLabel(this);
  title_->setObjectName(QStringLiteral("viewTitle"));
  title_->setWordWrap(true);  // a long title must not set the view's minimum width
  folding_ = sectionCaption(this);
  folding_->setObjectName(QStringLiteral("circuitsFolding"));
  // What a token is to the head: the view's one input.
  auto* vectors_row = new QHBoxLayout;
  auto* vectors_label = new QLabel(QStringLiteral("Tokens as:"), this);
  vectors_box_ = new QComboBox(this);
  vectors_box_->setObjectName(QStringLiteral("circuitsTokenVectors"));
  vectors_box_->addItem(QStringLiteral("default: raw for layer 0, extended after"),
                        static_cast<int>(hs::TokenVectors::Default));
  vectors_box_->addItem(QStringLiteral("raw embedding W_E[t]"), static_cast<int>(hs::TokenVectors::Raw));
  vectors_box_->addItem(QStringLiteral("extended embedding W_E[t] + MLP0(W_E[t])"),
                        static_cast<int>(hs::TokenVectors::Extended));
  vectors_box_->setToolTip(QStringLiteral("A head after layer 0 reads each token after layer 0's MLP has written to "
                                          "it: the extended embedding shows what it copies (docs/circuits.md). Layer "
                                          "0's heads always read the raw embedding."));
  vectors_label->setBuddy(vectors_box_);
  vectors_row->addWidget(vectors_label);
  vectors_row->addWidget(vectors_box_);
  vectors_row->addStretch(1);
  layout->addWidget(title_);
  layout->addLayout(vectors_row);
  layout->addWidget(folding_);
  connect(vectors_box_, &QComboBox::currentIndexChanged, this, [this] { Q_EMIT analysisKeyChanged(); });

  auto* vertical = new QSplitter(Qt::Vertical, this);
  vertical->setChildrenCollapsible(false);

  // Above: the spectra.
  auto* top = new QWidget(vertical);
  auto* top_layout = new QGridLayout(top);
  top_layout->setContentsMargins(0, 0, 0, 0);
  top_layout->setHorizontalSpacing(12);
  qk_sv_caption_ = sectionCaption(top);
  ov_sv_caption_ = sectionCaption(top);
  eigen_caption_ = sectionCaption(top);
  eigen_caption_->setObjectName(QStringLiteral("copyingScore"));
  qk_sv_ = new BarChartView(top);
  qk_sv_->setObjectName(QStringLiteral("qkSingularValues"));
  qk_sv_->setValueAxisTitle(QStringLiteral("singular value"));
  ov_sv_ = new BarChartView(top);
  ov_sv_->setObjectName(QStringLiteral("ovSingularValues"));
  ov_sv_->setValueAxisTitle(QStringLiteral("singular value"));
  eigen_ = new BarChartView(top);
  eigen_->setObjectName(QStringLiteral("ovEigenvalues"));
  eigen_->setValueAxisTitle(QStringLiteral("Re λ"));
  eigen_->setLegend({{QStringLiteral("Re λ > 0 (copies)"), signColor(1)}, {QStringLiteral("Re λ < 0"), signColor(-1)}});
  top_layout->addWidget(qk_sv_caption_, 0, 0);
  top_layout->addWidget(ov_sv_caption_, 0, 1);
  top_layout->addWidget(eigen_caption_, 0, 2);
  top_layout->addWidget(qk_sv_, 1, 0);
  top_layout->addWidget(ov_sv_, 1, 1);
  top_layout->addWidget(eigen_, 1, 2);
  top_layout->setRowStretch(1, 1);
  for (int c = 0; c < 3; ++c) top_layout->setColumnStretch(c, 1);

  // Below: the prompt's tokens.
  auto* bottom = new QWidget(vertical);
  auto* bottom_layout = new QHBoxLayout(bottom);
  bottom_layout->setContentsMargins(0, 0, 0, 0);
  bottom_layout->setSpacing(12);
  auto* qk_box = new QVBoxLayout;
  qk_caption_ = sectionCaption(bottom);
  qk_ = new HeatmapView(bottom);
  qk_->setObjectName(QStringLiteral("qkScores"));
  qk_->setColorMap(ColorMap::Diverging);
  qk_->setRangeMode(HeatmapView::RangeMode::Symmetric);
  qk_->setAxisTitles(QStringLiteral("query token (destination)"), QStringLiteral("key token (source)"));
  qk_->setColorScaleTitle(QStringLiteral("e_q W_QK e_kᵀ"));
  qk_box->addWidget(qk_caption_);
  qk_box->addWidget(qk_, 1);
  auto* ov_box = new QVBoxLayout;
  ov_caption_ = sectionCaption(bottom);
  ov_table_ = new QTableWidget(bottom);
  ov_table_->setObjectName(QStringLiteral("ovTable"));
  ov_table_->verticalHeader()->setVisible(false);
  ov_table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  ov_table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  ov_table_->setSelectionMode(QAbstractItemView::SingleSelection);
  ov_table_->setAlternatingRowColors(true);
  ov_table_->setWordWrap(false);
  ov_table_->setMinimumWidth(200);  // scrolls sideways rather than widening the window
  ov_box->addWidget(ov_caption_);
  ov_box->addWidget(ov_table_, 1);
  bottom_layout->addLayout(qk_box, 2);
  bottom_layout->addLayout(ov_box, 3);
  vertical->addWidget(top);
  vertical->addWidget(bottom);
  vertical->setStretchFactor(0, 2);
  vertical->setStretchFactor(1, 3);
  layout->addWidget(vertical, 1);

  qk_->setTooltipFormatter([this](int row, int col, float v) -> QString {
    if (!result_) return {};
    const RunResult& run = *result_->run;
    return QStringLiteral("query %1 ← key %2: %3 (token identities only: no positions, biases or 1/√d_head)")
        .arg(tokenAt(run.labels.value(row), row), tokenAt(run.labels.value(col), col), formatSigned(v));
  });
  connect(qk_, &HeatmapView::cellClicked, this, [this](int row, int) { selection_->setPosition(row); });
  connect(ov_table_, &QTableWidget::cellClicked, this, [this](int row, int) { selection_->setPosition(row); });
  connect(selection_, &Selection::positionChanged, this, [this] {
    if (!refresher_->pending()) updateHighlight();
  });
  refresher_ = new RefreshWhenShown(this, [this] { refresh(); });
  refresh();
}

void CircuitsView::setResult(std::shared_ptr<const ViewResult> result) {
  result_ = std::dynamic_pointer_cast<const CircuitsResult>(std::move(result));
  refresher_->request();
}

std::vector<ExportFigure> CircuitsView::exportFigures(const RunResult&) {
  const AnalysisKey key = analysisKey(keyFromSelection(*selection_, descriptor().analysis.reads));
  return {{key, [this]() -> ExportFigure::Target { return {this, size()}; }}};
}

hs::TokenVectors CircuitsView::tokenVectors() const {
  return static_cast<hs::TokenVectors>(vectors_box_->currentData().toInt());
}

void CircuitsView::setTokenVectors(hs::TokenVectors vectors) {
  vectors_box_->setCurrentIndex(vectors_box_->findData(static_cast<int>(vectors)));
}

AnalysisKey CircuitsView::analysisKey(AnalysisKey selected) const {
  selected.params = tokenVectorParams();
  return selected;
}

QStringList CircuitsView::tokenVectorParams() const {
  const hs::TokenVectors v = tokenVectors();
  if (v == hs::TokenVectors::Default) return {};
  return {QString::fromUtf8(hs::to_string(v).data(), static_cast<int>(hs::to_string(v).size()))};
}

ViewInputs CircuitsView::viewInputs() const {
  const QStringList params = tokenVectorParams();
  if (params.isEmpty()) return {};
  return {{QString::fromLatin1(kEmbedding), params.front()}};
}

void CircuitsView::setViewInputs(const ViewInputs& inputs) {
  // The command line's value was checked against the option's choices; anything else (an empty
  // field) is the default.
  const QString text = inputs.value(QString::fromLatin1(kEmbedding)).toString().trimmed();
  hs::TokenVectors v = hs::TokenVectors::Default;
  if (text == QLatin1String("raw")) v = hs::TokenVectors::Raw;
  if (text == QLatin1String("extended")) v = hs::TokenVectors::Extended;
  setTokenVectors(v);
}

QString CircuitsView::copyingText() const { return eigen_caption_->text(); }

void CircuitsView::fillSingularValues(BarChartView* chart, const std::vector<double>& values, const QString& name) {
  const int D = result_->run->run.cache->config().d_model, dh = static_cast<int>(values.size());
  std::vector<BarChartView::Bar> bars;
  for (int i = 0; i < dh; ++i) bars.push_back({QStringLiteral("σ%1").arg(i + 1), values[static_cast<size_t>(i)], QColor(0x31, 0x82, 0xbd)});
  // The rank is at most d_head: the remaining d_model - d_head singular values are exactly 0.
  if (D > dh) bars.push_back({QStringLiteral("σ%1–σ%2").arg(dh + 1).arg(D), 0.0, QColor(0x96, 0x96, 0x96)});
  chart->setBars(std::move(bars));
  chart->setTooltipFormatter([chart, dh, D, name](int i) {
    if (i >= dh) return QStringLiteral("σ%1 … σ%2 of %3 are 0: a product through d_head = %4 dimensions has rank ≤ %4")
                     .arg(dh + 1)
                     .arg(D)
                     .arg(name)
                     .arg(dh);
    return QStringLiteral("%1 of %2 = %3").arg(chart->bar(i).label, name, formatNumber(chart->bar(i).value));
  });
}

void CircuitsView::refresh() {
  if (!result_) {
    title_->setText(QStringLiteral("<b>QK / OV circuits</b>"));
    folding_->setText(QStringLiteral("Select a head to see its QK and OV circuits."));
    for (QLabel* l : {qk_sv_caption_, ov_sv_caption_, eigen_caption_, qk_caption_, ov_caption_}) l->clear();
    for (BarChartView* b : {qk_sv_, ov_sv_, eigen_}) b->setBars({});
    qk_->clear();
    ov_table_->setRowCount(0);
    return;
  }
  const hs::CircuitSpectrum& s = *result_->spectrum;
  const hs::PromptCircuits& p = result_->prompt;
  const RunResult& run = *result_->run;
  const hs::ModelConfig& c = run.run.cache->config();
  const QString head = headLabel(s.layer, s.head);
  const int dh = c.d_head, D = c.d_model;
  title_->setText(QStringLiteral("<b>%1</b> &nbsp;QK circuit W_QK = W_Q W_Kᵀ (what the head looks for) and OV circuit "
                                 "W_OV = W_V W_O (what it moves), each %2 × %2 of rank ≤ d_head = %3")
                      .arg(head)
                      .arg(D)
                      .arg(dh));
  const QString norm = QString::fromUtf8(hs::to_string(c.architecture.norm).data(),
                                         static_cast<int>(hs::to_string(c.architecture.norm).size()));
  // What the tokens are: a head after layer 0 reads each token through layer 0's MLP.
  const QString tokens =
      s.vectors == hs::TokenVectors::Extended
          ? QStringLiteral("<b>Tokens are the extended embedding</b> W_E[t] + MLP0(W_E[t]) (layer 0's MLP with its "
                           "%1, weights and biases; no position, no layer-0 attention), then this layer's %1 "
                           "without weight or bias (centred and scaled)")
                .arg(norm)
          : QStringLiteral("<b>Tokens are the raw embedding rows</b> W_E[t]%1")
                .arg(s.layer == 0 ? (tokenVectors() == hs::TokenVectors::Extended
                                         ? QStringLiteral(" (not the extended embedding asked for: a layer-0 head "
                                                          "reads the tokens before any MLP)")
                                         : QStringLiteral(" (a layer-0 head reads them before any MLP)"))
                                  : QString());
  folding_->setText(QStringLiteral("%2. Folded: the layer's first %1 weight into W_Q, W_K and W_V; the final %1 weight "
                                   "into W_U. Ignored: every bias (b_Q, b_K, b_V, b_O, the norms'), positions, and "
                                   "1/√d_head%3. Never materialized: singular values come from d_head × d_head "
                                   "products of the factors.")
                        .arg(norm, tokens,
                             s.vectors == hs::TokenVectors::Raw ? QStringLiteral(", the norms' centring and division by "
                                                                                 "each vector's scale")
                                                                : QString()));

  fillSingularValues(qk_sv_, s.qk_singular_values, QStringLiteral("W_QK"));
  fillSingularValues(ov_sv_, s.ov_singular_values, QStringLiteral("W_OV"));
  qk_sv_caption_->setText(QStringLiteral("<b>Singular values of W_QK</b> (%1 × %1): %2 nonzero, the other %3 are 0")
                              .arg(D)
                              .arg(dh)
                              .arg(D - dh));
  ov_sv_caption_->setText(QStringLiteral("<b>Singular values of W_OV</b> (%1 × %1): %2 nonzero, the other %3 are 0")
                              .arg(D)
                              .arg(dh)
                              .arg(D - dh));

  // One eigenvalue far larger than the others (the built-in model's L3H2 on raw embeddings has one
  // near -3900 among values of a few tens) would flatten every other bar: the axis then spans the
  // others, and an outlier's bar runs off it, its value in its label and in the caption.
  std::vector<double> magnitudes;
  for (const auto& z : s.ov_eigenvalues) magnitudes.push_back(std::abs(z.real()));
  std::sort(magnitudes.begin(), magnitudes.end(), std::greater<>());
  constexpr double kOutlierRatio = 8.0;
  const double outlier_above = magnitudes.size() >= 2 && magnitudes[1] > 0.0 && magnitudes[0] > kOutlierRatio * magnitudes[1]
                                   ? kOutlierRatio * magnitudes[1]
                                   : INFINITY;
  std::vector<BarChartView::Bar> bars;
  QStringList clipped;
  double lo = 0.0, hi = 0.0;
  for (size_t i = 0; i < s.ov_eigenvalues.size(); ++i) {
    const double re = s.ov_eigenvalues[i].real();
    QString label = QStringLiteral("λ%1").arg(i + 1);
    if (std::abs(re) > outlier_above) {
      clipped << QStringLiteral("%1 = %2").arg(label, formatNumber(re));
      label += QStringLiteral(" (%1)").arg(formatNumber(re));
    } else {
      lo = std::min(lo, re);
      hi = std::max(hi, re);
    }
    bars.push_back({label, re, signColor(re)});
  }
  eigen_->setBars(std::move(bars));
  if (clipped.isEmpty()) {
    eigen_->clearValueRange();
  } else {
    const double pad = (hi - lo) * 0.15 + 1e-9;
    eigen_->setValueRange(lo - pad, hi + pad);
  }
  eigen_->setTooltipFormatter([spectrum = result_->spectrum](int i) {
    return QStringLiteral("λ%1 = %2 (|λ| = %3)")
        .arg(i + 1)
        .arg(complexText(spectrum->ov_eigenvalues[static_cast<size_t>(i)]),
             formatNumber(std::abs(spectrum->ov_eigenvalues[static_cast<size_t>(i)])));
  });
  eigen_caption_->setText(QStringLiteral("<b>Full OV circuit E W_OV W_U</b> (%1 × %1, E the %4 embedding): its %2 "
                                         "nonzero eigenvalues (real parts; complex pairs share one). Copying score "
                                         "Σλ / Σ|λ| = <b>%3</b>%5")
                              .arg(c.d_vocab)
                              .arg(dh)
                              .arg(QString::number(s.copying_score, 'f', 3),
                                   s.vectors == hs::TokenVectors::Extended ? QStringLiteral("extended")
                                                                           : QStringLiteral("raw"),
                                   clipped.isEmpty() ? QString()
                                                     : QStringLiteral(". Off the axis, so that the others show: %1")
                                                           .arg(clipped.join(QStringLiteral(", ")))));

  const int n = static_cast<int>(p.tokens.size());
  qk_->setMatrix(n, n, std::vector<float>(p.qk_scores.data(), p.qk_scores.data() + p.qk_scores.size()));
  qk_->setRowLabels(run.labels);
  qk_->setColumnLabels(run.labels);
  qk_caption_->setText(QStringLiteral("<b>QK scores over the prompt's tokens</b>, E W_QK Eᵀ: how much a query token "
                                      "looks for a key token, by their identities alone. Red: attends more."));
  fillOvTable();

  const QString subtitle = runSubtitle(run);
  qk_sv_->setFigureText({QStringLiteral("%1 singular values of W_QK").arg(head), subtitle},
                        QStringLiteral("circuits_qk_sv_%1").arg(head));
  ov_sv_->setFigureText({QStringLiteral("%1 singular values of W_OV").arg(head), subtitle},
                        QStringLiteral("circuits_ov_sv_%1").arg(head));
  eigen_->setFigureText({QStringLiteral("%1 full OV circuit eigenvalues, copying score %2")
                             .arg(head, QString::number(s.copying_score, 'f', 3)),
                         subtitle},
                        QStringLiteral("circuits_ov_eigenvalues_%1").arg(head));
  qk_->setFigureText({QStringLiteral("%1 QK scores E W_QK Eᵀ over the prompt's tokens").arg(head), subtitle},
                     QStringLiteral("circuits_qk_scores_%1").arg(head));
  updateHighlight();
}

void CircuitsView::fillOvTable() {
  const hs::PromptCircuits& p = result_->prompt;
  const RunResult& run = *result_->run;
  const int n = static_cast<int>(p.tokens.size()), k = p.top_k, shown = std::min(kShownTop, p.top_k);
  ov_caption_->setText(QStringLiteral("<b>What each token's OV circuit promotes</b>, its row of E W_OV W_U: the "
                                      "direct effect on the logits when the head attends to it (top %1; hover for %2)")
                           .arg(shown)
                           .arg(k));
  // The token's own entry first: whether it copies itself is what the table is read for, and it
  // must not hide behind the horizontal scroll bar of a narrow window.
  QStringList headers = {QStringLiteral("token"), QStringLiteral("itself (rank)")};
  for (int j = 0; j < shown; ++j) headers << QStringLiteral("#%1").arg(j + 1);
  ov_table_->setColumnCount(static_cast<int>(headers.size()));
  ov_table_->setHorizontalHeaderLabels(headers);
  ov_table_->setRowCount(n);
  for (int i = 0; i < n; ++i) {
    QStringList all;
    for (int j = 0; j < k; ++j)
      all << QStringLiteral("%1. %2 %3")
                 .arg(j + 1)
                 .arg(tokenText(run, p.ov_top_ids[static_cast<size_t>(i * k + j)]),
                      formatSigned(p.ov_top_logits[static_cast<size_t>(i * k + j)]));
    const QString tooltip = QStringLiteral("%1 promotes:\n%2").arg(tokenAt(run.labels.value(i), i), all.join('\n'));
    auto set = [&](int col, const QString& text, bool bold = false) {
      auto* item = new QTableWidgetItem(text);
      item->setToolTip(tooltip);
      if (bold) {
        QFont f = item->font();
        f.setBold(true);
        item->setFont(f);
      }
      ov_table_->setItem(i, col, item);
    };
    set(0, tokenAt(run.labels.value(i), i));
    set(1, QStringLiteral("%1 (#%2)")
               .arg(formatSigned(p.ov_self_logits[static_cast<size_t>(i)]))
               .arg(p.ov_self_ranks[static_cast<size_t>(i)] + 1),
        p.ov_self_ranks[static_cast<size_t>(i)] == 0);
    for (int j = 0; j < shown; ++j) {
      const int32_t id = p.ov_top_ids[static_cast<size_t>(i * k + j)];
      // The token itself among what it promotes: copying, in bold.
      set(j + 2, QStringLiteral("%1  %2").arg(tokenText(run, id), formatSigned(p.ov_top_logits[static_cast<size_t>(i * k + j)])),
          id == p.tokens[static_cast<size_t>(i)]);
    }
  }
  ov_table_->resizeColumnsToContents();
  ov_table_->resizeRowsToContents();
}

void CircuitsView::updateHighlight() {
  if (!result_) return;
  const int pos = selection_->position();
  qk_->setHighlightedRow(pos);
  QSignalBlocker block(ov_table_);
  if (pos >= 0 && pos < ov_table_->rowCount()) ov_table_->selectRow(pos);
}

FigureText CircuitsView::figureText() const {
  if (!result_) return {QStringLiteral("QK / OV circuits"), {}};
  return {QStringLiteral("%1 QK and OV circuits: copying score %2")
              .arg(headLabel(result_->spectrum->layer, result_->spectrum->head),
                   QString::number(result_->spectrum->copying_score, 'f', 3)),
          runSubtitle(*result_->run)};
}

QString CircuitsView::figureFileStem() const {
  return result_ ? QStringLiteral("circuits_%1").arg(headLabel(result_->spectrum->layer, result_->spectrum->head))
                 : QStringLiteral("circuits");
}

}  // namespace hs::ui
