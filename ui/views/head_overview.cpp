#include "ui/views/head_overview.h"

#include "ui/views/view_text.h"
#include "ui/widgets/image_grid_view.h"

namespace hs::ui {

void showHeadOverview(ImageGridView& grid, const RunResult& run, bool tooltips) {
  const int n_layer = run.n_layer(), n_head = run.n_head();
  std::vector<ImageGridView::Item> items;
  items.reserve(run.thumbnails.size());
  for (int l = 0; l < n_layer; ++l)
    for (int h = 0; h < n_head; ++h)
      items.push_back({run.thumbnails[static_cast<size_t>(l * n_head + h)], headLabel(l, h),
                       tooltips ? QStringLiteral("%1 — click to show its pattern; right-click to ablate it, Ctrl+click "
                                                 "to pick several")
                                      .arg(headLabel(l, h))
                                : QString(),
                       QString()});
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
  grid.setItems(std::move(items), n_head);
  QStringList rows, cols;
  for (int l = 0; l < n_layer; ++l) rows << QStringLiteral("L%1").arg(l);
  for (int h = 0; h < n_head; ++h) cols << QStringLiteral("H%1").arg(h);
  grid.setRowHeaders(rows);
  grid.setColumnHeaders(cols);
  grid.setFigureText({QStringLiteral("Attention patterns of all %1 heads").arg(n_layer * n_head), runSubtitle(run)},
                     QStringLiteral("heads_overview"));
}

}  // namespace hs::ui
