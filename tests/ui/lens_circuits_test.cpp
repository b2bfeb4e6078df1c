// The logit lens and QK / OV views in the window: they draw the core's numbers, clicking selects,
// and their figures export.
#include <catch2/catch.hpp>

#include <QComboBox>
#include <QLabel>
#include <QTabWidget>
#include <QTableWidget>
#include <QTest>

#include "core/analysis/circuits.h"
#include "core/analysis/logit_lens.h"
#include "core/model/model.h"
#include "ui/base/figure.h"
#include "ui/controller/selection.h"
#include "ui/views/circuits_view.h"
#include "ui/views/logit_lens_view.h"
#include "ui/views/registry.h"
#include "ui/views/view_text.h"
#include "ui/widgets/bar_chart_view.h"
#include "ui/widgets/heatmap_view.h"
#include "ui/window/main_window.h"
#include "ui_test_support.h"

using namespace hs::ui;
using hs::ui::test::clickCell;
using hs::ui::test::waitFor;

namespace {

struct LensWindow {
  MainWindow window;
  explicit LensWindow(const QString& text = QStringLiteral("The cat sat on the mat"))
      : window(MainWindowOptions{test::fixtureModelDir(), text, false}) {
    window.resize(1400, 900);
    window.show();
    REQUIRE(waitFor([&] { return window.controller()->currentRun() != nullptr; }));
  }
  std::shared_ptr<const RunResult> run() const { return window.controller()->currentRun(); }
  Selection* selection() const { return window.selection(); }
  LogitLensView* lens() const { return window.viewAs<LogitLensView>(QStringLiteral("lens")); }
  CircuitsView* circuits() const { return window.viewAs<CircuitsView>(QStringLiteral("circuits")); }
};

std::shared_ptr<const LensResult> lensResult(const LensWindow& w) {
  return std::dynamic_pointer_cast<const LensResult>(w.lens()->result());
}
std::shared_ptr<const CircuitsResult> circuitsResult(const LensWindow& w) {
  return std::dynamic_pointer_cast<const CircuitsResult>(w.circuits()->result());
}

}  // namespace

TEST_CASE("The logit lens grid shows the core's top tokens and probabilities", "[window][lens]") {
  LensWindow w;
  w.window.tabs()->setCurrentWidget(w.lens());
  REQUIRE(waitFor([&] { return lensResult(w) && lensResult(w)->run_job == w.run()->job; }));
  const auto run = w.run();
  const hs::LogitLensSummary expected = hs::logit_lens_summary(*run->run.cache, std::nullopt, LogitLensView::kTopK);
  HeatmapView* grid = w.lens()->grid();
  const int L = run->n_layer(), S = run->n_pos();
  REQUIRE(grid->rowCount() == L + 1);
  REQUIRE(grid->columnCount() == S);
  REQUIRE(grid->cellTexts().size() == (L + 1) * S);
  for (int i = 0; i <= L; ++i) {
    for (int p = 0; p < S; ++p) {
      INFO("stream " << i << " pos " << p);
      CHECK(grid->plottedValue(i, p) == static_cast<double>(expected.top_prob(i, p, 0)));
      CHECK(grid->cellTexts()[i * S + p] == tokenText(*run, expected.top_id(i, p, 0)));
    }
  }
  // The last row is the model's own prediction: its top token after the last position is the
  // run's next token.
  CHECK(expected.top_id(L, S - 1, 0) == run->next.front().id);
  CHECK(grid->rangeLower() == 0.0);
  CHECK(grid->rangeUpper() == 1.0);
  const QString tip = w.lens()->cellTooltip(L, S - 1);
  for (int k = 0; k < LogitLensView::kTopK; ++k)
    CHECK(tip.contains(tokenText(*run, expected.top_id(L, S - 1, k)).toHtmlEscaped()));

  // Clicking a cell selects its position and layer (the last row: the last layer).
  clickCell(grid, 2, 1);
  CHECK(w.selection()->position() == 1);
  CHECK(w.selection()->layer() == 1);
  clickCell(grid, 0, 3);
  CHECK(w.selection()->position() == 3);
  CHECK(w.selection()->layer() == 0);

  // A target: the cells are coloured by its probability.
  const int32_t target = run->next[1].id;
  w.selection()->setTarget(target);
  REQUIRE(waitFor([&] { return lensResult(w) && lensResult(w)->lens->target == target; }));
  const hs::LogitLensSummary with_target = hs::logit_lens_summary(*run->run.cache, target, LogitLensView::kTopK);
  for (int i = 0; i <= L; ++i)
    for (int p = 0; p < S; ++p) CHECK(grid->plottedValue(i, p) == static_cast<double>(with_target.target_probs[with_target.cell(i, p)]));
  CHECK(w.lens()->targetCombo()->currentData().toInt() == target);
  CHECK(w.lens()->cellTooltip(0, 0).contains(QStringLiteral("target")));
  // Back to the top token's probability from the view's own control.
  Q_EMIT w.lens()->targetCombo()->activated(0);
  CHECK(!w.selection()->target().has_value());
}

TEST_CASE("The QK / OV view shows the core's spectra and prompt circuits for the selected head", "[window][circuits]") {
  LensWindow w;
  w.window.tabs()->setCurrentWidget(w.circuits());
  w.selection()->setHead(1, 2);
  REQUIRE(waitFor([&] {
    const auto r = circuitsResult(w);
    return r && r->run_job == w.run()->job && r->spectrum->layer == 1 && r->spectrum->head == 2;
  }));
  const auto run = w.run();
  const auto model = run->run.model;
  const hs::ModelConfig& c = model->config();
  const hs::CircuitSpectrum s = hs::circuit_spectrum(*model->weights(), 1, 2);
  const hs::PromptCircuits p = hs::prompt_circuits(*model->weights(), 1, 2, run->run.tokens, CircuitsView::kTopK);

  // d_head singular values, then one zero bar for the other d_model - d_head: rank <= d_head.
  for (BarChartView* chart : {w.circuits()->qkSingularValues(), w.circuits()->ovSingularValues()}) {
    REQUIRE(chart->barCount() == c.d_head + 1);
    CHECK(chart->plottedValue(c.d_head) == 0.0);
    CHECK(chart->bar(c.d_head).label == QStringLiteral("σ%1–σ%2").arg(c.d_head + 1).arg(c.d_model));
  }
  for (int i = 0; i < c.d_head; ++i) {
    CHECK(w.circuits()->qkSingularValues()->plottedValue(i) == s.qk_singular_values[static_cast<size_t>(i)]);
    CHECK(w.circuits()->ovSingularValues()->plottedValue(i) == s.ov_singular_values[static_cast<size_t>(i)]);
    CHECK(w.circuits()->eigenvalues()->plottedValue(i) == s.ov_eigenvalues[static_cast<size_t>(i)].real());
  }
  CHECK(w.circuits()->copyingText().contains(QString::number(s.copying_score, 'f', 3)));

  HeatmapView* qk = w.circuits()->qkScores();
  const int n = run->n_pos();
  REQUIRE(qk->rowCount() == n);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) CHECK(qk->plottedValue(i, j) == static_cast<double>(p.qk_scores(i, j)));
  CHECK(qk->rangeLower() == -qk->rangeUpper());  // signed: diverging, symmetric around 0

  QTableWidget* table = w.circuits()->ovTable();
  REQUIRE(table->rowCount() == n);
  // The token's own entry first (value and rank), then what it promotes most.
  CHECK(table->horizontalHeaderItem(1)->text() == QStringLiteral("itself (rank)"));
  CHECK(table->item(2, 1)->text().endsWith(QStringLiteral("(#%1)").arg(p.ov_self_ranks[2] + 1)));
  CHECK(table->item(2, 2)->text().startsWith(tokenText(*run, p.ov_top_ids[2 * CircuitsView::kTopK])));
  // Heads after layer 0 read the extended embedding by default, and say so.
  CHECK(s.vectors == hs::TokenVectors::Extended);
  CHECK(w.circuits()->copyingText().contains(QStringLiteral("extended embedding")));

  // The caption says what is folded and what is ignored.
  const auto* folding = w.circuits()->findChild<QLabel*>(QStringLiteral("circuitsFolding"));
  REQUIRE(folding);
  CHECK(folding->text().contains(QStringLiteral("Folded")));
  CHECK(folding->text().contains(QStringLiteral("Ignored: every bias")));

  // Clicking a QK row or an OV row selects that position.
  clickCell(qk, 3, 0);
  CHECK(w.selection()->position() == 3);
  table->cellClicked(1, 0);
  CHECK(w.selection()->position() == 1);
  CHECK(table->currentRow() == 1);

  // Another head: another spectrum.
  w.selection()->setHead(0, 1);
  REQUIRE(waitFor([&] { return circuitsResult(w) && circuitsResult(w)->spectrum->head == 1; }));
  CHECK(w.circuits()->qkSingularValues()->plottedValue(0) == hs::circuit_spectrum(*model->weights(), 0, 1).qk_singular_values[0]);
}

TEST_CASE("The QK / OV view's token vectors are chosen in the view, raw or extended, and say which", "[window][circuits]") {
  // Issue 21 item 6: the source of a head's token vectors, a choice inside the view; the default
  // is raw for layer 0's heads and extended after (the CLI's circuits --embedding default).
  LensWindow w;
  w.window.tabs()->setCurrentWidget(w.circuits());
  const auto weights = w.run()->run.model->weights();
  auto shown = [&](int layer, int head, hs::TokenVectors vectors) {
    return waitFor([&] {
      const auto r = circuitsResult(w);
      return r && r->run_job == w.run()->job && r->spectrum->layer == layer && r->spectrum->head == head &&
             r->spectrum->vectors == vectors && r->prompt.vectors == vectors;
    });
  };
  const auto* folding = w.circuits()->findChild<QLabel*>(QStringLiteral("circuitsFolding"));
  REQUIRE(folding);
  QComboBox* box = w.circuits()->tokenVectorsBox();
  REQUIRE(box);
  CHECK(w.circuits()->tokenVectors() == hs::TokenVectors::Default);
  CHECK(w.circuits()->viewInputs().isEmpty());
  w.selection()->setHead(1, 2);
  REQUIRE(shown(1, 2, hs::TokenVectors::Extended));

  // Raw for a head after layer 0: the spectrum and the prompt's circuits on raw embedding rows.
  w.circuits()->setTokenVectors(hs::TokenVectors::Raw);
  REQUIRE(shown(1, 2, hs::TokenVectors::Raw));
  const hs::CircuitSpectrum raw = hs::circuit_spectrum(*weights, 1, 2, hs::TokenVectors::Raw);
  const hs::CircuitSpectrum extended = hs::circuit_spectrum(*weights, 1, 2, hs::TokenVectors::Extended);
  REQUIRE(raw.copying_score != extended.copying_score);  // the choice is visible on this model
  CHECK(w.circuits()->copyingText().contains(QString::number(raw.copying_score, 'f', 3)));
  CHECK(w.circuits()->copyingText().contains(QStringLiteral("raw embedding")));
  CHECK(folding->text().contains(QStringLiteral("Tokens are the raw embedding rows")));
  const hs::PromptCircuits p = hs::prompt_circuits(*weights, 1, 2, w.run()->run.tokens, CircuitsView::kTopK,
                                                   hs::TokenVectors::Raw);
  CHECK(w.circuits()->qkScores()->plottedValue(1, 0) == static_cast<double>(p.qk_scores(1, 0)));
  // The choice stays with the view across heads, is its input for Export All and the command
  // line, and its analysis key says it.
  CHECK(w.circuits()->viewInputs().value(QString::fromLatin1(CircuitsView::kEmbedding)).toString() == QStringLiteral("raw"));
  const auto figures = w.circuits()->exportFigures(*w.run());
  REQUIRE(figures.size() == 1);
  CHECK(figures[0].analysis->params == QStringList{QStringLiteral("raw")});
  w.selection()->setHead(1, 0);
  REQUIRE(shown(1, 0, hs::TokenVectors::Raw));

  // Extended, chosen with the box itself.
  box->setCurrentIndex(box->findData(static_cast<int>(hs::TokenVectors::Extended)));
  REQUIRE(shown(1, 0, hs::TokenVectors::Extended));
  CHECK(w.circuits()->copyingText().contains(
      QString::number(hs::circuit_spectrum(*weights, 1, 0, hs::TokenVectors::Extended).copying_score, 'f', 3)));
  CHECK(folding->text().contains(QStringLiteral("Tokens are the extended embedding")));
  // A layer-0 head reads the raw embedding whatever is chosen, and the caption says why.
  w.selection()->setHead(0, 1);
  REQUIRE(shown(0, 1, hs::TokenVectors::Raw));
  CHECK(folding->text().contains(QStringLiteral("not the extended embedding asked for")));

  // The view's input set as the command line sets it (--embedding raw); a bad word is refused there.
  w.circuits()->setViewInputs({{QString::fromLatin1(CircuitsView::kEmbedding), QStringLiteral("raw")}});
  CHECK(w.circuits()->tokenVectors() == hs::TokenVectors::Raw);
  const ViewOption option = CircuitsView::descriptor().options.at(0);  // a copy: descriptor() is a temporary
  QString error;
  CHECK(parseViewOption(option, QStringLiteral("extended"), &error).has_value());
  CHECK_FALSE(parseViewOption(option, QStringLiteral("embedded"), &error).has_value());
  CHECK(error.contains(QStringLiteral("raw, extended, default")));
}

TEST_CASE("The lens and QK / OV views export their figures", "[export][lens][circuits]") {
  LensWindow w;
  for (const char* id : {"lens", "circuits"}) {
    INFO(id);
    AnalysisView* view = w.window.viewAs<AnalysisView>(QString::fromLatin1(id));
    w.window.tabs()->setCurrentWidget(view);
    REQUIRE(waitFor([&] { return view->result() && view->result()->run_job == w.run()->job; }));
    const auto figures = view->exportFigures(*w.run());
    REQUIRE(figures.size() == 1);
    CHECK(figures[0].analysis.has_value());
    const ExportFigure::Target target = figures[0].prepare();
    REQUIRE(target.source);
    const QImage image = renderFigureImage(*target.source, target.size, 1.0);
    CHECK(!image.isNull());
    CHECK(image.height() == target.size.height() + figureTitleHeight());
    CHECK(!target.source->figureText().subtitle.isEmpty());
  }
  CHECK(w.lens()->figureFileStem() == QStringLiteral("logit_lens"));
  CHECK(w.circuits()->figureFileStem() == QStringLiteral("circuits_L%1H%2").arg(w.selection()->layer()).arg(w.selection()->head()));
}
