// The Graph view (issue 26): the built-in model's attribution graph over its own transcoders, as
// the core builds and prunes it, with live thresholds, paths, pins, supernodes, the JSON it saves
// and graph files it opens.
#include <catch2/catch.hpp>

#include <QCheckBox>
#include <QDoubleSpinBox>
#include <QFile>
#include <QFontMetrics>
#include <QLabel>
#include <QPushButton>
#include <QSpinBox>
#include <QTabWidget>
#include <QTemporaryDir>
#include <QTest>
#include <QTextBrowser>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include "core/analysis/attribution_graph.h"
#include "core/analysis/graph_prune.h"
#include "core/features/sae.h"
#include "core/io/graph_json.h"
#include "core/model/model.h"
#include "core/session/session.h"
#include "ui/controller/loaded_saes.h"
#include "ui/controller/selection.h"
#include "ui/views/graph_view.h"
#include "ui/views/units_view.h"
#include "ui/window/main_window.h"
#include "ui_test_support.h"

using namespace hs::ui;
using namespace hs::ui::test;

namespace {

std::string readText(const QString& path) {
  std::ifstream in(path.toStdString(), std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The node ids the core's JSON holds for `graph` pruned at the thresholds.
std::set<std::string> coreNodeIds(const hs::AttributionGraph& g, double nt, double et) {
  const hs::PrunedGraph pruned = hs::prune_graph(g, nt, et);
  hs::GraphLabels labels;
  labels.prompt_tokens.assign(static_cast<size_t>(g.n_pos), "t");
  const hs::GraphFile file = hs::read_graph_json(hs::graph_to_json(g, pruned, labels), "core");
  std::set<std::string> ids;
  for (const auto& n : file.nodes) ids.insert(n.node_id);
  return ids;
}

std::set<std::string> pictureIds(const GraphPicture& p) {
  std::set<std::string> ids;
  for (const auto& n : p.nodes) ids.insert(n.id.toStdString());
  return ids;
}

// The window on `model_dir` with `text`, on the Graph tab, its first run in.
struct GraphWindow {
  MainWindow window;
  GraphView* view = nullptr;
  GraphWindow(const QString& model_dir, const QString& text)
      : window(MainWindowOptions{.model_dir = model_dir, .text = text, .restore_settings = false,
                                 .view = QStringLiteral("graph")}) {
    window.resize(1500, 950);
    window.show();
    REQUIRE(waitFor([&] { return window.controller()->currentRun() != nullptr; }, 30000));
    view = window.viewAs<GraphView>(QStringLiteral("graph"));
    REQUIRE(view);
  }
};

}  // namespace

TEST_CASE("Graph view: the built-in model's graph over its own transcoders is the core's, pruned live at the thresholds set",
          "[graph][window]") {
  ClearSaes clear;
  GraphWindow w(QString::fromStdString(hs::builtin_model_dir().string()), QStringLiteral("The cat sat on the mat. The cat sat on the"));
  MainWindow& window = w.window;
  GraphView* view = w.view;

  // No transcoder loaded: the view says so, and offers the model's own.
  REQUIRE(waitFor([&] { return view->messageText().contains(QStringLiteral("load-shipped")); }, 10000));
  CHECK(view->messageText().contains(QStringLiteral("needs a transcoder for every layer")));
  CHECK(view->canvas()->picture() == nullptr);

  // One click loads them (and the SAE beside them, which the graph passes over).
  Q_EMIT view->findChild<QLabel*>(QStringLiteral("graphMessage"))->linkActivated(QStringLiteral("load-shipped"));
  REQUIRE(waitFor([&] { return view->isCurrent() && view->canvas()->picture() != nullptr; }, 120000));
  CHECK(view->messageText().isEmpty());

  // The graph is the core's for the same run and transcoders; the drawn nodes are those its JSON
  // keeps at the default thresholds.
  const auto run = window.controller()->currentRun();
  const auto result = std::dynamic_pointer_cast<const GraphResult>(view->result());
  REQUIRE(result);
  REQUIRE(result->graph);
  REQUIRE(result->transcoders.size() == 4);
  const hs::AttributionGraph expected = hs::attribution_graph(*run->plainCache(), result->transcoders);
  REQUIRE(expected.n_nodes() == result->graph->n_nodes());
  CHECK((expected.adjacency - result->graph->adjacency).cwiseAbs().maxCoeff() == 0.0f);
  CHECK(pictureIds(*view->canvas()->picture()) == coreNodeIds(expected, 0.8, 0.98));
  // The top logit is the run's own prediction.
  REQUIRE(!result->graph->logit_tokens.empty());
  CHECK(result->graph->logit_tokens[0] == run->next.front().id);

  // The logits stand in one line, far enough apart that the tokens written slanted (55 degrees)
  // above them are a line of text apart, and the last one's label stays inside the drawing.
  {
    const GraphPicture& drawn = *view->canvas()->picture();
    std::vector<QPointF> logits;
    for (size_t k = 0; k < drawn.nodes.size(); ++k)
      if (drawn.nodes[k].kind == GraphPicture::Kind::Logit) logits.push_back(view->canvas()->nodeCenter(static_cast<int>(k)));
    REQUIRE(logits.size() >= 2);
    std::sort(logits.begin(), logits.end(), [](QPointF a, QPointF b) { return a.x() < b.x(); });
    const double line = QFontMetrics(view->canvas()->font()).height();
    for (size_t k = 1; k < logits.size(); ++k) {
      CHECK(logits[k].y() == logits[0].y());
      CHECK((logits[k].x() - logits[k - 1].x()) * std::sin(55.0 * M_PI / 180.0) >= line);
    }
    CHECK(logits.back().x() + 70.0 * std::cos(55.0 * M_PI / 180.0) <= view->canvas()->figureSize().width());
  }

  // New thresholds prune again on a worker, and the drawing follows.
  const size_t before = view->canvas()->picture()->nodes.size();
  view->setThresholds(0.5, 0.9);
  REQUIRE(waitFor([&] { return view->isCurrent(); }, 30000));
  CHECK(view->shownPruning().node_threshold == 0.5);
  CHECK(pictureIds(*view->canvas()->picture()) == coreNodeIds(expected, 0.5, 0.9));
  CHECK(view->canvas()->picture()->nodes.size() < before);
  CHECK(view->statusText().contains(QStringLiteral("node threshold 0.5")));

  // A feature node: clicking it lists its edges and finds paths ending at a logit.
  const GraphPicture& pic = *view->canvas()->picture();
  int feature = -1;
  for (size_t i = 0; i < pic.nodes.size() && feature < 0; ++i)
    if (pic.nodes[i].kind == GraphPicture::Kind::Feature) feature = static_cast<int>(i);
  REQUIRE(feature >= 0);
  QTest::mouseClick(view->canvas(), Qt::LeftButton, {}, view->canvas()->nodeCenter(feature).toPoint());
  CHECK(view->canvas()->selectedNode() == feature);
  REQUIRE(!view->canvas()->selectedPaths().empty());
  CHECK(view->details()->toPlainText().contains(QStringLiteral("Strongest")));
  CHECK(view->details()->toPlainText().contains(QStringLiteral("promotes")));

  // Pins and a supernode: "pinned only" draws the group as one item.
  int other = -1;
  for (size_t i = 0; i < pic.nodes.size() && other < 0; ++i)
    if (pic.nodes[i].kind == GraphPicture::Kind::Feature && static_cast<int>(i) != feature) other = static_cast<int>(i);
  REQUIRE(other >= 0);
  int logit = -1;
  for (size_t i = 0; i < pic.nodes.size(); ++i)
    if (pic.nodes[i].kind == GraphPicture::Kind::Logit) logit = static_cast<int>(i);
  REQUIRE(logit >= 0);
  view->canvas()->setPinned(pic.nodes[static_cast<size_t>(feature)].id, true);
  view->canvas()->setPinned(pic.nodes[static_cast<size_t>(other)].id, true);
  view->canvas()->setPinned(pic.nodes[static_cast<size_t>(logit)].id, true);
  view->canvas()->groupNodes(QStringLiteral("cat features"),
                             {pic.nodes[static_cast<size_t>(feature)].id, pic.nodes[static_cast<size_t>(other)].id});
  view->pinnedOnlyBox()->setChecked(true);
  CHECK(view->canvas()->drawnNodeCount() == 2);  // the group and the logit
  // The group's edge to the logit is the sum of its members' edges.
  double summed = 0.0;
  for (const auto& e : pic.edges)
    if (e.target == logit && (e.source == feature || e.source == other)) summed += e.weight;
  CHECK(view->canvas()->drawnEdgeCount() == (summed != 0.0 ? 1 : 0));
  view->pinnedOnlyBox()->setChecked(false);
  CHECK(view->canvas()->drawnNodeCount() == static_cast<int>(pic.nodes.size()));

  // Saved JSON: the core's JSON of the same graph at the thresholds shown.
  QTemporaryDir tmp;
  const QString path = tmp.filePath(QStringLiteral("saved.json"));
  REQUIRE(view->saveJson(path).isEmpty());
  const hs::GraphFile saved = hs::read_graph_json(readText(path), "saved.json");
  std::set<std::string> saved_ids;
  for (const auto& n : saved.nodes) saved_ids.insert(n.node_id);
  CHECK(saved_ids == coreNodeIds(expected, 0.5, 0.9));
  CHECK(saved.scan == "headscope-tiny");
  // A folder that cannot be written to: a message, nothing written.
  CHECK(!view->saveJson(tmp.filePath(QStringLiteral("no/such/folder/g.json"))).isEmpty());

  // Double-clicking a feature opens it in the Features view.
  QTest::mouseDClick(view->canvas(), Qt::LeftButton, {}, view->canvas()->nodeCenter(feature).toPoint());
  auto* features = window.viewAs<UnitsView>(QStringLiteral("features"));
  REQUIRE(features);
  const GraphPicture::Node& fnode = pic.nodes[static_cast<size_t>(feature)];
  CHECK(window.findChild<QTabWidget*>(QStringLiteral("viewTabs"))->currentWidget() == features);
  CHECK(features->chosenUnit() == std::stoi(fnode.id.toStdString().substr(fnode.id.indexOf('_') + 1)));
  CHECK(window.selection()->position() == fnode.pos);
  CHECK(LoadedSaes::instance().entry(features->saeId())->sae->layer == fnode.layer);
}

TEST_CASE("Graph view: a graph file opens as the file's graph, never the prompt's, and a broken one gets a message",
          "[graph]") {
  ClearSaes clear;
  GraphWindow w(fixtureModelDir(), QStringLiteral("The cat sat"));
  GraphView* view = w.view;

  QTemporaryDir tmp;
  const QString broken = tmp.filePath(QStringLiteral("broken.json"));
  {
    QFile f(broken);
    REQUIRE(f.open(QIODevice::WriteOnly));
    f.write("{\"metadata\": {}, \"nodes\": [");
  }
  view->openFile(broken);
  REQUIRE(waitFor([&] { return view->messageText().contains(QStringLiteral("could not be opened")); }, 10000));
  CHECK(!view->showingFile());

  const QString fixture = QStringLiteral(HEADSCOPE_SOURCE_DIR "/tests/fixtures/graph/builtin/graph.json");
  const hs::GraphFile file = hs::read_graph_json(readText(fixture), "graph.json");
  view->openFile(fixture);
  REQUIRE(waitFor([&] { return view->showingFile() && view->isCurrent(); }, 10000));
  CHECK(view->messageText().contains(QStringLiteral("not the typed prompt")));
  REQUIRE(view->canvas()->picture());
  CHECK(view->canvas()->picture()->nodes.size() == file.nodes.size());
  CHECK(view->canvas()->picture()->edges.size() == file.links.size());
  CHECK(view->canvas()->picture()->positions.size() == static_cast<int>(file.prompt_tokens.size()));
  CHECK(!view->nodeThresholdBox()->isEnabled());
  CHECK(view->figureText().title.contains(QStringLiteral("graph.json")));
  view->closeFile();
  CHECK(!view->showingFile());
  CHECK(view->canvas()->picture() == nullptr);  // this fixture model has no transcoders loaded
}

TEST_CASE("Graph view: MLP neurons as nodes and the information-flow routes are the core's, and a route's attention edge "
          "explains itself by QK tracing",
          "[graph][window]") {
  ClearSaes clear;
  GraphWindow w(QString::fromStdString(hs::builtin_model_dir().string()), QStringLiteral("The cat sat. The cat"));
  MainWindow& window = w.window;
  GraphView* view = w.view;
  const auto run = window.controller()->currentRun();

  // Neurons: no transcoder needed; the graph is the core's neuron graph, and the view says that
  // neurons are polysemantic.
  view->setMode(GraphView::kNeurons);
  REQUIRE(waitFor([&] { return view->isCurrent() && view->canvas()->picture() != nullptr; }, 120000));
  CHECK(view->messageText().contains(QStringLiteral("polysemantic")));
  auto result = std::dynamic_pointer_cast<const GraphResult>(view->result());
  REQUIRE(result);
  REQUIRE(result->graph);
  CHECK(result->graph->unit == hs::AttributionGraph::Unit::Neuron);
  const hs::AttributionGraph neurons = hs::neuron_attribution_graph(*run->plainCache());
  REQUIRE(neurons.n_nodes() == result->graph->n_nodes());
  CHECK((neurons.adjacency - result->graph->adjacency).cwiseAbs().maxCoeff() == 0.0f);
  CHECK(pictureIds(*view->canvas()->picture()) == coreNodeIds(neurons, 0.8, 0.98));
  CHECK(view->figureText().title.contains(QStringLiteral("MLP neurons")));

  // Routes: the core's routes at the threshold set; the start node is the last position's final
  // residual, and every drawn edge is a route edge.
  view->setMode(GraphView::kRoutes);
  view->setRouteThreshold(0.05);
  REQUIRE(waitFor([&] { return view->isCurrent() && view->result() != result; }, 60000));
  result = std::dynamic_pointer_cast<const GraphResult>(view->result());
  REQUIRE(result->routes);
  hs::RouteOptions ro;
  ro.threshold = 0.05;
  const hs::InfoRoutes routes = hs::info_routes(*run->plainCache(), ro);
  CHECK(result->routes->route_edges == routes.route_edges);
  const GraphPicture& pic = *view->canvas()->picture();
  CHECK(pic.edges.size() == routes.route_edges.size());
  int start = -1;
  for (size_t i = 0; i < pic.nodes.size(); ++i)
    if (pic.nodes[i].goal) start = static_cast<int>(i);
  REQUIRE(start >= 0);
  CHECK(pic.nodes[static_cast<size_t>(start)].id.toStdString() == routes.node_name(routes.start_node()));

  // A node with an attention edge into it: its details offer "why?", which traces the head.
  const GraphPicture::Edge* attention = nullptr;
  for (const auto& e : pic.edges)
    if (e.head >= 0 && (!attention || std::abs(e.weight) > std::abs(attention->weight))) attention = &e;
  REQUIRE(attention);
  view->canvas()->selectNode(attention->target);
  const QString link = QStringLiteral("qk:%1:%2:%3:%4")
                           .arg(attention->layer)
                           .arg(attention->head)
                           .arg(pic.nodes[static_cast<size_t>(attention->target)].pos)
                           .arg(pic.nodes[static_cast<size_t>(attention->source)].pos);
  CHECK(view->details()->toHtml().contains(link));
  Q_EMIT view->details()->anchorClicked(QUrl(link));
  REQUIRE(waitFor([&] { return view->qkTrace() != nullptr; }, 30000));
  const hs::QkTrace& t = *view->qkTrace();
  CHECK(t.layer == attention->layer);
  CHECK(t.head == attention->head);
  CHECK(!t.transcoders);  // no transcoders loaded: neurons
  // The listed pairs plus the remainder are the run's score.
  double sum = t.remainder;
  for (const auto& p : t.pairs) sum += p.term;
  CHECK(sum == Approx(t.score_before_softcap).epsilon(1e-4).margin(1e-4));
  CHECK(view->details()->toPlainText().contains(QStringLiteral("Why L%1H%2 attends").arg(t.layer).arg(t.head)));

  // Any attention edge: the QK row follows the selected head and position, and offers the key
  // that head attends to most from there.
  const int last = run->n_pos() - 1;
  window.selection()->setHead(3, 2);
  window.selection()->setPosition(last);
  CHECK(view->qkQueryBox()->value() == last);
  Eigen::Index most = 0;
  run->run.cache->pattern_row(3, 2, last).head(last + 1).maxCoeff(&most);
  CHECK(view->qkKeyBox()->value() == static_cast<int>(most));
  QTest::mouseClick(view->qkButton(), Qt::LeftButton);
  REQUIRE(waitFor([&] { return view->qkTrace() != nullptr; }, 30000));
  CHECK(view->qkTrace()->layer == 3);
  CHECK(view->qkTrace()->head == 2);
  CHECK(view->qkTrace()->query_pos == last);
  CHECK(view->qkTrace()->key_pos == static_cast<int>(most));
  CHECK(view->qkTrace()->score == Approx(run->run.cache->head_scores(3, 2)(last, most)).epsilon(1e-6));
}
