#include "ui/views/graph_view.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDir>
#include <QDoubleSpinBox>
#include <QFile>
#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QInputDialog>
#include <QLabel>
#include <QMenu>
#include <QPainter>
#include <QPushButton>
#include <QScrollArea>
#include <QScrollBar>
#include <QSpinBox>
#include <QSplitter>
#include <QTextBrowser>
#include <QTimer>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrentRun>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>

#include "core/analysis/units.h"
#include "core/error.h"
#include "core/features/sae.h"
#include "core/model/model.h"
#include "core/tokenizer/tokenizer.h"
#include "ui/base/background.h"
#include "ui/base/deliver.h"
#include "ui/controller/loaded_saes.h"
#include "ui/controller/selection.h"
#include "ui/views/view_text.h"
#include "ui/widgets/refresh_when_shown.h"

namespace hs::ui {
namespace {

using Clock = std::chrono::steady_clock;
double msSince(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

QString html(const std::string& s) { return QString::fromStdString(s).toHtmlEscaped(); }
QString quoted(const QString& token) { return QStringLiteral("“%1”").arg(token.toHtmlEscaped()); }

// The transcoders the graph would use: the loaded transcoders, one per layer (the first loaded of
// a layer), or why there are none for some layer.
struct TranscoderChoice {
  QStringList ids;  // [layer] LoadedSaes ids, complete only when problem is empty
  QString problem;  // HTML
  bool offer_shipped = false;
};

// `has_shipped`: the model's folder carries SAEs of its own (saes/), offered in the message.
TranscoderChoice chooseTranscoders(const hs::Model& model, bool has_shipped) {
  TranscoderChoice choice;
  const hs::ModelConfig& config = model.config();
  const int L = config.n_layers;
  std::vector<QString> by_layer(static_cast<size_t>(L));
  std::vector<QString> others;
  for (const LoadedSae& e : LoadedSaes::instance().list()) {
    const hs::Sae& s = *e.sae;
    if (!s.is_transcoder() || s.layer < 0 || s.layer >= L || s.d_in != config.d_model || s.d_out != config.d_model) continue;
    if (by_layer[static_cast<size_t>(s.layer)].isEmpty()) by_layer[static_cast<size_t>(s.layer)] = e.id;
  }
  QStringList missing;
  for (int l = 0; l < L; ++l) {
    if (by_layer[static_cast<size_t>(l)].isEmpty()) missing.push_back(QString::number(l));
    choice.ids.push_back(by_layer[static_cast<size_t>(l)]);
  }
  if (missing.isEmpty()) return choice;
  choice.offer_shipped = has_shipped;
  choice.problem =
      missing.size() == L
          ? QStringLiteral("<b>An attribution graph needs a transcoder for every layer, and none of the loaded SAEs is a "
                           "transcoder of this model.</b> File &gt; Open Sparse Autoencoder… loads them (SAELens "
                           "transcoders, one per layer, or a circuit-tracer transcoder set).")
          : QStringLiteral("<b>An attribution graph needs a transcoder for every layer; none is loaded for layer %1.</b> "
                           "File &gt; Open Sparse Autoencoder… loads them.")
                .arg(missing.join(QStringLiteral(", ")));
  if (choice.offer_shipped)
    choice.problem += QStringLiteral(" This model comes with its own (<tt>saes/</tt>): <a href=\"load-shipped\">load them</a>.");
  return choice;
}

QString nodeLabel(const hs::GraphFile::Node& n, int latent) {
  if (n.feature_type == "embedding") return QString();
  if (n.feature_type == "logit") return QString();
  if (n.feature_type == "mlp reconstruction error") return QStringLiteral("error L%1").arg(QString::fromStdString(n.layer));
  if (n.feature_type == "mlp neuron") return QStringLiteral("L%1 N%2").arg(QString::fromStdString(n.layer)).arg(latent);
  return latent >= 0 ? QStringLiteral("L%1 F%2").arg(QString::fromStdString(n.layer)).arg(latent)
                     : QStringLiteral("L%1 #%2").arg(QString::fromStdString(n.layer)).arg(n.feature);
}

// The latent of a feature node id "{layer}_{latent}_{pos}", or -1.
int latentOf(const std::string& id) {
  const size_t a = id.find('_'), b = id.rfind('_');
  if (a == std::string::npos || b == a) return -1;
  try {
    return std::stoi(id.substr(a + 1, b - a - 1));
  } catch (...) {
    return -1;
  }
}

// What the canvas draws for a graph file (ours, or circuit-tracer's), with top logits for the
// features `logits` has (keyed by node id).
std::shared_ptr<GraphPicture> pictureOf(const hs::GraphFile& file, const std::map<std::string, QString>& logits) {
  auto g = std::make_shared<GraphPicture>();
  for (const std::string& t : file.prompt_tokens) g->positions.push_back(QString::fromStdString(t));
  int max_layer = 0;
  for (const hs::GraphFile::Node& n : file.nodes)
    if (n.layer != "E" && n.feature_type != "logit") max_layer = std::max(max_layer, std::stoi(n.layer) + 1);
  g->n_layers = max_layer;
  for (const hs::GraphFile::Node& n : file.nodes) {
    GraphPicture::Node p;
    p.id = QString::fromStdString(n.node_id);
    p.pos = n.ctx_idx;
    p.activation = n.activation.value_or(0.0);
    p.influence = n.influence.value_or(1.0);
    const QString token = n.ctx_idx >= 0 && n.ctx_idx < g->positions.size() ? g->positions[n.ctx_idx] : QString();
    const QString where = QStringLiteral("position %1, %2").arg(n.ctx_idx).arg(quoted(token));
    QString numbers;
    if (n.activation) numbers += QStringLiteral("activation %1").arg(*n.activation, 0, 'g', 4);
    if (n.influence) numbers += QStringLiteral("%1cumulative influence %2").arg(numbers.isEmpty() ? QString() : QStringLiteral(" · ")).arg(*n.influence, 0, 'f', 3);
    if (n.feature_type == "embedding") {
      p.kind = GraphPicture::Kind::Token;
      p.layer = -1;
      p.label = token;
      p.tooltip = QStringLiteral("<b>Token %1</b> at position %2: its embedding").arg(quoted(token)).arg(n.ctx_idx);
    } else if (n.feature_type == "logit") {
      p.kind = GraphPicture::Kind::Logit;
      p.layer = g->n_layers;
      // circuit-tracer's clerp: Output "tok" (p=0.123).
      const QString clerp = QString::fromStdString(n.clerp);
      const int open = clerp.indexOf(QLatin1Char('"')), close = clerp.lastIndexOf(QLatin1Char('"'));
      p.label = open >= 0 && close > open ? clerp.mid(open + 1, close - open - 1) : QString::number(n.feature);
      p.tooltip = QStringLiteral("<b>Logit of %1</b>%2<br>probability %3").arg(quoted(p.label),
                      n.is_target_logit ? QStringLiteral(" (the most probable)") : QString())
                      .arg(n.token_prob, 0, 'f', 4);
    } else if (n.feature_type == "mlp reconstruction error") {
      p.kind = GraphPicture::Kind::Error;
      p.layer = std::stoi(n.layer);
      p.label = nodeLabel(n, -1);
      p.tooltip = QStringLiteral("<b>Error node, layer %1</b> at %2<br>what the transcoder misses of the MLP's output "
                                 "(the real output minus the transcoder's)<br>%3")
                      .arg(p.layer).arg(where, numbers);
    } else {
      p.kind = GraphPicture::Kind::Feature;
      p.layer = std::stoi(n.layer);
      const int latent = latentOf(n.node_id);
      p.label = nodeLabel(n, latent);
      p.tooltip = QStringLiteral("<b>%1</b>%2 at %3<br>%4")
                      .arg(p.label.toHtmlEscaped(),
                           n.feature_type == "mlp neuron" ? QStringLiteral(" (MLP neuron)") : QString(), where, numbers);
      if (!n.clerp.empty()) p.tooltip += QStringLiteral("<br><i>%1</i>").arg(html(n.clerp));
      if (auto it = logits.find(n.node_id); it != logits.end()) p.tooltip += it->second;
    }
    g->nodes.push_back(std::move(p));
  }
  for (const hs::GraphFile::Link& l : file.links)
    g->edges.push_back({l.source, l.target, static_cast<float>(l.weight)});
  return g;
}

// The routes as the canvas draws them: rows per layer for the stream after attention, the MLP and
// the stream after the MLP; only the nodes and edges of the routes.
std::shared_ptr<GraphPicture> routesPicture(const hs::InfoRoutes& routes, const QStringList& tokens) {
  auto g = std::make_shared<GraphPicture>();
  g->positions = tokens;
  g->n_layers = 3 * routes.n_layers;
  for (int l = 0; l < routes.n_layers; ++l)
    g->layer_names << QStringLiteral("L%1 attn").arg(l) << QStringLiteral("L%1 MLP").arg(l) << QStringLiteral("L%1 out").arg(l);
  g->top_name = QString();
  std::vector<int> index(routes.nodes.size(), -1);
  auto add = [&](int n) {
    if (index[static_cast<size_t>(n)] >= 0) return index[static_cast<size_t>(n)];
    const hs::RouteNode& r = routes.nodes[static_cast<size_t>(n)];
    GraphPicture::Node p;
    p.id = QString::fromStdString(routes.node_name(n));
    p.pos = r.pos;
    const QString token = r.pos < tokens.size() ? quoted(tokens[r.pos]) : QString();
    QString what;
    switch (r.kind) {
      case hs::RouteNodeKind::Embedding:
        p.kind = GraphPicture::Kind::Token;
        p.layer = -1;
        what = QStringLiteral("the embedding");
        break;
      case hs::RouteNodeKind::AfterAttn:
        p.kind = GraphPicture::Kind::Stream;
        p.layer = 3 * r.layer;
        what = QStringLiteral("the residual stream after layer %1's attention").arg(r.layer);
        break;
      case hs::RouteNodeKind::Mlp:
        p.kind = GraphPicture::Kind::Mlp;
        p.layer = 3 * r.layer + 1;
        what = QStringLiteral("layer %1's MLP").arg(r.layer);
        break;
      case hs::RouteNodeKind::AfterMlp:
        p.kind = GraphPicture::Kind::Stream;
        p.layer = 3 * r.layer + 2;
        what = QStringLiteral("the residual stream after layer %1").arg(r.layer);
        break;
    }
    // Embeddings are labelled with their token, as in the other modes; the rest with LM-TT's names.
    p.label = r.kind == hs::RouteNodeKind::Embedding && r.pos < tokens.size() ? tokens[r.pos] : p.id;
    p.goal = n == routes.start_node();
    p.tooltip = QStringLiteral("<b>%1</b>: %2 at position %3, %4%5")
                    .arg(p.id, what).arg(r.pos).arg(token, p.goal ? QStringLiteral("<br>where the routes start") : QString());
    index[static_cast<size_t>(n)] = static_cast<int>(g->nodes.size());
    g->nodes.push_back(std::move(p));
    return index[static_cast<size_t>(n)];
  };
  add(routes.start_node());
  for (int k : routes.route_edges) {
    const hs::RouteEdge& e = routes.edges[static_cast<size_t>(k)];
    GraphPicture::Edge out;
    out.source = add(e.from);
    out.target = add(e.to);
    out.weight = e.weight;
    switch (e.kind) {
      case hs::RouteEdgeKind::Attention:
        out.kind = GraphPicture::EdgeKind::Attention;
        out.layer = e.layer;
        out.head = e.head;
        out.label = headLabel(e.layer, e.head);
        break;
      case hs::RouteEdgeKind::Residual: out.kind = GraphPicture::EdgeKind::Residual; break;
      case hs::RouteEdgeKind::Mlp: out.kind = GraphPicture::EdgeKind::Mlp; break;
    }
    g->edges.push_back(std::move(out));
  }
  return g;
}

}  // namespace

ViewDescriptor GraphView::descriptor() {
  ViewDescriptor d;
  d.id = QStringLiteral("graph");
  d.title = QStringLiteral("Graph");
  d.menu_text = QStringLiteral("&Graph");
  d.help = QStringLiteral("the attribution graph of the next-token prediction over the loaded transcoders, pruned by "
                          "influence (circuit-tracer's method); opens Neuronpedia graph files too");
  d.export_size = QSize(1500, 950);
  d.options = {
      {kNodeThresholdOption, QStringLiteral("X"),
       QStringLiteral("the graph view's node threshold: the share of influence its nodes keep (default 0.8)"),
       ViewOption::Type::Number},
      {kEdgeThresholdOption, QStringLiteral("X"),
       QStringLiteral("the graph view's edge threshold: the share of edge influence kept (default 0.98)"),
       ViewOption::Type::Number},
      {kModeOption, QStringLiteral("MODE"),
       QStringLiteral("the graph view's nodes: features (transcoders, default), neurons (MLP neurons) or routes "
                      "(information-flow routes)"),
       ViewOption::Type::Text, {kFeatures, kNeurons, kRoutes}},
      {kRouteThresholdOption, QStringLiteral("X"),
       QStringLiteral("the graph view's route threshold: contributions at or under it are dropped (default 0.04)"),
       ViewOption::Type::Number},
  };
  d.analysis.id = d.id;
  d.analysis.reads = 0;  // the whole prompt and its next-token prediction
  // Many backward passes: its own job while the view is on screen, never delaying a keystroke's run.
  d.analysis.with_every_run = false;
  d.analysis.compute = [](const RunResult& run, const AnalysisKey& key) {
    return std::shared_ptr<ViewResult>(compute(run, key));
  };
  d.analysis.compute_long = [](const RunResult& run, const AnalysisKey& key, const AnalysisJob& job) {
    return std::shared_ptr<ViewResult>(compute(run, key, &job));
  };
  d.create = [](Selection* selection, QWidget* parent) { return new GraphView(selection, parent); };
  return d;
}

std::shared_ptr<GraphResult> GraphView::compute(const RunResult& run, const AnalysisKey& key, const AnalysisJob* job) {
  auto r = std::make_shared<GraphResult>();
  r->model = run.run.model;
  const hs::Model& model = *r->model;
  const QString what = key.params.value(0);
  if (what == kRoutes) {
    r->mode = kRoutes;
    hs::RouteOptions options;
    options.threshold = key.params.value(1).toDouble();
    const auto start = Clock::now();
    r->routes = std::make_shared<hs::InfoRoutes>(hs::info_routes(*run.plainCache(), options));
    r->build_ms = msSince(start);
    r->routes_picture = routesPicture(*r->routes, run.labels);
    return r;
  }
  if (what == kNeurons) {
    r->mode = kNeurons;
  } else if (what == QStringLiteral("transcoders")) {
    r->mode = kFeatures;
    for (int i = 1; i < key.params.size(); ++i) {
      std::shared_ptr<const hs::Sae> s = LoadedSaes::instance().find(key.params[i]);
      if (!s) throw hs::Error("a transcoder the graph was asked for has been unloaded; load it again.");
      r->transcoders.push_back(std::move(s));
    }
  } else {
    r->mode = kFeatures;
    r->problem = key.params.value(1, QStringLiteral("No transcoders are loaded."));
    return r;
  }
  const auto start = Clock::now();
  // Gradients explain a plain run: the run on screen without its ablations (the status says so).
  hs::GraphOptions options;
  if (job) {
    options.progress = [job](double fraction) {
      job->progress(fraction, QStringLiteral("Building the graph: backward passes %1% done").arg(static_cast<int>(100 * fraction)));
    };
    options.cancelled = job->cancelled;
  }
  auto graph = std::make_shared<hs::AttributionGraph>(
      r->mode == kNeurons ? hs::neuron_attribution_graph(*run.plainCache(), options)
                          : hs::attribution_graph(*run.plainCache(), r->transcoders, options));
  if (job) job->progress(1.0, QStringLiteral("Pruning the graph"));
  r->build_ms = msSince(start);
  r->graph = graph;
  hs::GraphLabels& labels = r->labels;
  labels.slug = "headscope-graph";
  labels.scan = model.name();
  for (const auto& t : r->transcoders) labels.transcoder_list.push_back(t->name);
  labels.prompt = run.run.text;
  const hs::Tokenizer& tok = model.tokenizer();
  for (int32_t t : graph->tokens) labels.prompt_tokens.push_back(tok.decode(std::span<const int32_t>(&t, 1)));
  for (int32_t t : graph->logit_tokens) labels.logit_tokens.push_back(tok.decode(std::span<const int32_t>(&t, 1)));
  r->pruning = std::make_shared<GraphPruning>();
  r->pruning->pruner = std::make_unique<hs::GraphPruner>(*graph);
  r->first = prune(*r, kNodeThreshold, kEdgeThreshold);
  return r;
}

PrunedPicture GraphView::prune(const GraphResult& result, double node_threshold, double edge_threshold) {
  PrunedPicture out;
  out.node_threshold = node_threshold;
  out.edge_threshold = edge_threshold;
  const auto start = Clock::now();
  {
    std::lock_guard<std::mutex> lock(result.pruning->mutex);
    out.pruned = std::make_shared<hs::PrunedGraph>(result.pruning->pruner->prune(node_threshold, edge_threshold));
  }
  const hs::AttributionGraph& g = *result.graph;
  // The picture is what the file would hold: the same nodes, edges and numbers as a saved graph.
  const hs::GraphFile file = hs::read_graph_json(hs::graph_to_json(g, *out.pruned, result.labels), "the graph");
  // Top logits of the most influential kept features (decoder row through W_U).
  std::vector<std::pair<double, size_t>> features;
  for (size_t i = 0; i < file.nodes.size(); ++i)
    if (file.nodes[i].feature_type == "cross layer transcoder" || file.nodes[i].feature_type == "mlp neuron")
      features.push_back({file.nodes[i].influence.value_or(1.0), i});
  std::sort(features.begin(), features.end());
  if (features.size() > static_cast<size_t>(kLogitFeatures)) features.resize(kLogitFeatures);
  std::map<std::string, QString> logits;
  const hs::Model& model = *result.model;
  auto token = [&](int32_t id) {
    try {
      return quoted(QString::fromStdString(model.tokenizer().display(id)));
    } catch (const std::exception&) {
      return QStringLiteral("#%1").arg(id);
    }
  };
  for (const auto& [influence, i] : features) {
    const hs::GraphFile::Node& n = file.nodes[i];
    const int layer = std::stoi(n.layer), latent = latentOf(n.node_id);
    const bool neuron = n.feature_type == "mlp neuron";
    if (layer < 0 || layer >= model.config().n_layers || latent < 0) continue;
    if (!neuron && layer >= static_cast<int>(result.transcoders.size())) continue;
    const hs::RowVectorXf direction =
        neuron ? hs::neuron_output_direction(*model.weights(), layer, latent)
               : hs::latent_output_direction(*model.weights(), *result.transcoders[static_cast<size_t>(layer)], latent);
    const hs::LogitEffects e = hs::logit_effects(*model.weights(), direction, 5);
    QStringList top, bottom;
    for (const hs::TokenEffect& t : e.top) top.push_back(token(t.token));
    for (const hs::TokenEffect& t : e.bottom) bottom.push_back(token(t.token));
    logits[n.node_id] = QStringLiteral("<br>promotes %1<br>suppresses %2 <span style=\"color:#666\">(%3 · W<sub>U</sub>)</span>")
                            .arg(top.join(QStringLiteral(" ")), bottom.join(QStringLiteral(" ")),
                                 neuron ? QStringLiteral("W<sub>out</sub> row") : QStringLiteral("decoder row"));
  }
  out.picture = pictureOf(file, logits);
  out.prune_ms = msSince(start);
  return out;
}

GraphView::GraphView(Selection* selection, QWidget* parent) : AnalysisView(selection, parent) {
  setObjectName(QStringLiteral("graphView"));
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(8, 8, 8, 4);
  layout->setSpacing(6);
  title_ = new QLabel(this);
  title_->setObjectName(QStringLiteral("viewTitle"));
  title_->setWordWrap(true);
  title_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  layout->addWidget(title_);

  auto* controls = new QHBoxLayout;
  controls->setSpacing(10);
  auto spin = [this](const QString& name, double value, const QString& tip) {
    auto* box = new QDoubleSpinBox(this);
    box->setObjectName(name);
    box->setRange(0.0, 1.0);
    box->setDecimals(3);
    box->setSingleStep(0.01);
    box->setValue(value);
    box->setToolTip(tip);
    box->setKeyboardTracking(false);
    return box;
  };
  node_box_ = spin(QStringLiteral("graphNodeThreshold"), kNodeThreshold,
                   QStringLiteral("Keep the most influential nodes until they hold this share of the total influence on "
                                  "the logits (circuit-tracer's node_threshold). Tokens and logits are always kept."));
  edge_box_ = spin(QStringLiteral("graphEdgeThreshold"), kEdgeThreshold,
                   QStringLiteral("Of the kept nodes' edges, keep the strongest until they hold this share of the edge "
                                  "influence (circuit-tracer's edge_threshold)."));
  mode_box_ = new QComboBox(this);
  mode_box_->setObjectName(QStringLiteral("graphMode"));
  mode_box_->addItem(QStringLiteral("Transcoder features"), kFeatures);
  mode_box_->addItem(QStringLiteral("MLP neurons"), kNeurons);
  mode_box_->addItem(QStringLiteral("Information-flow routes"), kRoutes);
  mode_box_->setToolTip(QStringLiteral("Transcoder features: circuit-tracer's attribution graph over the loaded "
                                       "transcoders. MLP neurons: the same graph with the model's own neurons (exact, "
                                       "any model). Information-flow routes: the LM Transparency Tool's contributions "
                                       "of heads and MLPs to the residual stream, traced back from the last position."));
  controls->addWidget(new QLabel(QStringLiteral("Nodes:"), this));
  controls->addWidget(mode_box_);
  prune_controls_ = new QWidget(this);
  auto* prune_row = new QHBoxLayout(prune_controls_);
  prune_row->setContentsMargins(0, 0, 0, 0);
  prune_row->addWidget(new QLabel(QStringLiteral("Node threshold:"), prune_controls_));
  prune_row->addWidget(node_box_);
  prune_row->addWidget(new QLabel(QStringLiteral("Edge threshold:"), prune_controls_));
  prune_row->addWidget(edge_box_);
  controls->addWidget(prune_controls_);
  route_controls_ = new QWidget(this);
  auto* route_row = new QHBoxLayout(route_controls_);
  route_row->setContentsMargins(0, 0, 0, 0);
  route_box_ = new QDoubleSpinBox(route_controls_);
  route_box_->setObjectName(QStringLiteral("graphRouteThreshold"));
  route_box_->setRange(0.001, 0.999);
  route_box_->setDecimals(3);
  route_box_->setSingleStep(0.01);
  route_box_->setValue(kRouteThreshold);
  route_box_->setKeyboardTracking(false);
  route_box_->setToolTip(QStringLiteral("Contributions at or under this share of a residual stream are dropped, the rest "
                                        "renormalised (the LM Transparency Tool's threshold, 0.04 by default)."));
  route_row->addWidget(new QLabel(QStringLiteral("Threshold:"), route_controls_));
  route_row->addWidget(route_box_);
  controls->addWidget(route_controls_);
  route_controls_->hide();
  pinned_only_ = new QCheckBox(QStringLiteral("Pinned only"), this);
  pinned_only_->setObjectName(QStringLiteral("graphPinnedOnly"));
  pinned_only_->setToolTip(QStringLiteral("Draw the pinned nodes alone (right-click a node to pin it), each supernode "
                                          "as one box, with the edges between them."));
  controls->addWidget(pinned_only_);
  controls->addStretch(1);
  open_button_ = new QPushButton(QStringLiteral("Open Graph…"), this);
  open_button_->setObjectName(QStringLiteral("graphOpen"));
  open_button_->setToolTip(QStringLiteral("Open a graph JSON (Neuronpedia's format: written by headscope-cli graph or "
                                          "circuit-tracer)."));
  save_button_ = new QPushButton(QStringLiteral("Save Graph…"), this);
  save_button_->setObjectName(QStringLiteral("graphSave"));
  save_button_->setToolTip(QStringLiteral("Save the graph at these thresholds as Neuronpedia's graph JSON."));
  layout->addLayout(controls);

  auto* qk_row = new QHBoxLayout;
  qk_row->setSpacing(6);
  qk_head_ = new QLabel(this);
  qk_head_->setObjectName(QStringLiteral("graphQkHead"));
  qk_query_ = new QSpinBox(this);
  qk_query_->setObjectName(QStringLiteral("graphQkQuery"));
  qk_key_ = new QSpinBox(this);
  qk_key_->setObjectName(QStringLiteral("graphQkKey"));
  qk_button_ = new QPushButton(QStringLiteral("Trace"), this);
  qk_button_->setObjectName(QStringLiteral("graphQkTrace"));
  qk_button_->setToolTip(QStringLiteral("Split the head's attention score from the query position to the key position into "
                                        "query-part × key-part terms (QK tracing): which features or neurons, heads and "
                                        "embeddings on each side make it."));
  qk_row->addWidget(qk_head_);
  qk_row->addWidget(new QLabel(QStringLiteral("from"), this));
  qk_row->addWidget(qk_query_);
  qk_row->addWidget(new QLabel(QStringLiteral("to"), this));
  qk_row->addWidget(qk_key_);
  qk_row->addWidget(qk_button_);
  qk_row->addStretch(1);
  // On this row rather than the first, so that the view fits beside the heads panel.
  qk_row->addWidget(open_button_);
  qk_row->addWidget(save_button_);
  layout->addLayout(qk_row);
  connect(qk_button_, &QPushButton::clicked, this, [this] {
    traceAttention(selection_->layer(), selection_->head(), qk_query_->value(), qk_key_->value());
  });
  connect(selection_, &Selection::headChanged, this, [this] { updateQkRow(); });
  connect(selection_, &Selection::positionChanged, this, [this] { updateQkRow(); });

  message_ = new QLabel(this);
  message_->setObjectName(QStringLiteral("graphMessage"));
  message_->setWordWrap(true);
  message_->setTextFormat(Qt::RichText);
  layout->addWidget(message_);

  auto* split = new QSplitter(Qt::Horizontal, this);
  auto* scroll = new QScrollArea(split);
  scroll_ = scroll;
  scroll->setObjectName(QStringLiteral("graphScroll"));
  scroll->setWidgetResizable(true);  // the canvas fills the view, and scrolls when the graph needs more
  scroll->setBackgroundRole(QPalette::Base);
  canvas_ = new GraphCanvas(scroll);
  scroll->setWidget(canvas_);
  details_ = new QTextBrowser(split);
  details_->setObjectName(QStringLiteral("graphDetails"));
  details_->setOpenLinks(false);
  details_->setMinimumWidth(240);
  split->addWidget(scroll);
  split->addWidget(details_);
  split->setStretchFactor(0, 4);
  split->setStretchFactor(1, 1);
  layout->addWidget(split, 1);

  status_ = new QLabel(this);
  status_->setObjectName(QStringLiteral("graphStatus"));
  status_->setWordWrap(true);
  layout->addWidget(status_);

  prune_timer_ = new QTimer(this);
  prune_timer_->setSingleShot(true);
  prune_timer_->setInterval(80);
  connect(prune_timer_, &QTimer::timeout, this, &GraphView::startPrune);
  auto changed = [this] {
    prune_pending_ = true;
    updateStatus();
    prune_timer_->start();
  };
  connect(node_box_, qOverload<double>(&QDoubleSpinBox::valueChanged), this, changed);
  connect(edge_box_, qOverload<double>(&QDoubleSpinBox::valueChanged), this, changed);
  connect(pinned_only_, &QCheckBox::toggled, canvas_, &GraphCanvas::setPinnedOnly);
  connect(mode_box_, qOverload<int>(&QComboBox::currentIndexChanged), this, [this] {
    prune_controls_->setVisible(mode() != kRoutes);
    route_controls_->setVisible(mode() == kRoutes);
    Q_EMIT analysisKeyChanged();
    updateStatus();
  });
  connect(route_box_, qOverload<double>(&QDoubleSpinBox::valueChanged), this, [this] {
    Q_EMIT analysisKeyChanged();
    updateStatus();
  });
  connect(canvas_, &GraphCanvas::nodeSelected, this, &GraphView::updateDetails);
  connect(canvas_, &GraphCanvas::pinsChanged, this, &GraphView::updateDetails);
  connect(canvas_, &GraphCanvas::nodeActivated, this, &GraphView::openNode);
  connect(canvas_, &GraphCanvas::contextMenuForNode, this, &GraphView::showNodeMenu);
  connect(details_, &QTextBrowser::anchorClicked, this, [this](const QUrl& url) {
    const QString s = url.toString();
    if (s.startsWith(QStringLiteral("node:"))) canvas_->selectNode(s.mid(5).toInt());
    if (s.startsWith(QStringLiteral("open:"))) openNode(s.mid(5).toInt());
    if (s.startsWith(QStringLiteral("qk:"))) {
      const QStringList p = s.mid(3).split(QLatin1Char(':'));
      if (p.size() == 4) traceAttention(p[0].toInt(), p[1].toInt(), p[2].toInt(), p[3].toInt());
    }
  });
  connect(message_, &QLabel::linkActivated, this, [this](const QString& link) {
    if (link == QStringLiteral("load-shipped") && run_)
      LoadedSaes::instance().requestLoadShipped(QString::fromStdString(run_->run.model->dir().string()));
    if (link == QStringLiteral("close-file")) closeFile();
  });
  connect(open_button_, &QPushButton::clicked, this, [this] {
    const QString path = QFileDialog::getOpenFileName(this, QStringLiteral("Open Graph File"), QString(),
                                                      QStringLiteral("Graph JSON (*.json);;All files (*)"));
    if (!path.isEmpty()) openFile(path);
  });
  connect(save_button_, &QPushButton::clicked, this, [this] {
    const QString path = QFileDialog::getSaveFileName(this, QStringLiteral("Save Graph JSON"), QStringLiteral("graph.json"),
                                                      QStringLiteral("Graph JSON (*.json)"));
    if (path.isEmpty()) return;
    const QString error = saveJson(path);
    message_->setText(error.isEmpty() ? QStringLiteral("Saved %1.").arg(QDir::toNativeSeparators(path).toHtmlEscaped())
                                      : QStringLiteral("<span style=\"color: #b3261e;\">%1</span>").arg(error.toHtmlEscaped()));
  });
  // A transcoder loaded or unloaded changes what the graph is made of.
  connect(&LoadedSaes::instance(), &LoadedSaes::changed, this, [this] {
    Q_EMIT analysisKeyChanged();
    updateStatus();
  });
  refresher_ = new RefreshWhenShown(this, [this] { refresh(); });
  updateStatus();
}

GraphView::~GraphView() { waitForJobs(in_flight_); }

QString GraphView::mode() const { return mode_box_->currentData().toString(); }
void GraphView::setMode(const QString& mode) {
  const int i = mode_box_->findData(mode);
  if (i >= 0) mode_box_->setCurrentIndex(i);
}
double GraphView::routeThreshold() const { return route_box_->value(); }
void GraphView::setRouteThreshold(double threshold) { route_box_->setValue(threshold); }

bool GraphView::modelHasSaes(const hs::Model& model) const {
  // Listed once per model folder: the key and the status ask on the GUI thread at every change.
  if (shipped_for_ != model.dir().string()) {
    shipped_for_ = model.dir().string();
    has_shipped_ = !shippedSaeFolders(QString::fromStdString(shipped_for_)).isEmpty();
  }
  return has_shipped_;
}

AnalysisKey GraphView::analysisKey(AnalysisKey selected) const {
  if (mode() == kRoutes) {
    selected.params = {kRoutes, QString::number(routeThreshold(), 'g', 17)};
    return selected;
  }
  if (mode() == kNeurons) {
    selected.params = {kNeurons};
    return selected;
  }
  if (!run_) return selected;
  const TranscoderChoice choice = chooseTranscoders(run_->model(), modelHasSaes(run_->model()));
  if (!choice.problem.isEmpty()) {
    selected.params = {QStringLiteral("none"), choice.problem};
    return selected;
  }
  selected.params = QStringList{QStringLiteral("transcoders")} + choice.ids;
  return selected;
}

void GraphView::setRun(std::shared_ptr<const RunResult> run) {
  run_ = std::move(run);
  updateQkRow();
  updateStatus();
}

void GraphView::updateQkRow() {
  const int layer = selection_->layer(), head = selection_->head(), q = selection_->position();
  qk_head_->setText(QStringLiteral("Why does %1 attend").arg(headLabel(layer, head)));
  qk_head_->setToolTip(QStringLiteral("The selected head (click one in the heads panel), from the selected position."));
  const int n = run_ ? run_->n_pos() : 0;
  qk_query_->setRange(0, std::max(0, n - 1));
  qk_key_->setRange(0, std::max(0, n - 1));
  qk_query_->setValue(q);
  // The key the head attends to most from the query (the pattern row's largest weight).
  if (run_ && q >= 0 && q < n && layer >= 0 && layer < run_->n_layer() && head >= 0 && head < run_->n_head()) {
    Eigen::Index key = 0;
    run_->run.cache->pattern_row(layer, head, q).head(q + 1).maxCoeff(&key);
    qk_key_->setValue(static_cast<int>(key));
  }
  qk_button_->setEnabled(run_ != nullptr);
}

void GraphView::setResult(std::shared_ptr<const ViewResult> result) {
  auto r = std::dynamic_pointer_cast<const GraphResult>(std::move(result));
  if (!r || (run_ && r->run_job != run_->job)) return;  // an earlier run's graph is never drawn over this one's
  result_ = std::move(r);
  run_ = result_->run;
  failure_.clear();
  progress_.clear();
  ++prune_job_;
  shown_ = result_->first;
  qk_.reset();
  qk_error_.clear();
  ++qk_job_;
  const double nt = nodeThreshold(), et = edgeThreshold();
  prune_pending_ = result_->graph && (nt != shown_.node_threshold || et != shown_.edge_threshold);
  if (prune_pending_) startPrune();
  refresher_->request();
}

void GraphView::showProgress(double, const QString& what) {
  progress_ = what;
  updateStatus();
}

void GraphView::showFailure(const QString& message) {
  failure_ = message;
  updateStatus();
}

double GraphView::nodeThreshold() const { return node_box_->value(); }
double GraphView::edgeThreshold() const { return edge_box_->value(); }

void GraphView::setThresholds(double node_threshold, double edge_threshold) {
  node_box_->setValue(node_threshold);
  edge_box_->setValue(edge_threshold);
}

void GraphView::startPrune() {
  if (!result_ || !result_->graph) {
    prune_pending_ = false;
    updateStatus();
    return;
  }
  const double nt = nodeThreshold(), et = edgeThreshold();
  if (nt == shown_.node_threshold && et == shown_.edge_threshold) {
    prune_pending_ = false;
    updateStatus();
    return;
  }
  prune_pending_ = true;
  const quint64 job = ++prune_job_;
  std::shared_ptr<const GraphResult> result = result_;
  QFuture<std::pair<PrunedPicture, QString>> f = QtConcurrent::run([result, nt, et] {
    try {
      return std::pair<PrunedPicture, QString>{prune(*result, nt, et), QString()};
    } catch (const std::exception& e) {
      return std::pair<PrunedPicture, QString>{PrunedPicture{}, QString::fromUtf8(e.what())};
    }
  });
  std::erase_if(in_flight_, [](const QFuture<void>& q) { return q.isFinished(); });
  in_flight_.push_back(QFuture<void>(f));
  deliverLater(f, this, [this, job, result](std::pair<PrunedPicture, QString> got) {
    if (job != prune_job_ || result != result_) return;  // the thresholds or the graph moved on
    if (!got.second.isEmpty()) {
      failure_ = got.second;
    } else {
      shown_ = std::move(got.first);
    }
    // Thresholds moved while this pruning ran: prune again for the values set now.
    if (nodeThreshold() != shown_.node_threshold || edgeThreshold() != shown_.edge_threshold) {
      startPrune();
    } else {
      prune_pending_ = false;
    }
    refresher_->request();
  });
}

bool GraphView::isCurrent() const {
  if (showingFile()) return file_picture_ && canvas_->picture() == file_picture_.get();
  if (!result_ || !run_ || result_->run_job != run_->job || prune_pending_) return false;
  if (result_->key != analysisKey(keyFromSelection(*selection_, descriptor().analysis.reads))) return false;
  if (result_->routes_picture) return canvas_->picture() == result_->routes_picture.get();
  return !result_->graph || canvas_->picture() == shown_.picture.get();
}

void GraphView::refresh() {
  if (showingFile()) {
    canvas_->setPicture(file_picture_);
  } else if (result_ && result_->routes_picture) {
    if (canvas_->picture() != result_->routes_picture.get()) canvas_->setPicture(result_->routes_picture);
  } else if (result_ && result_->graph) {
    if (canvas_->picture() != shown_.picture.get()) canvas_->setPicture(shown_.picture);
  } else {
    canvas_->setPicture(nullptr);
  }
  // A graph wider than the view opens at its right end, where the prediction and its logits are;
  // new thresholds on the same graph keep the reader's place.
  const void* shown = showingFile() ? static_cast<const void*>(file_picture_.get()) : static_cast<const void*>(result_.get());
  if (canvas_->picture() && shown != scrolled_for_) {
    scrolled_for_ = shown;
    QTimer::singleShot(0, this, [this] { scroll_->horizontalScrollBar()->setValue(scroll_->horizontalScrollBar()->maximum()); });
  }
  canvas_->setFigureText(figureText());
  updateDetails();
  updateStatus();
}

void GraphView::openFile(const QString& path) {
  const quint64 job = ++file_job_;
  message_->setText(QStringLiteral("Reading %1…").arg(QFileInfo(path).fileName().toHtmlEscaped()));
  QFuture<std::pair<std::shared_ptr<const GraphPicture>, QString>> f = QtConcurrent::run([path] {
    using Out = std::pair<std::shared_ptr<const GraphPicture>, QString>;
    try {
      QFile file(path);
      if (!file.open(QIODevice::ReadOnly))
        return Out{nullptr, QStringLiteral("%1 could not be opened: %2.").arg(QDir::toNativeSeparators(path), file.errorString())};
      const QByteArray bytes = file.readAll();
      const hs::GraphFile g = hs::read_graph_json(std::string_view(bytes.constData(), static_cast<size_t>(bytes.size())),
                                                  QFileInfo(path).fileName().toStdString());
      auto picture = pictureOf(g, {});
      const QString summary = QStringLiteral("%1 · model %2 · %3 tokens · %4 nodes, %5 links%6")
                                  .arg(html(g.prompt.empty() ? std::string("(no prompt text)") : g.prompt),
                                       html(g.scan.empty() ? std::string("unnamed") : g.scan))
                                  .arg(g.prompt_tokens.size())
                                  .arg(g.nodes.size())
                                  .arg(g.links.size())
                                  .arg(g.node_threshold ? QStringLiteral(" · node threshold %1").arg(*g.node_threshold) : QString());
      return Out{std::move(picture), summary};
    } catch (const std::exception& e) {
      return Out{nullptr, QString::fromUtf8(e.what())};
    }
  });
  std::erase_if(in_flight_, [](const QFuture<void>& q) { return q.isFinished(); });
  in_flight_.push_back(QFuture<void>(f));
  deliverLater(f, this, [this, job, path](std::pair<std::shared_ptr<const GraphPicture>, QString> got) {
    if (job != file_job_) return;
    if (!got.first) {
      message_->setText(QStringLiteral("<span style=\"color: #b3261e;\"><b>The graph file could not be opened.</b> %1</span> "
                                       "A graph JSON as headscope-cli graph or circuit-tracer writes it opens here.")
                            .arg(got.second.toHtmlEscaped()));
      return;
    }
    file_path_ = path;
    file_picture_ = got.first;
    file_summary_ = got.second;
    refresh();
  });
}

void GraphView::closeFile() {
  ++file_job_;
  file_path_.clear();
  file_picture_.reset();
  file_summary_.clear();
  refresh();
}

QString GraphView::saveJson(const QString& path) const {
  if (showingFile()) return QStringLiteral("An opened graph file is not saved again; it is on disk already.");
  if (!result_ || !result_->graph || !shown_.pruned) return QStringLiteral("There is no graph to save yet.");
  hs::GraphLabels labels = result_->labels;
  labels.slug = QFileInfo(path).completeBaseName().toStdString();
  labels.create_time_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                              std::chrono::system_clock::now().time_since_epoch()).count();
  const std::string text = hs::graph_to_json(*result_->graph, *shown_.pruned, labels);
  return writeFileAtomically(path, QByteArray::fromStdString(text));
}

void GraphView::updateStatus() {
  const bool have_run = run_ != nullptr;
  QString message;
  if (showingFile()) {
    message = QStringLiteral("<b>Graph file %1</b>: %2. This is the file's graph, not the typed prompt's: "
                             "<a href=\"close-file\">show the prompt's graph</a>.")
                  .arg(QFileInfo(file_path_).fileName().toHtmlEscaped(), file_summary_);
  } else if (!failure_.isEmpty()) {
    message = QStringLiteral("<span style=\"color: #b3261e;\">%1</span>").arg(failure_.toHtmlEscaped());
  } else if (have_run) {
    const AnalysisKey key = analysisKey(keyFromSelection(*selection_, descriptor().analysis.reads));
    if (key.params.size() >= 2 && key.params[0] == QStringLiteral("none")) message = key.params[1];
    if (mode() == kNeurons)
      message = QStringLiteral("Nodes are MLP neurons: exact (no error nodes), but neurons are polysemantic, each a mix of "
                               "many features, so a neuron node is a unit of the model rather than one idea. At most "
                               "%1 neurons, the most influential, are computed as nodes; the others are constants.")
                    .arg(hs::kNeuronGraphMaxNodes);
    if (mode() == kRoutes)
      message = QStringLiteral("Information-flow routes (the LM Transparency Tool's): each head's and MLP's share of the "
                               "residual stream it writes, shares at or under the threshold dropped, traced back from "
                               "the last position's final residual. Click a stream node, then <i>why?</i> beside an "
                               "attention edge: what makes that head attend there (QK tracing).");
  }
  message_->setText(message);
  message_->setVisible(!message.isEmpty());
  node_box_->setEnabled(!showingFile());
  edge_box_->setEnabled(!showingFile());
  mode_box_->setEnabled(!showingFile());
  save_button_->setEnabled(!showingFile() && result_ && result_->graph && result_->mode == mode());
  status_->setText(statusText());
  title_->setText(figureText().title + (figureText().subtitle.isEmpty() ? QString() : QStringLiteral(" — ") + figureText().subtitle));
}

QString GraphView::statusText() const {
  if (showingFile()) {
    return QStringLiteral("Drawn: %1 nodes, %2 of %3 edges.")
        .arg(canvas_->drawnNodeCount()).arg(canvas_->drawnEdgeCount()).arg(canvas_->keptEdgeCount());
  }
  if (result_ && result_->routes) {
    const hs::InfoRoutes& r = *result_->routes;
    QString s = QStringLiteral("%1 contributions over threshold %2, %3 of them on the routes from %4 (computed in %5 ms).")
                    .arg(r.edges.size())
                    .arg(r.threshold)
                    .arg(r.route_edges.size())
                    .arg(QString::fromStdString(r.node_name(r.start_node())))
                    .arg(result_->build_ms, 0, 'f', 0);
    if (run_ && result_->run_job != run_->job) s += QStringLiteral(" These are the previous prompt's; the new ones are being computed.");
    if (!result_->run->ablations().empty()) s += QStringLiteral(" Ablations are left out: the routes are the plain run's.");
    return s;
  }
  if (!result_ || !result_->graph) return progress_.isEmpty() ? QString() : progress_;
  const hs::AttributionGraph& g = *result_->graph;
  const QString units = g.unit == hs::AttributionGraph::Unit::Neuron ? QStringLiteral("neurons") : QStringLiteral("features");
  QString s = QStringLiteral("%1 active %9, %2 nodes in all (built in %3 ms). Kept at node threshold %4, edge "
                             "threshold %5: %6 nodes, %7 edges (pruned in %8 ms).")
                  .arg(g.active.size())
                  .arg(g.n_nodes())
                  .arg(result_->build_ms, 0, 'f', 0)
                  .arg(shown_.node_threshold)
                  .arg(shown_.edge_threshold)
                  .arg(shown_.picture ? shown_.picture->nodes.size() : 0)
                  .arg(shown_.picture ? shown_.picture->edges.size() : 0)
                  .arg(shown_.prune_ms, 0, 'f', 0)
                  .arg(units);
  if (g.n_features() < static_cast<int>(g.active.size()))
    s += QStringLiteral(" Rows were computed for the %1 most influential %2 only (circuit-tracer's max_feature_nodes); "
                        "the others are not nodes.")
             .arg(g.n_features())
             .arg(units);
  if (canvas_->keptEdgeCount() > canvas_->drawnEdgeCount())
    s += QStringLiteral(" The %1 strongest edges are drawn.").arg(canvas_->drawnEdgeCount());
  if (prune_pending_) s += QStringLiteral(" Pruning at the new thresholds…");
  if (run_ && result_->run_job != run_->job)
    s += QStringLiteral(" This graph is of the previous prompt; the new one is being built%1")
             .arg(progress_.isEmpty() ? QStringLiteral(".") : QStringLiteral(": ") + progress_ + QStringLiteral("."));
  if (!result_->run->ablations().empty()) s += QStringLiteral(" Ablations are left out: the graph explains the plain run.");
  return s;
}

QString GraphView::messageText() const { return message_->text(); }

void GraphView::updateDetails() {
  const GraphPicture* g = canvas_->picture();
  const int sel = canvas_->selectedNode();
  QString text;
  if (!g) {
    details_->setHtml(qkHtml());
    return;
  }
  if (sel < 0) {
    text = QStringLiteral("<p>Click a node: its edges, and its strongest paths to the logits. Double-click a feature to "
                          "open it in the Features view (its dashboard). Right-click to pin nodes and group pinned "
                          "nodes into supernodes.</p><p><span style=\"color:#b2182b\">Red</span> edges raise the "
                          "target's input, <span style=\"color:#2166ac\">blue</span> ones lower it; width follows "
                          "|weight|. Circles are transcoder features (darker: more influential), grey squares error "
                          "nodes, yellow boxes token embeddings, green diamonds the logits.</p>");
  } else {
    const GraphPicture::Node& n = g->nodes[static_cast<size_t>(sel)];
    text = QStringLiteral("<p>%1</p>").arg(n.tooltip);
    if (n.kind == GraphPicture::Kind::Feature && !showingFile())
      text += QStringLiteral("<p><a href=\"open:%1\">Open in the %2 view</a></p>")
                  .arg(sel)
                  .arg(result_ && result_->mode == kNeurons ? QStringLiteral("Neurons") : QStringLiteral("Features"));
    std::vector<const GraphPicture::Edge*> in, out;
    for (const GraphPicture::Edge& e : g->edges) {
      if (e.target == sel) in.push_back(&e);
      if (e.source == sel) out.push_back(&e);
    }
    auto strongest = [](std::vector<const GraphPicture::Edge*>& v) {
      std::sort(v.begin(), v.end(), [](auto* a, auto* b) { return std::abs(a->weight) > std::abs(b->weight); });
      if (v.size() > 8) v.resize(8);
    };
    strongest(in);
    strongest(out);
    auto row = [&](const GraphPicture::Edge& e, bool incoming) {
      const int other = incoming ? e.source : e.target;
      const GraphPicture::Node& o = g->nodes[static_cast<size_t>(other)];
      QString name = o.kind == GraphPicture::Kind::Token ? QStringLiteral("token %1 @%2").arg(quoted(o.label)).arg(o.pos)
                     : o.kind == GraphPicture::Kind::Logit ? QStringLiteral("logit %1").arg(quoted(o.label))
                                                           : QStringLiteral("%1 @%2").arg(o.label.toHtmlEscaped()).arg(o.pos);
      QString via;
      if (!e.label.isEmpty()) via = QStringLiteral(" via %1").arg(e.label.toHtmlEscaped());
      // An attention edge: why the head attends there (query: the target's position, key: the source's).
      if (e.head >= 0 && !showingFile())
        via += QStringLiteral(" <a href=\"qk:%1:%2:%3:%4\">why?</a>")
                   .arg(e.layer).arg(e.head).arg(g->nodes[static_cast<size_t>(e.target)].pos)
                   .arg(g->nodes[static_cast<size_t>(e.source)].pos);
      return QStringLiteral("<tr><td><a href=\"node:%1\">%2</a>%5</td><td align=right style=\"color:%3\">%4</td></tr>")
          .arg(other)
          .arg(name, e.weight >= 0 ? QStringLiteral("#b2182b") : QStringLiteral("#2166ac"))
          .arg(e.weight, 0, 'g', 3)
          .arg(via);
    };
    if (!in.empty()) {
      text += QStringLiteral("<p><b>Strongest inputs</b></p><table>");
      for (auto* e : in) text += row(*e, true);
      text += QStringLiteral("</table>");
    }
    if (!out.empty()) {
      text += QStringLiteral("<p><b>Strongest outputs</b></p><table>");
      for (auto* e : out) text += row(*e, false);
      text += QStringLiteral("</table>");
    }
    const auto& paths = canvas_->selectedPaths();
    if (!paths.empty()) text += QStringLiteral("<p><b>Strongest paths to %1</b> (drawn thick): %2</p>")
                  .arg(result_ && result_->routes && !showingFile() ? QStringLiteral("the routes' start") : QStringLiteral("the logits"))
                  .arg(paths.size());
  }
  text += qkHtml();
  if (!canvas_->pinned().empty()) {
    text += QStringLiteral("<p><b>Pinned</b> (%1)").arg(canvas_->pinned().size());
    for (const auto& [name, members] : canvas_->supernodes())
      text += QStringLiteral("<br>supernode <b>%1</b>: %2 nodes").arg(name.toHtmlEscaped()).arg(members.size());
    text += QStringLiteral("</p>");
  }
  details_->setHtml(text);
}

void GraphView::showNodeMenu(int index, const QPoint& global_pos) {
  const GraphPicture* g = canvas_->picture();
  QMenu menu(this);
  if (g && index >= 0) {
    const GraphPicture::Node& n = g->nodes[static_cast<size_t>(index)];
    const bool pinned = canvas_->isPinned(n.id);
    const QString id = n.id;
    menu.addAction(pinned ? QStringLiteral("Unpin") : QStringLiteral("Pin"), this,
                   [this, id, pinned] { canvas_->setPinned(id, !pinned); });
    if (n.kind == GraphPicture::Kind::Feature && !showingFile())
      menu.addAction(QStringLiteral("Open in the Features View"), this, [this, index] { openNode(index); });
    const QString group = canvas_->groupOf(id);
    if (!group.isEmpty())
      menu.addAction(QStringLiteral("Ungroup “%1”").arg(group), this, [this, group] { canvas_->ungroup(group); });
  }
  if (canvas_->pinned().size() >= 2) {
    menu.addAction(QStringLiteral("Group Pinned Nodes as Supernode…"), this, [this] {
      bool ok = false;
      const QString name = QInputDialog::getText(this, QStringLiteral("Supernode"), QStringLiteral("Name of the group:"),
                                                 QLineEdit::Normal, QString(), &ok);
      if (!ok || name.trimmed().isEmpty()) return;
      QStringList ids;
      for (const QString& id : canvas_->pinned())
        if (canvas_->groupOf(id).isEmpty()) ids.push_back(id);
      canvas_->groupNodes(name, ids);
    });
  }
  if (!canvas_->pinned().empty()) menu.addAction(QStringLiteral("Clear Pins"), canvas_, &GraphCanvas::clearPins);
  if (!menu.isEmpty()) menu.addSeparator();
  addFigureExportActions(menu, this, *canvas_);
  menu.exec(global_pos);
}

void GraphView::openNode(int index) {
  const GraphPicture* g = canvas_->picture();
  if (!g || showingFile() || !result_ || index < 0 || index >= static_cast<int>(g->nodes.size())) return;
  const GraphPicture::Node& n = g->nodes[static_cast<size_t>(index)];
  if (n.kind != GraphPicture::Kind::Feature || n.layer < 0) return;
  if (result_->mode == kNeurons) {
    UnitRef unit;
    unit.neuron = true;
    unit.layer = n.layer;
    unit.unit = latentOf(n.id.toStdString());
    unit.pos = n.pos;
    if (unit.unit >= 0) Q_EMIT unitRequested(unit);
    return;
  }
  if (n.layer >= result_->key.params.size() - 1) return;
  UnitRef unit;
  unit.sae_id = result_->key.params[n.layer + 1];
  unit.layer = n.layer;
  unit.unit = latentOf(n.id.toStdString());
  unit.pos = n.pos;
  if (unit.unit >= 0) Q_EMIT unitRequested(unit);
}

void GraphView::traceAttention(int layer, int head, int query_pos, int key_pos) {
  if (!result_ || !result_->run) return;
  const quint64 job = ++qk_job_;
  qk_.reset();
  qk_error_.clear();
  std::shared_ptr<const RunResult> run = result_->run;
  // Features when every layer has a transcoder loaded (the Features mode's choice), else neurons.
  std::vector<std::shared_ptr<const hs::Sae>> transcoders;
  const TranscoderChoice choice = chooseTranscoders(run->model(), modelHasSaes(run->model()));
  if (choice.problem.isEmpty())
    for (const QString& id : choice.ids)
      if (auto s = LoadedSaes::instance().find(id)) transcoders.push_back(std::move(s));
  if (transcoders.size() != static_cast<size_t>(run->n_layer())) transcoders.clear();
  qk_tokens_ = run->labels;
  details_->append(QStringLiteral("<p><i>Tracing why %1 attends from position %2 to %3…</i></p>")
                       .arg(headLabel(layer, head)).arg(query_pos).arg(key_pos));
  QFuture<std::pair<std::shared_ptr<const hs::QkTrace>, QString>> f = QtConcurrent::run([run, transcoders, layer, head, query_pos, key_pos] {
    using Out = std::pair<std::shared_ptr<const hs::QkTrace>, QString>;
    try {
      hs::QkOptions options;
      options.top = kQkPairs;
      return Out{std::make_shared<hs::QkTrace>(hs::qk_trace(*run->plainCache(), layer, head, query_pos, key_pos, transcoders, options)),
                 QString()};
    } catch (const std::exception& e) {
      return Out{nullptr, QString::fromUtf8(e.what())};
    }
  });
  std::erase_if(in_flight_, [](const QFuture<void>& q) { return q.isFinished(); });
  in_flight_.push_back(QFuture<void>(f));
  deliverLater(f, this, [this, job](std::pair<std::shared_ptr<const hs::QkTrace>, QString> got) {
    if (job != qk_job_) return;
    qk_ = got.first;
    qk_error_ = got.second;
    updateDetails();
  });
}

QString GraphView::qkHtml() const {
  if (!qk_error_.isEmpty())
    return QStringLiteral("<p style=\"color:#b3261e\">QK trace: %1</p>").arg(qk_error_.toHtmlEscaped());
  if (!qk_) return {};
  const hs::QkTrace& t = *qk_;
  std::vector<std::string> tokens;
  for (const QString& l : qk_tokens_) tokens.push_back(l.toStdString());
  auto label = [&](const hs::QkComponent& c, bool query) {
    return QString::fromStdString(hs::qk_component_label(t, c, query, tokens)).toHtmlEscaped();
  };
  QString h = QStringLiteral("<hr><p><b>Why %1 attends from %2 @%3 to %4 @%5</b><br>score %6%7 = the sum of query-part × "
                             "key-part terms; the parts are the embeddings, earlier heads, %8 and biases, read through "
                             "the frozen norms%9</p>")
                  .arg(headLabel(t.layer, t.head))
                  .arg(quoted(t.query_pos < qk_tokens_.size() ? qk_tokens_[t.query_pos] : QString()))
                  .arg(t.query_pos)
                  .arg(quoted(t.key_pos < qk_tokens_.size() ? qk_tokens_[t.key_pos] : QString()))
                  .arg(t.key_pos)
                  .arg(t.score_before_softcap, 0, 'g', 4)
                  .arg(t.softcap > 0 ? QStringLiteral(" (before the soft-cap)") : QString())
                  .arg(t.transcoders ? QStringLiteral("transcoder features with their error nodes") : QStringLiteral("MLP neurons"))
                  .arg(QString());
  h += QStringLiteral("<table><tr><th align=left>query part</th><th align=left>key part</th><th align=right>term</th></tr>");
  for (const hs::QkPair& p : t.pairs) {
    h += QStringLiteral("<tr><td>%1</td><td>%2</td><td align=right style=\"color:%3\">%4</td></tr>")
             .arg(label(t.query[static_cast<size_t>(p.query)], true), label(t.key[static_cast<size_t>(p.key)], false),
                  p.term >= 0 ? QStringLiteral("#b2182b") : QStringLiteral("#2166ac"))
             .arg(p.term, 0, 'g', 3);
  }
  h += QStringLiteral("<tr><td colspan=2><i>the other %1 terms</i></td><td align=right>%2</td></tr></table>")
           .arg(static_cast<qint64>(t.query.size()) * static_cast<qint64>(t.key.size()) - static_cast<qint64>(t.pairs.size()))
           .arg(t.remainder, 0, 'g', 3);
  // Each side's largest parts by their marginal (the row or column sum of the terms).
  auto side = [&](const std::vector<hs::QkComponent>& parts, bool query) {
    std::vector<const hs::QkComponent*> v;
    for (const auto& c : parts) v.push_back(&c);
    std::sort(v.begin(), v.end(), [](auto* a, auto* b) { return std::abs(a->marginal) > std::abs(b->marginal); });
    QStringList out;
    for (size_t i = 0; i < v.size() && i < 5; ++i) out << QStringLiteral("%1 (%2)").arg(label(*v[i], query)).arg(v[i]->marginal, 0, 'g', 3);
    return out.join(QStringLiteral(", "));
  };
  h += QStringLiteral("<p>Query side, largest: %1<br>Key side, largest: %2</p>").arg(side(t.query, true), side(t.key, false));
  return h;
}

std::vector<ExportFigure> GraphView::exportFigures(const RunResult& run) {
  if (!exportSkipReason(run).isEmpty()) return {};
  const AnalysisKey key = analysisKey(keyFromSelection(*selection_, descriptor().analysis.reads));
  return {ExportFigure{key, [this]() -> ExportFigure::Target {
                        if (refresher_->pending()) refresh();
                        return {canvas_, canvas_->figureSize()};
                      }}};
}

QString GraphView::exportSkipReason(const RunResult& run) const {
  if (mode() != kFeatures) return {};
  const TranscoderChoice choice = chooseTranscoders(run.model(), modelHasSaes(run.model()));
  if (!choice.problem.isEmpty())
    return QStringLiteral("Graph: no transcoder is loaded for every layer (File > Open Sparse Autoencoder, or --sae DIR; "
                          "--graph-mode neurons needs none)");
  return {};
}

ViewInputs GraphView::viewInputs() const {
  ViewInputs inputs;
  if (nodeThreshold() != kNodeThreshold) inputs[kNodeThresholdOption] = nodeThreshold();
  if (edgeThreshold() != kEdgeThreshold) inputs[kEdgeThresholdOption] = edgeThreshold();
  if (mode() != kFeatures) inputs[kModeOption] = mode();
  if (routeThreshold() != kRouteThreshold) inputs[kRouteThresholdOption] = routeThreshold();
  return inputs;
}

void GraphView::setViewInputs(const ViewInputs& inputs) {
  setThresholds(inputs.value(kNodeThresholdOption, kNodeThreshold).toDouble(),
                inputs.value(kEdgeThresholdOption, kEdgeThreshold).toDouble());
  setMode(inputs.value(kModeOption, kFeatures).toString());
  setRouteThreshold(inputs.value(kRouteThresholdOption, kRouteThreshold).toDouble());
}

FigureText GraphView::figureText() const {
  if (showingFile()) return {QStringLiteral("Attribution graph (file %1)").arg(QFileInfo(file_path_).fileName()), {}};
  if (result_ && result_->routes)
    return {QStringLiteral("Information-flow routes from %1 (threshold %2)")
                .arg(QString::fromStdString(result_->routes->node_name(result_->routes->start_node())))
                .arg(result_->routes->threshold),
            runSubtitle(*result_->run)};
  if (!result_ || !result_->graph) return {QStringLiteral("Attribution graph"), {}};
  const hs::AttributionGraph& g = *result_->graph;
  if (g.unit == hs::AttributionGraph::Unit::Neuron)
    return {QStringLiteral("Attribution graph over MLP neurons of the next token → “%1” (p = %2)")
                .arg(g.logit_tokens.empty() ? QString() : tokenText(*result_->run, g.logit_tokens[0]))
                .arg(g.logit_probs.empty() ? 0.0 : g.logit_probs[0], 0, 'f', 3),
            runSubtitle(*result_->run) + QStringLiteral(" · node threshold %1, edge threshold %2")
                                             .arg(shown_.node_threshold)
                                             .arg(shown_.edge_threshold)};
  QString top;
  if (!g.logit_tokens.empty())
    top = QStringLiteral(" → “%1” (p = %2)")
              .arg(tokenText(*result_->run, g.logit_tokens[0]))
              .arg(g.logit_probs[0], 0, 'f', 3);
  return {QStringLiteral("Attribution graph of the next token%1").arg(top),
          runSubtitle(*result_->run) + QStringLiteral(" · transcoders %1 · node threshold %2, edge threshold %3")
                                           .arg(QString::fromStdString(result_->labels.transcoder_list.empty()
                                                                           ? std::string()
                                                                           : result_->labels.transcoder_list.front()) +
                                                    (result_->labels.transcoder_list.size() > 1 ? QStringLiteral("…") : QString()))
                                           .arg(shown_.node_threshold)
                                           .arg(shown_.edge_threshold)};
}

QString GraphView::figureFileStem() const { return QStringLiteral("graph"); }

QSize GraphView::figureSize() const { return size(); }

void GraphView::paintFigure(QPainter& painter, QSize size) { AnalysisView::paintFigure(painter, size); }

}  // namespace hs::ui
