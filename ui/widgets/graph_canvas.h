// An attribution graph drawn as circuit-tracer's and Neuronpedia's graph pages draw it: one row per
// layer (token embeddings at the bottom, the logits on top), one column per position labelled with
// its token, the nodes of a (layer, position) side by side, most influential first. Edges are lines
// whose width follows |weight| and whose colour is its sign (the diverging map's red for positive,
// blue for negative).
//
// Clicking a node selects it: its own edges stay drawn, the rest fade, and its strongest paths to
// the logits are drawn thick (a path's strength is the product of its edges' |weight| divided by
// the sum of |weight| into each edge's target, as pruning normalises rows). Nodes can be pinned and
// pinned nodes grouped into named supernodes; "pinned only" draws the pinned nodes alone, each
// group as one box, with the edges between them (a group's edges are the sums of its members':
// edges are direct linear effects, so the effect of a group is the sum).
#pragma once

#include <QString>
#include <QStringList>
#include <QWidget>

#include <map>
#include <memory>
#include <set>
#include <vector>

#include "ui/base/figure.h"

namespace hs::ui {

// What the canvas draws: the kept nodes and edges of one graph, with their labels.
struct GraphPicture {
  // Stream and Mlp: the information-flow routes' residual states and MLP blocks.
  enum class Kind { Feature, Error, Token, Logit, Stream, Mlp };
  struct Node {
    QString id;         // Neuronpedia's node_id: pins and groups are kept by it
    Kind kind = Kind::Feature;
    int layer = 0;      // -1: token embeddings; n_layers: the logits
    int pos = 0;
    QString label;      // short: "L1 F117", "error", the token, the logit's token
    QString tooltip;    // HTML: what hovering shows
    double activation = 0.0;
    double influence = 1.0;  // cumulative influence share (smaller: more influential); 1 when unknown
    bool goal = false;       // where paths end besides logits (the routes' start node)
  };
  // Signed: coloured by sign. The routes' shares are positive: coloured by what carries them.
  enum class EdgeKind { Signed, Attention, Residual, Mlp };
  struct Edge {
    int source = 0, target = 0;  // indices into nodes
    float weight = 0.0f;
    EdgeKind kind = EdgeKind::Signed;
    QString label;  // an attention edge's head ("L1H3"); empty otherwise
    int layer = -1, head = -1;  // an attention edge's head
  };
  int n_layers = 0;
  // Row names: [layer] (empty: "L0", "L1", ...), and the top (logits) and bottom (tokens) rows'.
  QStringList layer_names;
  QString top_name = QStringLiteral("Logits"), bottom_name = QStringLiteral("Emb");
  QStringList positions;  // [pos] the tokens, as labels
  std::vector<Node> nodes;
  std::vector<Edge> edges;
};

class GraphCanvas : public QWidget, public FigureSource {
  Q_OBJECT

 public:
  // At most this many edges are drawn (the strongest); the caption says when more were kept.
  static constexpr int kMaxDrawnEdges = 6000;
  // Paths from a selected node to the logits drawn thick.
  static constexpr int kPaths = 3;

  explicit GraphCanvas(QWidget* parent = nullptr);

  void setPicture(std::shared_ptr<const GraphPicture> picture);
  const GraphPicture* picture() const { return picture_.get(); }
  void setFigureText(const FigureText& text) { figure_text_ = text; }

  // The selected node (index into picture()->nodes; -1: none), kept by id across pictures.
  int selectedNode() const;
  void selectNode(int index);
  // The nodes on the selected node's strongest paths to the logits, each path from the node up.
  const std::vector<std::vector<int>>& selectedPaths() const { return paths_; }

  // Pins and supernodes, by node id (they survive a change of thresholds, and of prompt when the
  // same node exists).
  bool isPinned(const QString& id) const { return pinned_.count(id) != 0; }
  void setPinned(const QString& id, bool pinned);
  const std::set<QString>& pinned() const { return pinned_; }
  void clearPins();
  // Groups the pinned nodes `ids` (at least two) as one supernode called `name`; a node is in at
  // most one group, so they leave any earlier one.
  void groupNodes(const QString& name, const QStringList& ids);
  void ungroup(const QString& name);
  const std::map<QString, QStringList>& supernodes() const { return groups_; }
  QString groupOf(const QString& id) const;
  void setPinnedOnly(bool on);
  bool pinnedOnly() const { return pinned_only_; }

  // What is drawn now: nodes (and groups, as one each) and edges, for captions and tests.
  int drawnNodeCount() const { return static_cast<int>(layout_.size()); }
  int drawnEdgeCount() const { return static_cast<int>(drawn_edges_.size()); }
  int keptEdgeCount() const { return kept_edge_count_; }
  // The centre of node `index` on the canvas (for tests: clicking it); invalid when not drawn.
  QPointF nodeCenter(int index) const;
  // The node under `point`, or -1.
  int nodeAt(QPointF point) const;

  QSize sizeHint() const override { return content_size_; }
  QSize minimumSizeHint() const override { return {200, 150}; }

  // FigureSource: the whole graph at its own size.
  FigureText figureText() const override { return figure_text_; }
  QSize figureSize() const override { return drawn_size_; }
  void paintFigure(QPainter& painter, QSize size) override;
  QString figureFileStem() const override { return QStringLiteral("graph"); }

 Q_SIGNALS:
  void nodeSelected(int index);       // -1: the selection was cleared
  void nodeActivated(int index);      // double-click: open what the node is (a feature's dashboard)
  void contextMenuForNode(int index, const QPoint& global_pos);  // -1: the empty canvas
  void pinsChanged();

 protected:
  void paintEvent(QPaintEvent* event) override;
  void mouseMoveEvent(QMouseEvent* event) override;
  void mousePressEvent(QMouseEvent* event) override;
  void mouseDoubleClickEvent(QMouseEvent* event) override;
  void contextMenuEvent(QContextMenuEvent* event) override;
  void leaveEvent(QEvent* event) override;
  void resizeEvent(QResizeEvent* event) override;

 private:
  // One drawn item: a node, or (pinned only) a group of them.
  struct Placed {
    std::vector<int> nodes;  // picture nodes it stands for
    QPointF center;
    QString group;           // the supernode's name, or empty
  };
  struct DrawnEdge {
    int from = 0, to = 0;    // indices into layout_
    double weight = 0.0;
    GraphPicture::EdgeKind kind = GraphPicture::EdgeKind::Signed;
  };
  // relayout: what is drawn and the natural sizes; place: positions for the widget's size (the
  // extra room of a larger view shared out); remapEdges: the drawn edges between placed items.
  void relayout();
  void place();
  void remapEdges();
  void computePaths();
  void paint(QPainter& p) const;
  int placedAt(QPointF point) const;

  std::shared_ptr<const GraphPicture> picture_;
  FigureText figure_text_;
  std::vector<Placed> layout_;
  std::vector<int> placed_of_node_;  // [node] index into layout_, -1 when not drawn
  std::vector<DrawnEdge> drawn_edges_;
  int kept_edge_count_ = 0;
  double max_abs_weight_ = 0.0;
  std::vector<std::vector<int>> items_;  // what each drawn item stands for (picture nodes)
  std::vector<QString> item_group_;      // [item] its supernode's name, or empty
  std::map<std::pair<int, int>, std::vector<int>> cells_;  // (row, pos) -> items, most influential first
  int per_row_ = 8, step_x_ = 13, step_y_ = 13;
  int logit_step_x_ = 19;  // the logits' spacing: their slanted labels one line apart (see cellGrid)
  // (items a line, distance between centres across) of the cell in band `row` holding n items.
  std::pair<int, int> cellGrid(int row, int n) const;
  std::vector<int> natural_width_, natural_height_;  // [pos], [row]
  std::vector<int> row_top_;  // [row] top y of each band; rows: logits, layers top-down, tokens
  std::vector<int> row_height_;
  std::vector<int> column_left_, column_width_;  // [pos]
  QSize content_size_{400, 300};  // the natural size (the minimum)
  QSize drawn_size_{400, 300};    // as placed for the widget's size
  QString selected_id_;
  int selected_ = -1;
  int hovered_ = -1;
  std::vector<std::vector<int>> paths_;
  std::set<QString> pinned_;
  std::map<QString, QStringList> groups_;
  bool pinned_only_ = false;
};

}  // namespace hs::ui
