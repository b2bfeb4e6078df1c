// Ablations in the window: the Ablation dock, the heads' right-click menu, and a new run when
// the list changes.
#include "ui/window/main_window.h"

#include <QAction>
#include <QDockWidget>
#include <QFrame>
#include <QMenu>
#include <QScrollArea>
#include <QSplitter>
#include <QTimer>

#include <algorithm>
#include <utility>
#include <vector>

#include "ui/controller/ablations.h"
#include "ui/controller/analysis_controller.h"
#include "ui/controller/selection.h"
#include "ui/views/view_text.h"
#include "ui/widgets/image_grid_view.h"
#include "ui/widgets/prompt_edit.h"
#include "ui/window/ablation_panel.h"

namespace hs::ui {

void MainWindow::buildAblationDock() {
  ablation_dock_ = new QDockWidget(QStringLiteral("Ablation"), this);
  ablation_dock_->setObjectName(QStringLiteral("ablationDock"));
  ablation_dock_->setAllowedAreas(Qt::RightDockWidgetArea | Qt::LeftDockWidgetArea | Qt::BottomDockWidgetArea);
  ablation_panel_ = new AblationPanel(ablations_, selection_, ablation_dock_);
  auto* scroll = new QScrollArea(ablation_dock_);
  scroll->setWidget(ablation_panel_);
  scroll->setWidgetResizable(true);
  scroll->setFrameShape(QFrame::NoFrame);
  scroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);  // the panel wraps to the dock's width
  scroll->setMinimumWidth(260);
  ablation_dock_->setWidget(scroll);
  addDockWidget(Qt::RightDockWidgetArea, ablation_dock_);
  ablation_dock_->hide();  // shown with the first ablation
}

// The head grid's right-click menu: ablate the head (or the picked heads), or undo its ablation.
void MainWindow::addHeadActions(int index, QMenu* menu) {
  const int n_head = std::max(1, selection_->headCount());
  const int layer = index / n_head, head = index % n_head;
  std::vector<std::pair<int, int>> heads = {{layer, head}};
  // Ctrl+clicked heads: the menu acts on all of them when the clicked one is among them.
  const QList<int> picked = head_grid_->pickedIndices();
  if (picked.size() > 1 && picked.contains(index)) {
    heads.clear();
    for (int i : picked) heads.push_back({i / n_head, i % n_head});
  }
  for (hs::InterventionKind kind : {hs::InterventionKind::Zero, hs::InterventionKind::Mean}) {
    QAction* a = menu->addAction(Ablations::actionText(heads, kind), this, [this, heads, kind] {
      ablations_->add(heads, kind);
      head_grid_->setPickedIndices({});
    });
    a->setObjectName(kind == hs::InterventionKind::Zero ? QStringLiteral("actionZeroAblate")
                                                        : QStringLiteral("actionMeanAblate"));
    a->setToolTip(kind == hs::InterventionKind::Zero
                      ? QStringLiteral("Run the model with these heads' z (hook_z) set to 0")
                      : QStringLiteral("Run the model with these heads' z (hook_z) set to its mean over the prompt's positions"));
  }
  if (ablations_->kindOf(layer, head)) {
    QAction* a = menu->addAction(QStringLiteral("Remove the Ablation of %1").arg(headLabel(layer, head)), this,
                                 [this, layer, head] { ablations_->remove(layer, head); });
    a->setObjectName(QStringLiteral("actionRemoveAblation"));
  }
}

void MainWindow::onAblationsChanged() {
  controller_->setAblations(runInterventions());  // with the Features view's latent edits
  // Ctrl+clicked picks are heads gathered for one ablation: any change of the list (made from
  // them or not, undone, removed from the dock) spends them, so no dashed outline outlives the
  // list it was gathered against; the "0"/"μ" marks come from the run's own ablations.
  head_grid_->setPickedIndices({});
  if (!ablations_->isEmpty() && !ablation_dock_->isVisible() && !ablation_dock_->property("shownOnce").toBool()) {
    ablation_dock_->setProperty("shownOnce", true);
    ablation_dock_->show();
    // Wide enough for the before/after table, about a fifth of the window; the room comes
    // from the views, not from the heads (applyHeadsWidth gives the panel its width back).
    resizeDocks({ablation_dock_}, {std::clamp(width() / 5, 280, 340)}, Qt::Horizontal);
  }
  debounce_.stop();
  controller_->requestRun(prompt_->toPlainText());
  updateStatus();
}

}  // namespace hs::ui
