#include "ui/views/head_overview.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "ui/views/view_text.h"
#include "ui/widgets/image_grid_view.h"

namespace hs::ui {

std::optional<std::vector<int>> headOrder(const hs::RowMatrixXf& values, bool sorted, std::optional<float> threshold) {
  const int n = static_cast<int>(values.size());
  const float* v = values.data();  // row-major [layer, head]: index layer * n_head + head
  auto kept = [&](int i) { return !threshold || (!std::isnan(v[i]) && v[i] >= *threshold); };
  std::vector<int> order;
  if (!sorted) {
    if (!threshold) return std::nullopt;
    order.resize(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) order[static_cast<size_t>(i)] = kept(i) ? i : -1;
    return order;
  }
  for (int i = 0; i < n; ++i)
    if (kept(i)) order.push_back(i);
  std::stable_sort(order.begin(), order.end(), [v](int a, int b) {
    if (std::isnan(v[a]) || std::isnan(v[b])) return !std::isnan(v[a]) && std::isnan(v[b]);
    return v[a] > v[b];
  });
  return order;
}

void showHeadOverview(ImageGridView& grid, const RunResult& run, bool tooltips, const HeadBadges& badges) {
  const int n_layer = run.n_layer(), n_head = run.n_head();
  const HeadMetricValues* values = badges.values;
  if (values && (values->values.rows() != n_layer || values->values.cols() != n_head)) values = nullptr;
  std::vector<ImageGridView::Item> items;
  items.reserve(run.thumbnails.size());
  for (int l = 0; l < n_layer; ++l)
    for (int h = 0; h < n_head; ++h) {
      ImageGridView::Item item{run.thumbnails[static_cast<size_t>(l * n_head + h)], headLabel(l, h),
                               tooltips ? QStringLiteral("%1 — click to show its pattern; right-click to ablate it, "
                                                         "Ctrl+click to pick several")
                                              .arg(headLabel(l, h))
                                        : QString(),
                               {}, {}, {}};
      if (badges.metric) {
        const float v = values ? values->values(l, h) : NAN;
        item.badge = headMetricText(*badges.metric, v);
        item.badge_color = headMetricColor(*badges.metric, v);
      }
      items.push_back(std::move(item));
    }
  // Ablated heads carry a mark: "0" zero-ablated, "μ" mean-ablated (hook_z).
  for (const hs::Intervention& i : run.ablations()) {
    if (i.hook != hs::HookPoint::Z || i.head < 0 || i.layer >= n_layer || i.head >= n_head) continue;
    ImageGridView::Item& item = items[static_cast<size_t>(i.layer * n_head + i.head)];
    const bool zero = i.kind == hs::InterventionKind::Zero;
    item.tag = zero ? QStringLiteral("0") : QStringLiteral("μ");
    if (tooltips)
      item.tooltip = QStringLiteral("%1 — %2: its z is %3 in this run. Right-click to remove the ablation.")
                         .arg(headLabel(i.layer, i.head), zero ? QStringLiteral("zero-ablated") : QStringLiteral("mean-ablated"),
                              zero ? QStringLiteral("0") : QStringLiteral("its mean over the prompt's positions"));
  }
  const bool ordered = badges.metric && badges.sorted;
  std::optional<std::vector<int>> order;
  if (badges.metric)
    order = headOrder(values ? values->values : hs::RowMatrixXf::Constant(n_layer, n_head, NAN), badges.sorted,
                      badges.threshold);
  // Sorted, the rows are ranks, so the columns are free: about as many as rows, up to a layer's
  // worth. A filter that keeps a few heads then shows them large enough for their labels.
  int columns = n_head;
  if (ordered && order)
    columns = std::clamp(static_cast<int>(std::ceil(std::sqrt(static_cast<double>(order->size())))), 1, n_head);
  grid.setItems(std::move(items), columns);
  if (order)
    grid.setDisplayOrder(std::move(*order));
  else
    grid.clearDisplayOrder();
  QStringList rows, cols;
  if (!ordered) {  // sorted, rows are ranks, not layers
    for (int l = 0; l < n_layer; ++l) rows << QStringLiteral("L%1").arg(l);
    for (int h = 0; h < n_head; ++h) cols << QStringLiteral("H%1").arg(h);
  }
  // The figure's colour scale: the patterns' key, and the badges' when a score is shown.
  std::vector<ColorKey> keys = {ColorKey{}};
  if (badges.metric)
    keys.push_back({badges.metric->colors, badges.metric->name, QString::number(badges.metric->low, 'g', 3),
                    QString::number(badges.metric->high, 'g', 3), headMetricColor(HeadMetric{}, NAN),
                    QStringLiteral("—"), QStringLiteral("no score")});
  grid.setColorKeys(std::move(keys), grid.colorKeysOnScreen());
  grid.setRowHeaders(rows);
  grid.setColumnHeaders(cols);
  QString title = QStringLiteral("Attention patterns of all %1 heads").arg(n_layer * n_head);
  if (badges.metric) {
    title = QStringLiteral("Attention patterns of %1 heads with their %2 score")
                .arg(n_layer * n_head)
                .arg(badges.metric->name);
    if (badges.threshold)
      title += QStringLiteral(", those ≥ %1").arg(QString::number(*badges.threshold, 'f', badges.metric->decimals));
    if (ordered) title += QStringLiteral(", highest first");
  }
  grid.setFigureText({title, runSubtitle(run)}, QStringLiteral("heads_overview"));
}

}  // namespace hs::ui
