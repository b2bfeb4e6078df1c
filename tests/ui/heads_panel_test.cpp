// The heads panel as a person meets it: thumbnails that stay readable when the panel gets narrow or
// short (it scrolls instead), a width that stays where it was put across the Ablation dock, tabs,
// models and restarts, outlines that go with what they mark, a colour scale on the exported
// overview; and the smaller things around it: the Concat vs Sum layout at the default window size,
// a long tensor name in a load error, the Ablation panel by --view.
#include <catch2/catch.hpp>

#include <QAction>
#include <QDockWidget>
#include <QHeaderView>
#include <QImage>
#include <QMenu>
#include <QMessageBox>
#include <QProcess>
#include <QScrollArea>
#include <QScrollBar>
#include <QSettings>
#include <QSplitter>
#include <QTabWidget>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QTest>

#include <filesystem>

#include "core/session/session.h"
#include "ui/base/figure.h"
#include "ui/controller/ablations.h"
#include "ui/style/colormap.h"
#include "ui/views/concat_sum_view.h"
#include "ui/views/head_overview.h"
#include "ui/widgets/grid_scroll_area.h"
#include "ui/widgets/heatmap_view.h"
#include "ui/widgets/image_grid_view.h"
#include "ui/widgets/labels.h"
#include "ui/window/main_window.h"
#include "ui_test_support.h"

using namespace hs::ui;
using hs::ui::test::builtinModelDir;
using hs::ui::test::waitFor;

namespace {

struct PanelWindow {
  MainWindow window;
  explicit PanelWindow(const QString& model, QSize size = QSize(1400, 900), bool restore = false, const QString& view = {})
      : window(MainWindowOptions{.model_dir = model,
                                 .text = QStringLiteral("The cat sat on the mat. The cat sat on the"),
                                 .restore_settings = restore,
                                 .view = view}) {
    window.resize(size);
    window.show();
    window.activateWindow();
    REQUIRE(QTest::qWaitForWindowActive(&window));
    REQUIRE(waitFor([&] { return window.controller()->currentRun() != nullptr; }, 30000));
    QTest::qWait(50);  // the splitter's deferred width
  }
  std::shared_ptr<const RunResult> run() const { return window.controller()->currentRun(); }
  QSplitter* splitter() const { return window.findChild<QSplitter*>(QStringLiteral("mainSplitter")); }
  QScrollArea* gridScroll() const { return window.findChild<QScrollArea*>(QStringLiteral("headGridScroll")); }
  int headsPanelWidth() const { return splitter()->sizes().value(0); }
  // What a drag of the splitter's handle does: the sizes, then splitterMoved (emitted only by a
  // drag, never by setSizes).
  void dragHeadsTo(int width) {
    QSplitter* s = splitter();
    const int total = s->sizes().value(0) + s->sizes().value(1);
    s->setSizes({width, total - width});
    Q_EMIT s->splitterMoved(s->sizes().value(0), 1);
  }
  void ablate(int layer, int head) {
    QMenu menu;
    Q_EMIT window.headGrid()->itemContextMenu(layer * run()->n_head() + head, &menu);
    for (QAction* a : menu.actions())
      if (a->objectName() == QStringLiteral("actionZeroAblate")) a->trigger();
    REQUIRE(waitFor([&] { return run() && run()->ablations().size() == window.ablations()->list().size(); }));
  }
};

}  // namespace

TEST_CASE("Head thumbnails stay big enough for their labels: a narrow panel scrolls instead",
          "[window][heads]") {
  PanelWindow w(builtinModelDir(), QSize(1280, 800));
  ImageGridView* grid = w.window.headGrid();
  QScrollArea* scroll = w.gridScroll();
  REQUIRE(scroll);
  REQUIRE(scroll->widget() == grid);
  w.ablate(1, 2);
  REQUIRE(waitFor([&] { return w.window.ablationDock()->isVisible(); }));
  // The panel as narrow as it goes, with the dock open: the thumbnails keep their size and the
  // grid scrolls sideways.
  w.dragHeadsTo(100);
  REQUIRE(waitFor([&] { return scroll->horizontalScrollBar()->isVisible(); }));
  INFO("panel " << w.headsPanelWidth() << ", cell " << grid->cellWidth());
  CHECK(grid->cellWidth() >= ImageGridView::kLabelledCellWidth);
  CHECK(grid->width() > scroll->viewport()->width());
  CHECK(grid->itemRect(0).width() >= ImageGridView::kLabelledCellWidth);
  // Room enough again: no scroll bars, and the thumbnails grow with the panel.
  w.window.ablationDock()->hide();
  QTest::qWait(100);
  w.dragHeadsTo(460);
  QTest::qWait(100);
  INFO("after: panel " << w.headsPanelWidth() << ", chosen " << w.window.headsWidth() << ", grid " << grid->size().width() << "x"
       << grid->size().height() << ", viewport " << scroll->viewport()->width() << "x" << scroll->viewport()->height()
       << ", minimum " << grid->minimumSizeHint().width() << "x" << grid->minimumSizeHint().height() << ", h "
       << scroll->horizontalScrollBar()->isVisible() << " v " << scroll->verticalScrollBar()->isVisible());
  REQUIRE(waitFor([&] { return !scroll->verticalScrollBar()->isVisible() && !scroll->horizontalScrollBar()->isVisible(); }));
  CHECK(grid->cellWidth() > ImageGridView::kLabelledCellWidth);
}

TEST_CASE("A grid taller than its scroll area scrolls down rather than shrinking its cells", "[heads]") {
  // GPT-2 small's 12 x 12 heads in a short panel: the window itself cannot get that short with
  // the built-in model's 4 layers (its views' minimum height leaves them room).
  auto* grid = new ImageGridView;
  grid->setMinCellWidth(ImageGridView::kLabelledCellWidth);
  std::vector<ImageGridView::Item> items(144);
  for (int i = 0; i < 144; ++i) {
    items[static_cast<size_t>(i)].image = QImage(8, 8, QImage::Format_RGB32);
    items[static_cast<size_t>(i)].image.fill(Qt::white);
    items[static_cast<size_t>(i)].label = QStringLiteral("L%1H%2").arg(i / 12).arg(i % 12);
  }
  grid->setItems(std::move(items), 12);
  grid->setRowHeaders({QStringLiteral("L0")});
  GridScrollArea scroll(grid);
  scroll.resize(700, 300);
  scroll.show();
  REQUIRE(QTest::qWaitForWindowExposed(&scroll));
  REQUIRE(waitFor([&] { return scroll.verticalScrollBar()->isVisible(); }));
  CHECK(grid->cellWidth() >= ImageGridView::kLabelledCellWidth);
  CHECK(grid->height() > scroll.viewport()->height());
  CHECK_FALSE(scroll.horizontalScrollBar()->isVisible());  // 12 columns of 40 px fit in 700
  // Wide and tall enough: the cells grow past the minimum and nothing scrolls.
  scroll.resize(1400, 1400);
  REQUIRE(waitFor([&] { return !scroll.verticalScrollBar()->isVisible(); }));
  CHECK(grid->cellWidth() > ImageGridView::kLabelledCellWidth);
  // As tall as the grid needs at its width, no taller.
  CHECK(scroll.sizeHint().height() == grid->heightForWidth(scroll.viewport()->width()));
}

TEST_CASE("The heads panel keeps its width across the Ablation dock, tabs, models and a restart", "[window][heads]") {
  QSettings().remove(QStringLiteral("window"));
  {
    PanelWindow w(builtinModelDir(), QSize(1400, 900), true);
    w.dragHeadsTo(430);
    CHECK(w.window.headsWidth() == 430);
    CHECK(w.headsPanelWidth() == 430);
    for (int i = 0; i < w.window.tabs()->count(); ++i) {
      w.window.tabs()->setCurrentIndex(i);
      QTest::qWait(30);
      INFO("tab " << w.window.tabs()->tabText(i).toStdString());
      CHECK(w.headsPanelWidth() == 430);
    }
    w.window.tabs()->setCurrentIndex(0);
    // The dock takes its room from the views; closed, the panel is as it was.
    w.ablate(0, 1);
    REQUIRE(waitFor([&] { return w.window.ablationDock()->isVisible(); }));
    QTest::qWait(50);
    const int views_min = w.window.tabs()->minimumSizeHint().width();
    const int total = w.splitter()->sizes().value(0) + w.splitter()->sizes().value(1);
    INFO("views' minimum " << views_min << ", splitter " << total);
    CHECK(w.headsPanelWidth() == std::min(430, std::max(w.splitter()->widget(0)->minimumSizeHint().width(), total - views_min)));
    w.window.ablationDock()->hide();
    REQUIRE(waitFor([&] { return w.headsPanelWidth() == 430; }));
    w.window.ablationDock()->show();
    w.window.ablationDock()->hide();
    REQUIRE(waitFor([&] { return w.headsPanelWidth() == 430; }));
    // Another model (2 layers x 4 heads instead of 4 x 8): the same width.
    const auto before = w.run();
    w.window.loadModel(test::fixtureModelDir());
    REQUIRE(waitFor([&] { return w.run() && w.run()->run.model != before->run.model; }, 30000));
    QTest::qWait(50);
    CHECK(w.headsPanelWidth() == 430);
    w.window.loadModel(builtinModelDir());
    REQUIRE(waitFor([&] { return w.run() && w.run()->n_head() == before->n_head(); }, 30000));
    QTest::qWait(50);
    CHECK(w.headsPanelWidth() == 430);
    w.window.close();
  }
  // Saved in QSettings, and given back to the next window.
  CHECK(QSettings().value(QStringLiteral("window/headsWidth")).toInt() == 430);
  {
    PanelWindow w(builtinModelDir(), QSize(1400, 900), true);
    CHECK(w.window.headsWidth() == 430);
    CHECK(waitFor([&] { return w.headsPanelWidth() == 430; }));
  }
  QSettings().remove(QStringLiteral("window"));
}

TEST_CASE("No outline is left on a head once its ablation is gone, nor on another model", "[window][heads][ablation]") {
  PanelWindow w(builtinModelDir());
  ImageGridView* grid = w.window.headGrid();
  const int n_head = w.run()->n_head();
  // Heads picked with Ctrl+click are outlined, then ablated together: the picks are spent.
  QTest::mouseClick(grid, Qt::LeftButton, Qt::ControlModifier, grid->itemRect(0 * n_head + 1).center());
  QTest::mouseClick(grid, Qt::LeftButton, Qt::ControlModifier, grid->itemRect(2 * n_head + 3).center());
  REQUIRE(grid->pickedIndices().size() == 2);
  w.ablate(1, 2);
  CHECK(grid->pickedIndices().isEmpty());
  CHECK(grid->outlinedIndices() == QList<int>{});
  // Picked again, then the ablation is removed (from the Ablation panel): no outline stays.
  QTest::mouseClick(grid, Qt::LeftButton, Qt::ControlModifier, grid->itemRect(3 * n_head + 0).center());
  REQUIRE(grid->pickedIndices() == QList<int>{3 * n_head + 0});
  w.window.ablations()->remove(1, 2);
  REQUIRE(waitFor([&] { return w.run()->ablations().empty(); }));
  CHECK(grid->outlinedIndices() == QList<int>{});
  // Across models: nothing of the first model's outlines on the second one's heads, not even the
  // pointer's (its index was a head of the first model).
  w.ablate(0, 3);
  QTest::mouseClick(grid, Qt::LeftButton, Qt::ControlModifier, grid->itemRect(0 * n_head + 2).center());
  QTest::mouseMove(grid, grid->itemRect(0 * n_head + 3).center());
  REQUIRE(waitFor([&] { return grid->hoveredIndex() == 0 * n_head + 3; }));
  const auto before = w.run();
  w.window.loadModel(test::fixtureModelDir());
  REQUIRE(waitFor([&] { return w.run() && w.run()->run.model != before->run.model; }, 30000));
  CHECK(w.window.ablations()->isEmpty());
  CHECK(grid->pickedIndices().isEmpty());
  CHECK(grid->hoveredIndex() == -1);
  CHECK(grid->outlinedIndices() == QList<int>{});
  for (int i = 0; i < grid->itemCount(); ++i) CHECK(grid->item(i).tag.isEmpty());
}

TEST_CASE("The exported overview of every head carries its colour scale", "[export][heads]") {
  PanelWindow w(test::fixtureModelDir());
  // The panel's own grid: the key is the widget under it on screen, and in its figure.
  ImageGridView* grid = w.window.headGrid();
  REQUIRE(!grid->colorKeys().empty());  // and the score's, when badges are shown
  CHECK(grid->colorKeys()[0].caption == QStringLiteral("attention weight"));
  CHECK_FALSE(grid->colorKeysOnScreen());
  const QSize figure = grid->figureSize();
  CHECK(figure.height() >= colorKeyHeight(grid->font()));
  // Export All's overview, as AttentionView makes it.
  ImageGridView overview;
  overview.setAttribute(Qt::WA_DontShowOnScreen);
  overview.setMaxCellWidth(96);
  showHeadOverview(overview, *w.run(), false);
  REQUIRE(overview.colorKeys().size() == 1);
  const QSize size(900, overview.heightForWidth(900) + 8);
  overview.resize(size);
  overview.show();
  const QImage image = renderFigureImage(overview, size, 1.0);
  // The key's gradient runs from white to the map's darkest colour under the cells: its dark
  // end is in the figure's bottom band, below the last thumbnail.
  const int cells_bottom = overview.itemRect(overview.itemCount() - 1).bottom() + figureTitleHeight();
  const QColor dark = QColor(colorAt(ColorMap::Sequential, 1.0));
  bool found = false;
  for (int y = cells_bottom + 4; y < image.height() && !found; ++y)
    for (int x = 0; x < image.width() && !found; ++x) {
      const QColor c = image.pixelColor(x, y);
      found = std::abs(c.red() - dark.red()) + std::abs(c.green() - dark.green()) + std::abs(c.blue() - dark.blue()) < 12;
    }
  CHECK(found);
  // With a score's badges, the score's key too.
  HeadBadges badges;
  badges.metric = &headMetrics().front();
  showHeadOverview(overview, *w.run(), false, badges);
  REQUIRE(overview.colorKeys().size() == 2);
  CHECK(overview.colorKeys()[1].caption == badges.metric->name);
}

TEST_CASE("Concat vs Sum reads at the default window size: z and r_h get room, the shapes fit", "[window][concat]") {
  PanelWindow w(builtinModelDir(), QSize(1600, 1000));
  w.window.tabs()->setCurrentWidget(w.window.view(QStringLiteral("concat")));
  auto* view = w.window.viewAs<ConcatSumView>(QStringLiteral("concat"));
  REQUIRE(waitFor([&] { return view->layerResult() != nullptr; }));
  QTest::qWait(100);
  INFO("z " << view->zPlot()->width() << " x " << view->zPlot()->height() << ", r_h cell " << view->headResults()->cellWidth());
  CHECK(view->zPlot()->width() >= 300);
  CHECK(view->zPlot()->height() >= 180);
  CHECK(view->headResults()->cellWidth() >= 60);
  REQUIRE(view->headResults()->colorKeys().size() == 1);  // r_h's shared colour scale, drawn under them
  QTableWidget* shapes = view->shapesTable();
  CHECK_FALSE(shapes->horizontalScrollBar()->isVisible());
  CHECK(shapes->horizontalHeader()->length() <= shapes->viewport()->width());
  for (int r = 0; r < shapes->rowCount(); ++r) {
    // The exact columns are never cut.
    const QFontMetrics fm(shapes->font());
    CHECK(fm.horizontalAdvance(shapes->item(r, 2)->text()) <= shapes->columnWidth(2));
  }
}

TEST_CASE("A long tensor name in a load error wraps between its parts, and the details keep it whole", "[window]") {
  CHECK(breakableText(QStringLiteral("tensor transformer.h.0.attn.c_attn.weight is short")) ==
        QStringLiteral("tensor transformer.\u200Bh.\u200B0.\u200Battn.\u200Bc_\u200Battn.\u200Bweight is short"));
  CHECK(breakableText(QStringLiteral("a short.name stays")) == QStringLiteral("a short.name stays"));
  PanelWindow w(test::fixtureModelDir());
  QTemporaryDir tmp;
  const std::filesystem::path dir = std::filesystem::path(tmp.path().toStdString()) / "truncated";
  hs::test::copy_model_folder(test::fixtureModelDir().toStdString(), dir);
  const auto weights = dir / "model.safetensors";
  std::filesystem::resize_file(weights, std::filesystem::file_size(weights) - 64);
  w.window.loadModel(QString::fromStdString(dir.string()));
  QMessageBox* box = nullptr;
  REQUIRE(waitFor([&] { return (box = w.window.findChild<QMessageBox*>(QStringLiteral("modelLoadError"))) != nullptr; }));
  INFO(box->detailedText().toStdString());
  CHECK(box->detailedText().contains(QStringLiteral("truncated")));
  CHECK_FALSE(box->detailedText().contains(QChar(0x200B)));
  CHECK(box->informativeText().contains(QChar(0x200B)));
  QString shown = box->informativeText();
  CHECK(shown.remove(QChar(0x200B)).startsWith(box->detailedText()));
  box->close();
}

TEST_CASE("The option --view ablation opens the window with the Ablation panel showing", "[window][ablation]") {
  PanelWindow w(test::fixtureModelDir(), QSize(1400, 900), false, QString::fromLatin1(MainWindow::kAblationViewId));
  CHECK(w.window.ablationDock()->isVisible());
  CHECK(w.window.tabs()->currentIndex() == 0);
  QProcess p;
  p.start(QStringLiteral(HEADSCOPE_GUI_PATH), {QStringLiteral("--help")});
  REQUIRE(p.waitForFinished(20000));
  const QString help = QString::fromUtf8(p.readAllStandardOutput());
  CHECK(help.contains(QStringLiteral("  ablation ")));
  // A wrong name lists it among the choices.
  QProcess bad;
  bad.setProcessEnvironment([] {
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert(QStringLiteral("QT_QPA_PLATFORM"), QStringLiteral("offscreen"));
    return env;
  }());
  bad.start(QStringLiteral(HEADSCOPE_GUI_PATH), {QStringLiteral("--view"), QStringLiteral("nonsense")});
  REQUIRE(bad.waitForFinished(20000));
  CHECK(bad.exitCode() == 2);
  CHECK(QString::fromUtf8(bad.readAllStandardError()).contains(QStringLiteral(", ablation")));
}
