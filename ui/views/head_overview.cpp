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
                       tooltips ? QStringLiteral("%1 — click to show its pattern").arg(headLabel(l, h)) : QString()});
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
