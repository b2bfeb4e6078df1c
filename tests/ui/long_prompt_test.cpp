// Long prompts in the window: the attention pattern zooms and pans, its labels thin out by the
// cell size at the current zoom, the token strip keeps the selection in view, the prompt box
// grows with its text, and byte tokens read as bytes or as the character they make.
#include <catch2/catch.hpp>

#include <QApplication>
#include <QLabel>
#include <QPushButton>
#include <QScrollArea>
#include <QScrollBar>
#include <QSignalSpy>
#include <QTest>
#include <QWheelEvent>
#include <QPainter>

#include <cmath>
#include <limits>

#include "core/session/session.h"
#include "ui/base/figure.h"
#include "ui/controller/selection.h"
#include "ui/views/attention_view.h"
#include "ui/widgets/heatmap_view.h"
#include "ui/widgets/prompt_edit.h"
#include "ui/widgets/token_strip.h"
#include "ui/window/main_window.h"
#include "ui_test_support.h"

using namespace hs::ui;
using hs::ui::test::waitFor;

namespace {

// A causal [n, n] pattern (rows sum to 1) with labels "t0", "t1", ...
void showCausal(HeatmapView& view, int n) {
  std::vector<float> values(static_cast<size_t>(n) * n, std::numeric_limits<float>::quiet_NaN());
  for (int q = 0; q < n; ++q)
    for (int k = 0; k <= q; ++k) values[static_cast<size_t>(q) * n + k] = 1.0f / (q + 1);
  view.setMatrix(n, n, values);
  QStringList labels;
  for (int i = 0; i < n; ++i) labels << QStringLiteral("t%1").arg(i);
  view.setRowLabels(labels);
  view.setColumnLabels(labels);
  view.replotNow();
}

QWidget* plotOf(HeatmapView& view) { return view.findChild<QWidget*>(QStringLiteral("heatmapPlot")); }

// One notch (or several) of the mouse wheel over `cell` of the view, as a mouse sends it.
void wheelAt(HeatmapView& view, int row, int col, int notches) {
  QWidget* plot = plotOf(view);
  const QPointF at = plot->mapFrom(&view, view.cellCenter(row, col));
  QWheelEvent event(at, plot->mapToGlobal(at), QPoint(), QPoint(0, 120 * notches), Qt::NoButton, Qt::NoModifier,
                    Qt::NoScrollPhase, false);
  QApplication::sendEvent(plot, &event);
  view.replotNow();
}

struct ZoomView {
  HeatmapView view;
  explicit ZoomView(int n) {
    view.setPositionZoom(true);
    view.resize(800, 800);
    view.show();
    REQUIRE(QTest::qWaitForWindowExposed(&view));
    showCausal(view, n);
    view.replotNow();
  }
};

}  // namespace

TEST_CASE("The mouse wheel zooms the attention heatmap around the pointer and a double-click resets", "[zoom]") {
  ZoomView z(250);
  HeatmapView& view = z.view;
  QSignalSpy changed(&view, &HeatmapView::zoomChanged);
  CHECK(view.visiblePositions() == std::pair(0, 249));
  CHECK(!view.isZoomed());
  CHECK(view.zoomCaption().isEmpty());
  // Zoom in over position 150 (on the diagonal) until about 30 positions show.
  for (int i = 0; i < 10 && view.visiblePositions().second - view.visiblePositions().first > 40; ++i)
    wheelAt(view, 150, 150, 1);
  const auto [first, last] = view.visiblePositions();
  CHECK(view.isZoomed());
  CHECK(last - first + 1 <= 40);
  CHECK(last - first + 1 >= 20);
  CHECK(first <= 150);
  CHECK(last >= 150);
  CHECK(changed.count() >= 1);
  // Position 150 stayed under the pointer: its cell is still drawn where the wheel turned.
  CHECK(view.cellAt(view.cellCenter(150, 150)) == QPoint(150, 150));
  CHECK(view.zoomCaption() == QStringLiteral("positions %1–%2").arg(first).arg(last));
  // Zooming out again never shows more than the matrix.
  wheelAt(view, 150, 150, -30);
  CHECK(!view.isZoomed());
  CHECK(view.visiblePositions() == std::pair(0, 249));
  // In again, then a double-click shows every position.
  wheelAt(view, 100, 100, 8);
  REQUIRE(view.isZoomed());
  const QPoint at = plotOf(view)->mapFrom(&view, view.cellCenter(100, 100));
  QTest::mouseDClick(plotOf(view), Qt::LeftButton, Qt::NoModifier, at);
  view.replotNow();
  CHECK(!view.isZoomed());
  CHECK(view.visiblePositions() == std::pair(0, 249));
}

TEST_CASE("Labels thin out by the cell size at the current zoom: every label at 30 of 250 positions", "[zoom]") {
  ZoomView z(250);
  HeatmapView& view = z.view;
  const int all_shown = view.shownRowLabelCount();
  // 250 cells in about 700 px: cells of under 3 px, so only every k-th label, k from the cell size.
  CHECK(all_shown < 80);
  CHECK(all_shown > 10);
  view.setVisiblePositions(120, 149);
  view.replotNow();
  CHECK(view.visiblePositions() == std::pair(120, 149));
  CHECK(view.shownRowLabelCount() == 30);
  CHECK(view.shownColumnLabelCount() == 30);
  // Half-way: labels twice as dense as at full view (about as many fit the axis), not every one.
  auto labelled = [&](int from, int to) {
    int count = 0;
    for (int i = from; i <= to; ++i) count += !view.rowTickLabel(i).isEmpty();
    return count;
  };
  view.resetZoom();
  view.replotNow();
  const int full_density = labelled(0, 100);
  view.setVisiblePositions(0, 124);
  view.replotNow();
  CHECK(labelled(0, 100) * 2 > full_density * 3);
  CHECK(labelled(0, 100) < 101);
  // The selected and the hovered position always have their label, even between thinned ones.
  view.resetZoom();
  view.replotNow();
  const int before = view.shownRowLabelCount();
  view.setHighlightedRow(247);
  view.setHoverRow(101);
  view.replotNow();
  CHECK(view.rowTickLabel(247) == QStringLiteral("t247"));
  CHECK(view.rowTickLabel(101) == QStringLiteral("t101"));
  CHECK(view.shownRowLabelCount() <= before + 2);
}

TEST_CASE("A drag pans the zoomed heatmap without selecting, but a click still selects", "[zoom]") {
  ZoomView z(250);
  HeatmapView& view = z.view;
  QSignalSpy clicked(&view, &HeatmapView::cellClicked);
  view.setVisiblePositions(120, 149);
  view.replotNow();
  QWidget* plot = plotOf(view);
  const QPoint from = plot->mapFrom(&view, view.cellCenter(135, 135));
  const QPoint to = from + QPoint(view.cellArea().width() / 3, 0);  // a third of the width to the right
  QTest::mousePress(plot, Qt::LeftButton, Qt::NoModifier, from);
  QMouseEvent move(QEvent::MouseMove, QPointF(from + QPoint(10, 0)), plot->mapToGlobal(QPointF(from + QPoint(10, 0))),
                   Qt::NoButton, Qt::LeftButton, Qt::NoModifier);
  QApplication::sendEvent(plot, &move);
  QMouseEvent move2(QEvent::MouseMove, QPointF(to), plot->mapToGlobal(QPointF(to)), Qt::NoButton, Qt::LeftButton,
                    Qt::NoModifier);
  QApplication::sendEvent(plot, &move2);
  QTest::mouseRelease(plot, Qt::LeftButton, Qt::NoModifier, to);
  view.replotNow();
  // Dragged right: earlier positions came into view, as many as the window is wide, a third of it.
  const auto [first, last] = view.visiblePositions();
  CHECK(last - first == 29);
  CHECK(first >= 108);
  CHECK(first <= 112);
  CHECK(clicked.count() == 0);
  QTest::mouseClick(plot, Qt::LeftButton, Qt::NoModifier, plot->mapFrom(&view, view.cellCenter(125, 120)));
  REQUIRE(clicked.count() == 1);
  CHECK(clicked.at(0).at(0).toInt() == 125);
  CHECK(view.visiblePositions() == std::pair(first, last));
}

TEST_CASE("The zoom keeps its positions when the matrix grows and is clamped when it shrinks", "[zoom]") {
  ZoomView z(250);
  HeatmapView& view = z.view;
  view.setVisiblePositions(120, 149);
  showCausal(view, 251);  // a typed key
  CHECK(view.isZoomed());
  CHECK(view.visiblePositions() == std::pair(120, 149));
  showCausal(view, 140);  // text deleted: the window moves back inside, its size kept
  CHECK(view.visiblePositions() == std::pair(110, 139));
  showCausal(view, 20);  // smaller than the window: no zoom left
  CHECK(!view.isZoomed());
  CHECK(view.visiblePositions() == std::pair(0, 19));
}

TEST_CASE("An export of a zoomed heatmap shows the zoomed positions and says so in its title", "[zoom]") {
  ZoomView z(250);
  HeatmapView& view = z.view;
  // Rows alternately 0 and 1: a vertical line through the cells crosses one colour change a row.
  const int n = 250;
  std::vector<float> values(static_cast<size_t>(n) * n, std::numeric_limits<float>::quiet_NaN());
  for (int q = 0; q < n; ++q)
    for (int k = 0; k <= q; ++k) values[static_cast<size_t>(q) * n + k] = static_cast<float>(q % 2);
  view.setMatrix(n, n, values);
  view.setFigureText({QStringLiteral("L0H0 attention pattern"), QStringLiteral("model · prompt")}, QStringLiteral("a"));
  CHECK(view.figureText().title == QStringLiteral("L0H0 attention pattern"));
  view.setVisiblePositions(120, 149);
  view.replotNow();
  CHECK(view.figureText().title == QStringLiteral("L0H0 attention pattern, positions 120–149"));
  // The figure body is laid out as the screen is, below the title band.
  auto changes_down = [&](const QImage& image, int x, int from_row, int to_row) {
    int changes = 0;
    const int y0 = view.cellCenter(from_row, 0).y() + figureTitleHeight(), y1 = view.cellCenter(to_row, 0).y() + figureTitleHeight();
    for (int y = y0 + 1; y <= y1; ++y) changes += image.pixel(x, y) != image.pixel(x, y - 1);
    return changes;
  };
  view.setHoverRow(133);  // the pointer over the plot: no outline and no label of its own in the export
  view.replotNow();
  const int x = view.cellCenter(140, 121).x();
  const QImage zoomed = renderFigureImage(view, view.figureSize(), 1.0);
  // Rows 122..149 of the 30 shown: 27 changes of colour, as on screen.
  CHECK(changes_down(zoomed, x, 122, 149) == 27);
  CHECK(view.visiblePositions() == std::pair(120, 149));       // the export changed nothing on screen
  CHECK(view.rowTickLabel(133) == QStringLiteral("t133"));     // the hovered label is back
  // Not zoomed, the same stretch of the figure crosses many more rows.
  view.resetZoom();
  view.replotNow();
  const QImage whole = renderFigureImage(view, view.figureSize(), 1.0);
  CHECK(changes_down(whole, view.cellCenter(200, 10).x(), 20, 200) > 100);
}

TEST_CASE("Row labels fit the longest label up to a cap, elided, with the full text on hover", "[zoom]") {
  HeatmapView view;
  view.resize(700, 500);
  view.show();
  REQUIRE(QTest::qWaitForWindowExposed(&view));
  const QString long_label = QStringLiteral("a-label-much-longer-than-any-token-should-be");
  const QStringList labels = {QStringLiteral("<|endoftext|>"), QStringLiteral("␣cat"), long_label};
  view.setMatrix(3, 3, {1, NAN, NAN, 0.5f, 0.5f, NAN, 0.2f, 0.3f, 0.5f});
  view.setRowLabels(labels);
  view.setColumnLabels(labels);
  view.replotNow();
  CHECK(view.rowTickLabel(0) == QStringLiteral("<|endoftext|>"));  // whole, not "<|endoftext…"
  CHECK(view.rowTickLabel(1) == QStringLiteral("␣cat"));
  CHECK(view.rowTickLabel(2).endsWith(QChar(0x2026)));
  CHECK(view.rowTickLabel(2).size() < long_label.size());
  // The label area is as wide as the widest shown label.
  const QFontMetrics metrics(view.tickLabelFont());
  CHECK(view.cellArea().left() >= metrics.horizontalAdvance(QStringLiteral("<|endoftext|>")));
  // Hovering a label: the full text.
  const QPoint over_label(view.cellArea().left() - 10, view.cellCenter(2, 0).y());
  CHECK(view.labelTextAt(over_label) == long_label + QStringLiteral(" (2)"));
}

TEST_CASE("In the window: zoom survives a typed key, the strip follows the selection, the prompt box grows", "[zoom][window]") {
  // The built-in model: a 256-token context, room for a long prompt.
  // Two dozen short lines: past the prompt box's eight, and about 200 tokens (under the context).
  QString text;
  for (int i = 0; i < 18; ++i) text += QStringLiteral("The cat sat on the mat %1.\n").arg(i % 7);
  MainWindow window(MainWindowOptions{QString::fromStdString(hs::builtin_model_dir().string()), text, false});
  window.resize(1280, 800);
  window.show();
  REQUIRE(QTest::qWaitForWindowExposed(&window));
  REQUIRE(waitFor([&] { return window.controller()->currentRun() != nullptr; }));
  const int n = window.controller()->currentRun()->n_pos();
  REQUIRE(n > 120);
  REQUIRE(n < 250);
  auto* view = window.viewAs<AttentionView>(QStringLiteral("attention"));
  HeatmapView* heatmap = view->heatmap();
  REQUIRE(waitFor([&] { return heatmap->rowCount() == n; }));

  // The token strip scrolled to the selected last token.
  TokenStrip* strip = window.tokenStrip();
  auto* scroll = window.findChild<QScrollArea*>(QStringLiteral("tokenScroll"));
  REQUIRE(scroll);
  auto chip_visible = [&](int pos) {
    const QRect chip(strip->mapTo(scroll->viewport(), strip->chipRect(pos).topLeft()), strip->chipRect(pos).size());
    return scroll->viewport()->rect().contains(chip);
  };
  CHECK(window.selection()->position() == n - 1);
  REQUIRE(waitFor([&] { return chip_visible(n - 1); }));
  CHECK(scroll->verticalScrollBar()->value() > 0);
  CHECK(!chip_visible(0));
  // Selecting an early token scrolls back to it.
  window.selection()->setPosition(2);
  REQUIRE(waitFor([&] { return chip_visible(2); }));
  CHECK(!chip_visible(n - 1));
  window.selection()->setPosition(n - 1);
  REQUIRE(waitFor([&] { return chip_visible(n - 1); }));

  // The prompt box grew with its text, and stopped at its cap.
  PromptEdit* prompt = window.promptEdit();
  CHECK(prompt->wrappedLines() > PromptEdit::kMaxLines);
  CHECK(prompt->height() == prompt->heightForLines(PromptEdit::kMaxLines));

  // Zoom in, then type: the same positions stay in view.
  heatmap->setVisiblePositions(100, 129);
  CHECK(view->resetZoomButton()->isEnabled());
  CHECK(view->zoomCaption()->text().contains(QStringLiteral("100–129")));
  CHECK(view->figureText().title.contains(QStringLiteral("positions 100–129")));
  const quint64 job = window.controller()->currentRun()->job;
  prompt->moveCursor(QTextCursor::End);
  QTest::keyClicks(prompt, QStringLiteral(" dog"));
  REQUIRE(waitFor([&] { return window.controller()->currentRun()->job != job && heatmap->rowCount() > n; }));
  CHECK(heatmap->isZoomed());
  CHECK(heatmap->visiblePositions() == std::pair(100, 129));
  // The strip followed the growing prompt's last token.
  const int grown = window.controller()->currentRun()->n_pos();
  CHECK(window.selection()->position() == grown - 1);
  REQUIRE(waitFor([&] { return chip_visible(grown - 1); }));
  // The button resets.
  QTest::mouseClick(view->resetZoomButton(), Qt::LeftButton);
  CHECK(!heatmap->isZoomed());
  CHECK(!view->resetZoomButton()->isEnabled());

  // A short prompt: the box is back to its two lines.
  prompt->setPlainText(QStringLiteral("Hello"));
  CHECK(prompt->height() == prompt->heightForLines(PromptEdit::kMinLines));
  prompt->setPlainText(QStringLiteral("one\ntwo\nthree\nfour"));
  CHECK(prompt->height() == prompt->heightForLines(4));
}

TEST_CASE("The zoom is reset when another model is opened", "[zoom][window]") {
  MainWindow window(MainWindowOptions{test::fixtureModelDir(), QStringLiteral("The cat sat on the mat and the dog"), false});
  window.resize(1280, 800);
  window.show();
  REQUIRE(QTest::qWaitForWindowExposed(&window));
  REQUIRE(waitFor([&] { return window.controller()->currentRun() != nullptr; }));
  auto* view = window.viewAs<AttentionView>(QStringLiteral("attention"));
  REQUIRE(waitFor([&] { return view->heatmap()->rowCount() > 6; }));
  view->heatmap()->setVisiblePositions(1, 5);
  REQUIRE(view->heatmap()->isZoomed());
  const std::string fixture_name = window.controller()->currentRun()->model().name();
  window.loadModel(QString::fromStdString(hs::builtin_model_dir().string()));
  REQUIRE(waitFor([&] {
    const auto run = window.controller()->currentRun();
    return run && run->model().name() != fixture_name && view->heatmap()->rowCount() == run->n_pos();
  }));
  CHECK(!view->heatmap()->isZoomed());
}

TEST_CASE("Byte tokens read as bytes, or as the character a run of them makes, in strip and heatmap", "[zoom][window]") {
  // GPT-2's tokenizer splits rare characters into byte tokens (the fixture uses it): 日 is E6 97 A5.
  MainWindow window(MainWindowOptions{test::fixtureModelDir(), QStringLiteral("a 日 b"), false});
  window.resize(1280, 800);
  window.show();
  REQUIRE(QTest::qWaitForWindowExposed(&window));
  REQUIRE(waitFor([&] { return window.controller()->currentRun() != nullptr; }));
  const auto run = window.controller()->currentRun();
  QStringList split;
  for (const QString& label : run->labels)
    if (label.contains(QChar(0x2039))) split << label;
  INFO(run->labels.join(QStringLiteral(" | ")).toStdString());
  REQUIRE(!split.isEmpty());
  for (const QString& label : split) {
    CHECK(label.contains(QStringLiteral("日")));  // the character, in each of its tokens
    CHECK(!label.contains(QStringLiteral("<0x")));
  }
  // The same labels in the strip and on the heatmap's axes.
  auto* heatmap = window.viewAs<AttentionView>(QStringLiteral("attention"))->heatmap();
  REQUIRE(waitFor([&] { return heatmap->rowCount() == run->n_pos(); }));
  heatmap->replotNow();
  for (int i = 0; i < run->n_pos(); ++i) {
    CHECK(window.tokenStrip()->label(i) == run->labels[i]);
    CHECK(heatmap->rowTickLabel(i) == run->labels[i]);
  }
}
