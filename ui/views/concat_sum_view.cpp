#include "ui/views/concat_sum_view.h"

#include <QFrame>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QSplitter>
#include <QTableWidget>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>

#include "core/model/model.h"
#include "ui/controller/grid_images.h"
#include "ui/controller/selection.h"
#include "ui/views/view_text.h"
#include "ui/widgets/heatmap_view.h"
#include "ui/widgets/image_grid_view.h"
#include "ui/widgets/labels.h"
#include "ui/widgets/refresh_when_shown.h"

namespace hs::ui {
namespace {

std::vector<float> toVector(const hs::RowMatrixXf& m) { return std::vector<float>(m.data(), m.data() + m.size()); }

QLabel* plotCaption(QWidget* parent, const QString& object_name = QStringLiteral("plotCaption")) {
  auto* label = new QLabel(parent);
  label->setObjectName(object_name);
  label->setAlignment(Qt::AlignCenter);
  label->setWordWrap(true);
  return label;
}

QLabel* operatorLabel(QWidget* parent, const QString& text) {
  auto* label = new QLabel(text, parent);
  label->setObjectName(QStringLiteral("operatorLabel"));
  label->setAlignment(Qt::AlignCenter);
  return label;
}

// `scale_title`: what the colours are (every heatmap's colour scale says, in the window and in
// its exported figure).
HeatmapView* signedPlot(QWidget* parent, const QString& name, const QString& scale_title) {
  auto* plot = new HeatmapView(parent);
  plot->setObjectName(name);
  plot->setColorScaleTitle(scale_title);
  plot->setColorMap(ColorMap::Diverging);
  plot->setRangeMode(HeatmapView::RangeMode::Symmetric);
  plot->setMinimumSize(120, 120);
  plot->setCompact(true);
  return plot;
}

QFrame* panel(QWidget* parent, const QString& name) {
  auto* frame = new QFrame(parent);
  frame->setObjectName(name);
  frame->setFrameShape(QFrame::StyledPanel);
  return frame;
}

}  // namespace

ViewDescriptor ConcatSumView::descriptor() {
  ViewDescriptor d;
  d.id = QStringLiteral("concat");
  d.title = QStringLiteral("Concat vs Sum");
  d.menu_text = QStringLiteral("Concat vs &Sum");
  d.help = QStringLiteral("concat(z) x W_O beside sum_h z_h x W_O[h] for the selected layer, their difference "
                          "and the shapes at every step");
  d.export_size = QSize(1600, 1000);
  d.analysis.id = d.id;
  d.analysis.reads = kReadsLayer;
  d.analysis.compute = [](const RunResult& run, const AnalysisKey& key) {
    auto r = std::make_shared<LayerResult>();
    static_cast<hs::LayerAnalysis&>(*r) = hs::analyze_layer(*run.run.cache, key.layer);
    for (const hs::PooledGrid& grid : r->head_results_pooled)
      r->head_result_images.push_back(signedImage(grid, r->head_range));
    return std::shared_ptr<ViewResult>(std::move(r));
  };
  d.create = [](Selection* selection, QWidget* parent) { return new ConcatSumView(selection, parent); };
  return d;
}

ConcatSumView::ConcatSumView(Selection* selection, QWidget* parent) : AnalysisView(selection, parent) {
  setObjectName(QStringLiteral("concatSumView"));
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(8, 8, 8, 4);
  layout->setSpacing(6);
  title_ = new QLabel(this);
  title_->setObjectName(QStringLiteral("viewTitle"));
  title_->setWordWrap(true);
  layout->addWidget(title_);

  // Three rows, each the view's full width: concat · W_O, the per-head sum, then the difference
  // and the shapes. Side by side, at the default window size, z got about 50 px of width and each
  // r_h about 35 px; a row of its own gives z and W_O room for their head bands and r_h a row of
  // thumbnails big enough to compare.
  auto* vertical = new QSplitter(Qt::Vertical, this);
  vertical->setObjectName(QStringLiteral("concatSumRows"));
  vertical->setChildrenCollapsible(false);

  // Concatenate, then project.
  QFrame* top = panel(vertical, QStringLiteral("concatPanel"));
  auto* top_layout = new QVBoxLayout(top);
  top_layout->setContentsMargins(6, 4, 6, 4);
  top_layout->setSpacing(2);
  concat_caption_ = plotCaption(top, QStringLiteral("panelTitle"));
  concat_caption_->setText(QStringLiteral("Concatenate the heads, then project"));
  top_layout->addWidget(concat_caption_);
  auto* grid = new QGridLayout;
  grid->setHorizontalSpacing(4);
  grid->setVerticalSpacing(2);
  z_caption_ = plotCaption(top);
  wo_caption_ = plotCaption(top);
  concat_out_caption_ = plotCaption(top);
  z_ = signedPlot(top, QStringLiteral("concatZ"), QStringLiteral("z"));
  wo_ = signedPlot(top, QStringLiteral("concatWO"), QStringLiteral("W_O"));
  concat_out_ = signedPlot(top, QStringLiteral("concatOut"), QStringLiteral("attn_out"));
  grid->addWidget(z_caption_, 0, 0);
  grid->addWidget(wo_caption_, 0, 2);
  grid->addWidget(concat_out_caption_, 0, 4);
  grid->addWidget(z_, 1, 0);
  grid->addWidget(operatorLabel(top, QStringLiteral("×")), 1, 1);
  grid->addWidget(wo_, 1, 2);
  concat_op_ = operatorLabel(top, QStringLiteral("+ b_O\n="));
  grid->addWidget(concat_op_, 1, 3);
  grid->addWidget(concat_out_, 1, 4);
  // z carries the row labels and H bands of d_head columns each: the widest share.
  grid->setColumnStretch(0, 3);
  grid->setColumnStretch(2, 2);
  grid->setColumnStretch(4, 2);
  grid->setRowStretch(1, 1);
  top_layout->addLayout(grid, 1);

  // Project each head, then sum.
  QFrame* middle = panel(vertical, QStringLiteral("sumPanel"));
  auto* middle_layout = new QVBoxLayout(middle);
  middle_layout->setContentsMargins(6, 4, 6, 4);
  middle_layout->setSpacing(2);
  sum_caption_ = plotCaption(middle, QStringLiteral("panelTitle"));
  sum_caption_->setText(QStringLiteral("Project each head, then sum"));
  middle_layout->addWidget(sum_caption_);
  auto* middle_row = new QHBoxLayout;
  auto* results_box = new QVBoxLayout;
  results_caption_ = plotCaption(middle);
  results_ = new ImageGridView(middle);
  results_->setObjectName(QStringLiteral("headResults"));
  results_->setCellAspect(1.0);
  results_->setMaxCellWidth(140);
  results_->setMinimumWidth(240);
  results_box->addWidget(results_caption_);
  results_box->addWidget(results_, 1);
  auto* sum_box = new QVBoxLayout;
  sum_out_caption_ = plotCaption(middle);
  sum_out_ = signedPlot(middle, QStringLiteral("sumOut"), QStringLiteral("attn_out"));
  sum_box->addWidget(sum_out_caption_);
  sum_box->addWidget(sum_out_, 1);
  middle_row->addLayout(results_box, 3);
  sum_op_ = operatorLabel(middle, QStringLiteral("Σ r_h\n+ b_O\n="));
  middle_row->addWidget(sum_op_);
  middle_row->addLayout(sum_box, 2);
  middle_layout->addLayout(middle_row, 1);

  // Below: the difference, and the shapes.
  auto* below = new QWidget(vertical);
  auto* below_layout = new QHBoxLayout(below);
  below_layout->setContentsMargins(0, 0, 0, 0);
  auto* diff_box = new QVBoxLayout;
  diff_label_ = new QLabel(below);
  diff_label_->setObjectName(QStringLiteral("differenceLabel"));
  diff_label_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  diff_label_->setWordWrap(true);
  diff_ = new HeatmapView(below);
  diff_->setObjectName(QStringLiteral("differencePlot"));
  diff_->setColorMap(ColorMap::Sequential);
  diff_->setRangeMode(HeatmapView::RangeMode::ZeroToMax);
  diff_->setColorScaleTitle(QStringLiteral("|concat − sum|"));
  diff_->setCompact(true);
  diff_box->addWidget(diff_label_);
  diff_box->addWidget(diff_, 1);
  auto* shapes_box = new QVBoxLayout;
  shapes_summary_ = new QLabel(below);
  shapes_summary_->setObjectName(QStringLiteral("shapesSummary"));
  shapes_summary_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  shapes_summary_->setWordWrap(true);
  shapes_ = new QTableWidget(below);
  shapes_->setObjectName(QStringLiteral("shapesTable"));
  shapes_->setColumnCount(3);
  shapes_->setHorizontalHeaderLabels({QStringLiteral("Step"), QStringLiteral("Shape"), QStringLiteral("Sizes")});
  shapes_->verticalHeader()->setVisible(false);
  // The shapes and sizes are short and exact: as wide as they need. The step's words take the
  // rest and wrap between words, so the table fits its width and never scrolls sideways.
  shapes_->horizontalHeader()->setStretchLastSection(false);
  shapes_->horizontalHeader()->setSectionResizeMode(0, QHeaderView::Stretch);
  shapes_->horizontalHeader()->setSectionResizeMode(1, QHeaderView::ResizeToContents);
  shapes_->horizontalHeader()->setSectionResizeMode(2, QHeaderView::ResizeToContents);
  shapes_->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  shapes_->setTextElideMode(Qt::ElideNone);
  shapes_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  shapes_->setSelectionMode(QAbstractItemView::NoSelection);
  shapes_->setAlternatingRowColors(true);
  shapes_->setWordWrap(true);
  // A narrower step column wraps into more lines: the rows follow.
  connect(shapes_->horizontalHeader(), &QHeaderView::sectionResized, shapes_, [this](int index) {
    if (index == 0) shapes_->resizeRowsToContents();
  });
  shapes_box->addWidget(shapes_summary_);
  shapes_box->addWidget(shapes_, 1);
  below_layout->addLayout(diff_box, 1);
  below_layout->addLayout(shapes_box, 1);
  vertical->addWidget(top);
  vertical->addWidget(middle);
  vertical->addWidget(below);
  vertical->setStretchFactor(0, 4);
  vertical->setStretchFactor(1, 3);
  vertical->setStretchFactor(2, 3);
  layout->addWidget(vertical, 1);

  connect(z_, &HeatmapView::cellClicked, this, [this](int row, int col) {
    if (!result_) return;
    selection_->setHead(result_->layer, col / result_->run->run.cache->config().d_head);
    selection_->setPosition(row);
  });
  connect(wo_, &HeatmapView::cellClicked, this, [this](int row, int) {
    if (result_) selection_->setHead(result_->layer, row / result_->run->run.cache->config().d_head);
  });
  connect(results_, &ImageGridView::itemClicked, this, [this](int head) {
    if (result_) selection_->setHead(result_->layer, head);
  });
  for (HeatmapView* plot : {z_, concat_out_, sum_out_, diff_})
    connect(plot, &HeatmapView::cellClicked, this, [this](int row, int) { selection_->setPosition(row); });
  // While a refresh is owed the plots hold an older layer; the refresh draws the highlights.
  connect(selection_, &Selection::headChanged, this, [this] {
    if (!refresher_->pending()) updateHighlights();
  });
  connect(selection_, &Selection::positionChanged, this, [this] {
    if (!refresher_->pending()) updateHighlights();
  });
  connect(selection_, &Selection::hoverChanged, this, [this](int pos) {
    if (refresher_->pending()) return;
    for (HeatmapView* plot : {z_, concat_out_, sum_out_, diff_}) plot->setHoverRow(pos);
  });
  refresher_ = new RefreshWhenShown(this, [this] { refresh(); });
  refresh();
}

void ConcatSumView::setLayerResult(std::shared_ptr<const LayerResult> result) {
  result_ = std::move(result);
  refresher_->request();
}

void ConcatSumView::setResult(std::shared_ptr<const ViewResult> result) {
  setLayerResult(std::dynamic_pointer_cast<const LayerResult>(std::move(result)));
}

std::vector<ExportFigure> ConcatSumView::exportFigures(const RunResult& run) {
  std::vector<ExportFigure> figures;
  for (int l = 0; l < run.n_layer(); ++l) {
    AnalysisKey key;
    key.layer = l;
    figures.push_back({key, [this, l]() -> ExportFigure::Target {
                         selection_->setHead(l, selection_->head());  // its band is outlined
                         return {this, size()};
                       }});
  }
  return figures;
}

QString ConcatSumView::differenceText() const { return diff_label_->text(); }

void ConcatSumView::refresh() {
  if (!result_) {
    title_->setText(QStringLiteral("Concat vs Sum"));
    for (HeatmapView* plot : {z_, wo_, concat_out_, sum_out_, diff_}) plot->clear();
    results_->clear();
    diff_label_->clear();
    shapes_->setRowCount(0);
    return;
  }
  const hs::ConcatVsSum& cs = result_->cs;
  const RunResult& run = *result_->run;
  const hs::ModelConfig& cfg = run.run.cache->config();
  const int S = run.n_pos(), H = cfg.n_heads, dh = cfg.d_head, D = cfg.d_model;
  const int layer = result_->layer;
  title_->setText(QStringLiteral("<b>Layer %1</b> &nbsp;multi-head attention is a sum over heads: concatenating the "
                                 "heads' z and multiplying by W_O gives the same attn_out as adding each head's "
                                 "own projection r_h = z_h · W_O[h].%2")
                      .arg(layer)
                      .arg(cs.has_post_norm ? QStringLiteral(" Here both are the input of the post-attention norm, a "
                                                             "step of its own before attn_out (the shapes below).")
                                            : QString()));

  z_->setMatrix(S, H * dh, toVector(cs.z_concat));
  z_->setRowLabels(run.labels);
  z_->setColumnBands(dh, QStringLiteral("h"), selection_->head());
  z_->setAxisTitles(QString(), QString());
  z_caption_->setText(QStringLiteral("z, heads concatenated\nS × H·d_head = %1 × %2").arg(S).arg(H * dh));

  wo_->setMatrix(H * dh, D, toVector(cs.W_O));
  wo_->setRowBands(dh, QStringLiteral("h"), selection_->head());
  wo_->setAxisTitles(QString(), QStringLiteral("d_model"));
  wo_caption_->setText(QStringLiteral("W_O\nH·d_head × D = %1 × %2").arg(H * dh).arg(D));

  const double range = result_->output_range;
  concat_out_->setMatrix(S, D, toVector(cs.via_concat));
  concat_out_->setRangeMode(HeatmapView::RangeMode::Fixed, -range, range);
  concat_out_->setRowLabels(run.labels);
  concat_out_->setRowTickLabelsVisible(false);  // the same rows as z, on its left
  concat_out_->setAxisTitles(QString(), QStringLiteral("d_model"));
  // With a post-attention norm (Gemma) the product is the norm's input, not yet hook_attn_out.
  const QString product = cs.has_post_norm ? QStringLiteral("post-norm input") : QStringLiteral("attn_out");
  concat_out_->setColorScaleTitle(product);
  concat_out_caption_->setText(QStringLiteral("%1\nS × D = %2 × %3").arg(product).arg(S).arg(D));

  std::vector<ImageGridView::Item> items;
  for (int h = 0; h < H; ++h) {
    const float norm = cs.head_results[static_cast<size_t>(h)].norm();
    items.push_back({result_->head_result_images[static_cast<size_t>(h)], QStringLiteral("r_%1").arg(h),
                     QStringLiteral("r_%1 = z_%1 · W_O[%1]  [%2 × %3], Frobenius norm %4")
                         .arg(h)
                         .arg(S)
                         .arg(D)
                         .arg(formatNumber(norm))});
  }
  // One row of heads (two for more than 12): the row is the panel's width.
  const int columns = H <= 12 ? H : (H + 1) / 2;
  results_->setItems(std::move(items), columns);
  results_->setColorKeys({ColorKey{ColorMap::Diverging, QStringLiteral("r_h, one scale for every head"),
                                   QStringLiteral("−%1").arg(formatNumber(result_->head_range)),
                                   QStringLiteral("+%1").arg(formatNumber(result_->head_range)), QColor(), QString(),
                                   QString()}});
  results_->setCellAspect(std::clamp(static_cast<double>(D) / std::max(1, S), 0.5, 2.0));
  results_caption_->setText(QStringLiteral("r_h = z_h · W_O[h], one per head\nS × D = %1 × %2 each, colours ±%3")
                                .arg(S)
                                .arg(D)
                                .arg(formatNumber(result_->head_range)));
  results_caption_->setToolTip(QStringLiteral("The heads share one colour scale, the 99.5th percentile of |r_h| over "
                                              "every head, so heads compare with each other; larger values saturate. "
                                              "attn_out (±%1) adds every head (and b_O, when the model has one) and is drawn on its own "
                                              "scale.")
                                   .arg(formatNumber(result_->output_range)));
  results_->setFigureText({QStringLiteral("L%1 per-head results r_h").arg(layer), runSubtitle(run)},
                          QStringLiteral("head_results_L%1").arg(layer));

  sum_out_->setMatrix(S, D, toVector(cs.via_sum));
  sum_out_->setRangeMode(HeatmapView::RangeMode::Fixed, -range, range);
  sum_out_->setRowLabels(run.labels);
  sum_out_->setAxisTitles(QString(), QStringLiteral("d_model"));
  sum_out_->setColorScaleTitle(product);
  sum_out_caption_->setText(QStringLiteral("%1\nS × D = %2 × %3").arg(product).arg(S).arg(D));

  hs::RowMatrixXf abs_diff = cs.difference.cwiseAbs();
  diff_->setMatrix(S, D, toVector(abs_diff));
  diff_->setRowLabels(run.labels);
  diff_->setAxisTitles(QStringLiteral("position"), QStringLiteral("d_model"));
  if (cs.has_post_norm)
    diff_label_->setText(QStringLiteral("<b>|concat − sum|</b> [S × D] &nbsp; max |difference| = <b>%1</b> (float32 "
                                        "rounding) &nbsp;·&nbsp; both are the post-attention norm's input; the norm of "
                                        "concat vs the cache's hook_attn_out: %2 &nbsp;·&nbsp; Σ_h r_h through the norm "
                                        "with its scale frozen at this run's value (what Contributions adds) vs "
                                        "hook_attn_out: %3")
                             .arg(formatNumber(cs.max_abs_diff), formatNumber(cs.max_abs_vs_cache),
                                  formatNumber(cs.max_abs_frozen_vs_cache)));
  else
    diff_label_->setText(QStringLiteral("<b>|concat − sum|</b> [S × D] &nbsp; max |difference| = <b>%1</b> "
                                        "(float32 rounding) &nbsp;·&nbsp; concat vs the cache's hook_attn_out: %2")
                             .arg(formatNumber(cs.max_abs_diff), formatNumber(cs.max_abs_vs_cache)));

  const QString subtitle = runSubtitle(run);
  z_->setFigureText({QStringLiteral("L%1 z concatenated [S × H·d_head]").arg(layer), subtitle},
                    QStringLiteral("z_concat_L%1").arg(layer));
  wo_->setFigureText({QStringLiteral("L%1 W_O [H·d_head × D]").arg(layer), subtitle}, QStringLiteral("W_O_L%1").arg(layer));
  // A model without an attention output bias (Llama, Qwen2) adds none.
  const bool bias = run.run.cache->config().architecture.attn_out_bias;
  const QString plus_bias = bias ? QStringLiteral(" + b_O") : QString();
  concat_op_->setText(bias ? QStringLiteral("+ b_O\n=") : QStringLiteral("="));
  sum_op_->setText(bias ? QStringLiteral("Σ r_h\n+ b_O\n=") : QStringLiteral("Σ r_h\n="));
  concat_out_->setFigureText({QStringLiteral("L%1 attn_out via concat · W_O%2").arg(layer).arg(plus_bias), subtitle},
                             QStringLiteral("attn_out_concat_L%1").arg(layer));
  sum_out_->setFigureText({QStringLiteral("L%1 attn_out via Σ_h r_h%2").arg(layer).arg(plus_bias), subtitle},
                          QStringLiteral("attn_out_sum_L%1").arg(layer));
  diff_->setFigureText({QStringLiteral("L%1 |concat − sum|, max %2").arg(layer).arg(formatNumber(cs.max_abs_diff)), subtitle},
                       QStringLiteral("concat_minus_sum_L%1").arg(layer));
  fillShapes();
  updateHighlights();
}

void ConcatSumView::fillShapes() {
  const RunResult& run = *result_->run;
  const hs::ModelConfig& cfg = run.run.cache->config();
  const int S = run.n_pos(), H = cfg.n_heads, dh = cfg.d_head, D = cfg.d_model, V = cfg.d_vocab, L = cfg.n_layers;
  const int Hkv = cfg.n_key_value_heads > 0 ? cfg.n_key_value_heads : H;
  const bool rotary = cfg.architecture.positions == hs::PositionKind::Rotary;
  const QString plus_bias = cfg.architecture.attn_out_bias ? QStringLiteral(" + b_O") : QString();
  struct Row {
    QString step, shape, sizes;
  };
  auto dims = [](std::initializer_list<int> d) {
    QStringList parts;
    for (int x : d) parts << QString::number(x);
    return "[" + parts.join(", ") + "]";
  };
  const QString kv_step = Hkv < H ? QStringLiteral("k, v (hook_k, hook_v): each shared by %1 query heads").arg(H / Hkv)
                                  : QStringLiteral("k, v (hook_k, hook_v)");
  std::vector<Row> rows = {
      {QStringLiteral("tokens"), QStringLiteral("[B, S]"), dims({1, S})},
      {run.run.cache->has_pos_embed() ? QStringLiteral("resid_pre (embed + pos)")
                                      : QStringLiteral("resid_pre (embed; no position embedding)"),
       QStringLiteral("[B, S, D]"), dims({1, S, D})},
      {QStringLiteral("q (hook_q)"), QStringLiteral("[B, S, H, d_head]"), dims({1, S, H, dh})},
      {kv_step, QStringLiteral("[B, S, H_kv, d_head]"), dims({1, S, Hkv, dh})},
  };
  if (rotary)
    rows.push_back({QStringLiteral("q, k rotated by position (hook_rot_q, hook_rot_k)"),
                    QStringLiteral("[B, S, H or H_kv, d_head]"), dims({1, S, H, dh}) + " / " + dims({1, S, Hkv, dh})});
  // With a post-attention norm (Gemma) the projection is that norm's input, and the norm is a step
  // of its own between it and attn_out.
  const bool post_norm = cfg.architecture.post_attn_norm;
  const QString projected = post_norm ? QStringLiteral("the post-attention norm's input") : QStringLiteral("attn_out");
  std::vector<Row> attention_rows = {
      {QStringLiteral("z = pattern · v (hook_z)"), QStringLiteral("[B, S, H, d_head]"), dims({1, S, H, dh})},
      {QStringLiteral("z concatenated"), QStringLiteral("[B, S, H·d_head]"), dims({1, S, H * dh})},
      {QStringLiteral("W_O"), QStringLiteral("[H·d_head, D]"), dims({H * dh, D})},
      {QStringLiteral("concat · W_O%1 = %2").arg(plus_bias, projected), QStringLiteral("[B, S, D]"), dims({1, S, D})},
      {QStringLiteral("z_h (one head)"), QStringLiteral("[B, S, d_head]"), dims({1, S, dh})},
      {QStringLiteral("W_O[h]"), QStringLiteral("[d_head, D]"), dims({dh, D})},
      {QStringLiteral("r_h = z_h · W_O[h] (hook_result)"), QStringLiteral("[B, S, H, D]"), dims({1, S, H, D})},
      {QStringLiteral("Σ_h r_h%1 = %2").arg(plus_bias, projected), QStringLiteral("[B, S, D]"), dims({1, S, D})},
  };
  if (post_norm) {
    attention_rows.push_back({QStringLiteral("post-attention norm x / √(mean(x²) + ε) · w = attn_out (hook_attn_out)"),
                              QStringLiteral("[B, S, D]"), dims({1, S, D})});
    attention_rows.push_back({QStringLiteral("its scale √(mean(x²) + ε) (ln1_post.hook_scale)"), QStringLiteral("[B, S]"),
                              dims({1, S})});
  }
  attention_rows.push_back(
      {QStringLiteral("logits (after %1 layers)").arg(L), QStringLiteral("[B, S, V]"), dims({1, S, V})});
  rows.insert(rows.end(), attention_rows.begin(), attention_rows.end());
  shapes_->setRowCount(static_cast<int>(rows.size()));
  for (int i = 0; i < static_cast<int>(rows.size()); ++i) {
    shapes_->setItem(i, 0, new QTableWidgetItem(rows[static_cast<size_t>(i)].step));
    shapes_->setItem(i, 1, new QTableWidgetItem(rows[static_cast<size_t>(i)].shape));
    shapes_->setItem(i, 2, new QTableWidgetItem(rows[static_cast<size_t>(i)].sizes));
  }
  shapes_summary_->setText(QStringLiteral("<b>Shapes, step by step</b> &nbsp; B = 1 &nbsp; S = %1 &nbsp; V = %2 "
                                          "&nbsp; D = %3 &nbsp; H = %4 &nbsp; H_kv = %5 &nbsp; d_head = %6 &nbsp; L = %7 layers%8")
                               .arg(S)
                               .arg(V)
                               .arg(D)
                               .arg(H)
                               .arg(Hkv)
                               .arg(dh)
                               .arg(L)
                               .arg(Hkv < H ? QStringLiteral(" &nbsp; (grouped-query attention: query head h reads "
                                                             "key/value head h / %1)").arg(H / Hkv)
                                            : QString()));
  shapes_->resizeColumnsToContents();
  shapes_->resizeRowsToContents();
}

void ConcatSumView::updateHighlights() {
  const int head = selection_->head();
  z_->setHighlightedColumnBand(head);
  wo_->setHighlightedRowBand(head);
  results_->setSelectedIndex(head);
  const int pos = selection_->position();
  for (HeatmapView* plot : {z_, concat_out_, sum_out_, diff_}) plot->setHighlightedRow(pos);
}

FigureText ConcatSumView::figureText() const {
  if (!result_) return {QStringLiteral("Concat vs Sum"), {}};
  return {QStringLiteral("L%1 concat vs sum: max |difference| = %2")
              .arg(result_->layer)
              .arg(formatNumber(result_->cs.max_abs_diff)),
          runSubtitle(*result_->run)};
}

QString ConcatSumView::figureFileStem() const {
  return QStringLiteral("concat_vs_sum_L%1").arg(result_ ? result_->layer : 0);
}

}  // namespace hs::ui
