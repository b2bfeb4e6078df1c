#include "ui/widgets/graph_canvas.h"

#include <QContextMenuEvent>
#include <QFontMetrics>
#include <QMouseEvent>
#include <QPainter>
#include <QPainterPath>
#include <QResizeEvent>
#include <QToolTip>

#include <algorithm>
#include <cmath>
#include <functional>

#include "ui/style/colormap.h"

namespace hs::ui {
namespace {

constexpr int kStep = 13;        // distance between node centres in a cell
constexpr double kRadius = 4.5;  // a node's radius
constexpr int kLeft = 58, kRight = 14, kTop = 64, kBottom = 44, kCellPad = 6;
// A logit's token is written slanted above its diamond, at most kLabelWidth pixels long.
constexpr double kLabelAngle = 55.0;
constexpr int kLabelWidth = 70;
// The right margin: kRight, or more when the last column's slanted labels reach further.
int rightMargin() {
  return std::max(kRight, static_cast<int>(std::ceil(kLabelWidth * std::cos(kLabelAngle * M_PI / 180.0))));
}
// The diverging map's ends (ColorBrewer RdBu): red raises the target's input, blue lowers it.
const QColor kPositive(0xb2, 0x18, 0x2b), kNegative(0x21, 0x66, 0xac);

// Band of a layer: the logits on top, then the layers from the last down, the tokens at the bottom.
int rowOf(const GraphPicture& g, const GraphPicture::Node& n) {
  if (n.kind == GraphPicture::Kind::Logit) return 0;
  if (n.kind == GraphPicture::Kind::Token || n.layer < 0) return g.n_layers + 1;
  return 1 + (g.n_layers - 1 - std::clamp(n.layer, 0, std::max(0, g.n_layers - 1)));
}

}  // namespace

GraphCanvas::GraphCanvas(QWidget* parent) : QWidget(parent) {
  setObjectName(QStringLiteral("graphCanvas"));
  setMouseTracking(true);
  setBackgroundRole(QPalette::Base);
  setAutoFillBackground(true);
}

void GraphCanvas::setPicture(std::shared_ptr<const GraphPicture> picture) {
  picture_ = std::move(picture);
  selected_ = -1;
  hovered_ = -1;
  if (picture_ && !selected_id_.isEmpty())
    for (size_t i = 0; i < picture_->nodes.size(); ++i)
      if (picture_->nodes[i].id == selected_id_) selected_ = static_cast<int>(i);
  if (selected_ < 0) selected_id_.clear();
  relayout();
}

int GraphCanvas::selectedNode() const { return selected_; }

void GraphCanvas::selectNode(int index) {
  if (!picture_ || index < 0 || index >= static_cast<int>(picture_->nodes.size())) index = -1;
  selected_ = index;
  selected_id_ = index < 0 ? QString() : picture_->nodes[static_cast<size_t>(index)].id;
  computePaths();
  update();
  Q_EMIT nodeSelected(index);
}

void GraphCanvas::setPinned(const QString& id, bool pinned) {
  if (pinned == isPinned(id)) return;
  if (pinned) {
    pinned_.insert(id);
  } else {
    pinned_.erase(id);
    // A group keeps only pinned members; one member left is no group.
    for (auto it = groups_.begin(); it != groups_.end();) {
      it->second.removeAll(id);
      it = it->second.size() < 2 ? groups_.erase(it) : std::next(it);
    }
  }
  relayout();
  Q_EMIT pinsChanged();
}

void GraphCanvas::clearPins() {
  pinned_.clear();
  groups_.clear();
  relayout();
  Q_EMIT pinsChanged();
}

void GraphCanvas::groupNodes(const QString& name, const QStringList& ids) {
  QStringList members;
  for (const QString& id : ids)
    if (isPinned(id) && !members.contains(id)) members.push_back(id);
  if (name.trimmed().isEmpty() || members.size() < 2) return;
  for (auto it = groups_.begin(); it != groups_.end();) {
    for (const QString& id : members) it->second.removeAll(id);
    it = it->second.size() < 2 ? groups_.erase(it) : std::next(it);
  }
  groups_[name.trimmed()] = members;
  relayout();
  Q_EMIT pinsChanged();
}

void GraphCanvas::ungroup(const QString& name) {
  if (groups_.erase(name) == 0) return;
  relayout();
  Q_EMIT pinsChanged();
}

QString GraphCanvas::groupOf(const QString& id) const {
  for (const auto& [name, members] : groups_)
    if (members.contains(id)) return name;
  return {};
}

void GraphCanvas::setPinnedOnly(bool on) {
  if (on == pinned_only_) return;
  pinned_only_ = on;
  relayout();
}

QPointF GraphCanvas::nodeCenter(int index) const {
  if (index < 0 || index >= static_cast<int>(placed_of_node_.size()) || placed_of_node_[static_cast<size_t>(index)] < 0)
    return {};
  return layout_[static_cast<size_t>(placed_of_node_[static_cast<size_t>(index)])].center;
}

int GraphCanvas::placedAt(QPointF point) const {
  int best = -1;
  double best_d = kRadius + 4.0;
  for (size_t i = 0; i < layout_.size(); ++i) {
    const double reach = layout_[i].group.isEmpty() ? kRadius + 4.0 : 24.0;
    const double d = std::hypot(layout_[i].center.x() - point.x(), layout_[i].center.y() - point.y());
    if (d <= std::max(best_d, reach) && (best < 0 || d < best_d)) {
      best = static_cast<int>(i);
      best_d = d;
    }
  }
  return best;
}

int GraphCanvas::nodeAt(QPointF point) const {
  const int placed = placedAt(point);
  return placed < 0 ? -1 : layout_[static_cast<size_t>(placed)].nodes.front();
}

void GraphCanvas::relayout() {
  layout_.clear();
  drawn_edges_.clear();
  kept_edge_count_ = 0;
  max_abs_weight_ = 0.0;
  row_top_.clear();
  row_height_.clear();
  column_left_.clear();
  placed_of_node_.clear();
  if (!picture_) {
    content_size_ = drawn_size_ = {400, 300};
    setMinimumSize(200, 150);
    updateGeometry();
    update();
    return;
  }
  const GraphPicture& g = *picture_;
  const int n_rows = g.n_layers + 2;
  const int n_pos = std::max(1, static_cast<int>(g.positions.size()));
  placed_of_node_.assign(g.nodes.size(), -1);

  // What is drawn: every node, or the pinned ones with each group as one item (placed in the
  // cell of its most influential member).
  std::vector<std::vector<int>> items;
  std::vector<QString> item_group;
  std::map<QString, int> group_item;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const GraphPicture::Node& n = g.nodes[i];
    if (pinned_only_ && !isPinned(n.id)) continue;
    const QString group = pinned_only_ ? groupOf(n.id) : QString();
    if (!group.isEmpty()) {
      auto [it, added] = group_item.emplace(group, static_cast<int>(items.size()));
      if (added) {
        items.push_back({});
        item_group.push_back(group);
      }
      items[static_cast<size_t>(it->second)].push_back(static_cast<int>(i));
      continue;
    }
    items.push_back({static_cast<int>(i)});
    item_group.push_back(QString());
  }
  auto lead = [&](const std::vector<int>& members) {
    return *std::min_element(members.begin(), members.end(), [&](int a, int b) {
      return g.nodes[static_cast<size_t>(a)].influence < g.nodes[static_cast<size_t>(b)].influence;
    });
  };
  // Cells: the items of each (row, position), most influential first.
  cells_.clear();
  for (size_t k = 0; k < items.size(); ++k) {
    const GraphPicture::Node& n = g.nodes[static_cast<size_t>(lead(items[k]))];
    cells_[{rowOf(g, n), std::clamp(n.pos, 0, n_pos - 1)}].push_back(static_cast<int>(k));
  }
  for (auto& [cell, list] : cells_)
    std::stable_sort(list.begin(), list.end(), [&](int a, int b) {
      return g.nodes[static_cast<size_t>(lead(items[static_cast<size_t>(a)]))].influence <
             g.nodes[static_cast<size_t>(lead(items[static_cast<size_t>(b)]))].influence;
    });
  // Natural sizes: each column as wide as its fullest cell (up to per_row items a line) or its
  // token, each band as tall as its fullest cell's lines.
  per_row_ = pinned_only_ ? 2 : 8;
  step_x_ = pinned_only_ ? 60 : kStep;
  step_y_ = pinned_only_ ? 40 : kStep;
  const QFontMetrics fm(font());
  // Labels slanted at kLabelAngle stand step * sin(angle) apart: at least a line of text.
  logit_step_x_ = static_cast<int>(std::ceil((fm.height() + 1) / std::sin(kLabelAngle * M_PI / 180.0)));
  natural_width_.assign(static_cast<size_t>(n_pos), 0);
  for (int c = 0; c < n_pos; ++c) {
    const int text = c < g.positions.size() ? fm.horizontalAdvance(g.positions[c]) + 8 : 0;
    natural_width_[static_cast<size_t>(c)] = std::clamp(text, 34, 90);
  }
  natural_height_.assign(static_cast<size_t>(n_rows), pinned_only_ ? 48 : 26);
  for (const auto& [cell, list] : cells_) {
    const int n = static_cast<int>(list.size());
    const auto [per_row, step_x] = cellGrid(cell.first, n);
    const int across = std::min(n, per_row), lines = (n + per_row - 1) / per_row;
    int& w = natural_width_[static_cast<size_t>(cell.second)];
    w = std::max(w, across * step_x + 2 * kCellPad);
    int& h = natural_height_[static_cast<size_t>(cell.first)];
    h = std::max(h, lines * step_y_ + 2 * kCellPad);
  }
  int width = kLeft + rightMargin(), height = kTop + kBottom;
  for (int w : natural_width_) width += w;
  for (int h : natural_height_) height += h;
  content_size_ = QSize(width, height);
  items_ = std::move(items);
  item_group_ = std::move(item_group);
  setMinimumSize(content_size_);
  place();

  remapEdges();
  computePaths();
  updateGeometry();
  update();
}

std::pair<int, int> GraphCanvas::cellGrid(int row, int n) const {
  // The logits (band 0, the only kind there) stand in one line, far enough apart that the tokens
  // written slanted above them do not run into each other or into a second line's diamonds.
  if (row == 0) return {std::max(1, n), std::max(step_x_, logit_step_x_)};
  return {per_row_, step_x_};
}

void GraphCanvas::place() {
  if (!picture_) return;
  const int n_rows = static_cast<int>(natural_height_.size()), n_pos = static_cast<int>(natural_width_.size());
  // The extra room of a larger window is shared out evenly: the graph fills the view.
  const int extra_w = std::max(0, width() - content_size_.width()), extra_h = std::max(0, height() - content_size_.height());
  column_left_.resize(static_cast<size_t>(n_pos));
  column_width_.resize(static_cast<size_t>(n_pos));
  int x = kLeft;
  for (int c = 0; c < n_pos; ++c) {
    column_left_[static_cast<size_t>(c)] = x;
    column_width_[static_cast<size_t>(c)] = natural_width_[static_cast<size_t>(c)] + extra_w / n_pos;
    x += column_width_[static_cast<size_t>(c)];
  }
  row_top_.resize(static_cast<size_t>(n_rows));
  row_height_.resize(static_cast<size_t>(n_rows));
  int y = kTop;
  for (int r = 0; r < n_rows; ++r) {
    row_top_[static_cast<size_t>(r)] = y;
    row_height_[static_cast<size_t>(r)] = natural_height_[static_cast<size_t>(r)] + extra_h / n_rows;
    y += row_height_[static_cast<size_t>(r)];
  }
  drawn_size_ = QSize(x + rightMargin(), y + kBottom);
  layout_.clear();
  placed_of_node_.assign(picture_->nodes.size(), -1);
  for (const auto& [cell, list] : cells_) {
    const int n = static_cast<int>(list.size());
    const auto [per_row, step_x] = cellGrid(cell.first, n);
    const int across = std::min(n, per_row), lines = (n + per_row - 1) / per_row;
    // The cell's items centred in it.
    const double x0 = column_left_[static_cast<size_t>(cell.second)] +
                      (column_width_[static_cast<size_t>(cell.second)] - across * step_x) / 2.0;
    const double y0 = row_top_[static_cast<size_t>(cell.first)] + (row_height_[static_cast<size_t>(cell.first)] - lines * step_y_) / 2.0;
    for (int k = 0; k < n; ++k) {
      const int item = list[static_cast<size_t>(k)];
      Placed placed;
      placed.nodes = items_[static_cast<size_t>(item)];
      placed.group = item_group_[static_cast<size_t>(item)];
      placed.center = QPointF(x0 + (k % per_row) * step_x + step_x / 2.0, y0 + (k / per_row) * step_y_ + step_y_ / 2.0);
      for (int node : placed.nodes) placed_of_node_[static_cast<size_t>(node)] = static_cast<int>(layout_.size());
      layout_.push_back(std::move(placed));
    }
  }
}

void GraphCanvas::resizeEvent(QResizeEvent* event) {
  QWidget::resizeEvent(event);
  if (!picture_) return;
  place();
  remapEdges();
  computePaths();
}

void GraphCanvas::remapEdges() {
  drawn_edges_.clear();
  kept_edge_count_ = 0;
  max_abs_weight_ = 0.0;
  const GraphPicture& g = *picture_;
  // Edges between drawn items; a group's are the sums of its members'.
  // (An attention edge and the residual between the same two states are drawn as one, as LM-TT
  // draws them, in the attention's colour.)
  std::map<std::pair<int, int>, std::pair<double, GraphPicture::EdgeKind>> summed;
  for (const GraphPicture::Edge& e : g.edges) {
    const int from = placed_of_node_[static_cast<size_t>(e.source)], to = placed_of_node_[static_cast<size_t>(e.target)];
    if (from < 0 || to < 0 || from == to) continue;
    auto [it, added] = summed.try_emplace({from, to}, 0.0, e.kind);
    it->second.first += e.weight;
    if (e.kind == GraphPicture::EdgeKind::Attention) it->second.second = e.kind;
  }
  drawn_edges_.reserve(summed.size());
  for (const auto& [pair, w] : summed) drawn_edges_.push_back({pair.first, pair.second, w.first, w.second});
  kept_edge_count_ = static_cast<int>(drawn_edges_.size());
  std::sort(drawn_edges_.begin(), drawn_edges_.end(),
            [](const DrawnEdge& a, const DrawnEdge& b) { return std::abs(a.weight) > std::abs(b.weight); });
  if (drawn_edges_.size() > static_cast<size_t>(kMaxDrawnEdges)) drawn_edges_.resize(kMaxDrawnEdges);
  for (const DrawnEdge& e : drawn_edges_) max_abs_weight_ = std::max(max_abs_weight_, std::abs(e.weight));

}

void GraphCanvas::computePaths() {
  paths_.clear();
  if (!picture_ || selected_ < 0 || placed_of_node_[static_cast<size_t>(selected_)] < 0) return;
  const GraphPicture& g = *picture_;
  const size_t n = layout_.size();
  // Rows normalised as pruning normalises them: |w| over the sum of |w| into the target.
  std::vector<double> in_sum(n, 0.0);
  std::vector<std::vector<std::pair<int, double>>> out(n);
  for (const DrawnEdge& e : drawn_edges_) in_sum[static_cast<size_t>(e.to)] += std::abs(e.weight);
  for (const DrawnEdge& e : drawn_edges_)
    out[static_cast<size_t>(e.from)].push_back({e.to, std::abs(e.weight) / std::max(in_sum[static_cast<size_t>(e.to)], 1e-30)});
  auto is_logit = [&](size_t placed) {
    for (int node : layout_[placed].nodes)
      if (g.nodes[static_cast<size_t>(node)].kind == GraphPicture::Kind::Logit || g.nodes[static_cast<size_t>(node)].goal)
        return true;
    return false;
  };
  // best[v]: the strongest path's product from v to any logit; next[v] its next item. A depth-
  // first search with marks, so that a cycle (possible only through groups) ends there.
  std::vector<double> best(n, -1.0);
  std::vector<int> next(n, -1);
  std::vector<char> on_stack(n, 0);
  std::function<double(size_t)> visit = [&](size_t v) -> double {
    if (best[v] >= 0.0) return best[v];
    if (on_stack[v]) return 0.0;
    on_stack[v] = 1;
    double b = is_logit(v) ? 1.0 : 0.0;
    for (const auto& [to, w] : out[v]) {
      const double s = w * visit(static_cast<size_t>(to));
      if (s > b) {
        b = s;
        next[v] = to;
      }
    }
    on_stack[v] = 0;
    return best[v] = b;
  };
  const size_t start = static_cast<size_t>(placed_of_node_[static_cast<size_t>(selected_)]);
  std::vector<std::pair<double, int>> first;
  for (const auto& [to, w] : out[start]) first.push_back({w * visit(static_cast<size_t>(to)), to});
  std::sort(first.begin(), first.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (size_t k = 0; k < first.size() && static_cast<int>(paths_.size()) < kPaths; ++k) {
    if (first[k].first <= 0.0) break;
    std::vector<int> path{static_cast<int>(start)};
    for (int v = first[k].second; v >= 0 && path.size() <= n; v = next[static_cast<size_t>(v)]) {
      path.push_back(v);
      if (is_logit(static_cast<size_t>(v))) break;
    }
    paths_.push_back(std::move(path));
  }
}

void GraphCanvas::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.fillRect(rect(), palette().base());
  paint(p);
}

void GraphCanvas::paintFigure(QPainter& painter, QSize size) {
  painter.fillRect(QRect(QPoint(0, 0), size), Qt::white);
  paint(painter);
}

void GraphCanvas::paint(QPainter& p) const {
  p.setRenderHint(QPainter::Antialiasing, true);
  if (!picture_) return;
  const GraphPicture& g = *picture_;
  const int n_rows = g.n_layers + 2;
  const QFontMetrics fm(p.font());
  // Bands and their names.
  for (int r = 0; r < n_rows; ++r) {
    const QRect band(kLeft, row_top_[static_cast<size_t>(r)], drawn_size_.width() - kLeft - rightMargin(),
                     row_height_[static_cast<size_t>(r)]);
    if (r % 2 == 1) p.fillRect(band, QColor(0xf4, 0xf5, 0xf7));
    const int layer = g.n_layers - r;
    const QString name = r == 0 ? g.top_name
                         : r == n_rows - 1 ? g.bottom_name
                         : layer < g.layer_names.size() ? g.layer_names[layer]
                                                         : QStringLiteral("L%1").arg(layer);
    p.setPen(QColor(0x55, 0x5b, 0x66));
    p.drawText(QRect(4, band.top(), kLeft - 10, band.height()), Qt::AlignRight | Qt::AlignVCenter, name);
  }
  // Columns: the tokens, below.
  const int bottom = row_top_.back() + row_height_.back();
  for (size_t c = 0; c < column_left_.size(); ++c) {
    const int x = column_left_[c];
    p.setPen(QColor(0xe2, 0xe4, 0xe8));
    p.drawLine(x, kTop, x, bottom);
    if (c < static_cast<size_t>(g.positions.size())) {
      p.setPen(QColor(0x22, 0x22, 0x22));
      const int w = column_width_[c];
      const QString text = fm.elidedText(g.positions[static_cast<int>(c)], Qt::ElideRight, w - 4);
      p.drawText(QRect(x + 2, bottom + 4, w - 4, fm.height()), Qt::AlignHCenter | Qt::AlignTop, text);
      p.setPen(QColor(0x88, 0x8c, 0x94));
      p.drawText(QRect(x + 2, bottom + 4 + fm.height(), w - 4, fm.height()), Qt::AlignHCenter | Qt::AlignTop,
                 QString::number(c));
    }
  }
  // Edges, weakest first so that the strong ones are on top.
  const bool focus = selected_ >= 0 && placed_of_node_[static_cast<size_t>(selected_)] >= 0;
  const int focus_item = focus ? placed_of_node_[static_cast<size_t>(selected_)] : -1;
  std::set<std::pair<int, int>> on_path;
  for (const std::vector<int>& path : paths_)
    for (size_t k = 1; k < path.size(); ++k) on_path.insert({path[k - 1], path[k]});
  const double scale = max_abs_weight_ > 0 ? max_abs_weight_ : 1.0;
  for (auto it = drawn_edges_.rbegin(); it != drawn_edges_.rend(); ++it) {
    const DrawnEdge& e = *it;
    const double t = std::abs(e.weight) / scale;
    QColor c = e.weight >= 0 ? kPositive : kNegative;
    switch (e.kind) {
      case GraphPicture::EdgeKind::Signed: break;
      case GraphPicture::EdgeKind::Attention: c = QColor(0x1b, 0x7a, 0x8c); break;
      case GraphPicture::EdgeKind::Residual: c = QColor(0x80, 0x84, 0x8c); break;
      case GraphPicture::EdgeKind::Mlp: c = QColor(0xd9, 0x6b, 0x1c); break;
    }
    double width = 0.4 + 2.6 * t;
    int alpha = static_cast<int>(35 + 200 * t);
    if (focus) {
      if (on_path.count({e.from, e.to})) {
        width += 2.5;
        alpha = 255;
      } else if (e.from == focus_item || e.to == focus_item) {
        alpha = std::max(alpha, 170);
      } else {
        alpha = 14;
      }
    }
    c.setAlpha(alpha);
    p.setPen(QPen(c, width, Qt::SolidLine, Qt::RoundCap));
    const QPointF a = layout_[static_cast<size_t>(e.from)].center, b = layout_[static_cast<size_t>(e.to)].center;
    QPainterPath path(a);
    const double dy = (b.y() - a.y()) * 0.45;
    path.cubicTo(QPointF(a.x(), a.y() + dy), QPointF(b.x(), b.y() - dy), b);
    p.drawPath(path);
  }
  // Nodes.
  for (size_t i = 0; i < layout_.size(); ++i) {
    const Placed& item = layout_[i];
    const QPointF c = item.center;
    const GraphPicture::Node& n = g.nodes[static_cast<size_t>(item.nodes.front())];
    const bool pinned = std::any_of(item.nodes.begin(), item.nodes.end(),
                                    [&](int k) { return isPinned(g.nodes[static_cast<size_t>(k)].id); });
    QPen outline(QColor(0x33, 0x33, 0x33), 0.8);
    if (pinned) outline = QPen(accentColor(), 2.0);
    if (static_cast<int>(i) == focus_item) outline = QPen(Qt::black, 2.4);
    p.setPen(outline);
    if (!item.group.isEmpty()) {
      const QRectF box(c.x() - 26, c.y() - 14, 52, 28);
      p.setBrush(QColor(0xfd, 0xe0, 0xc0));
      p.drawRoundedRect(box, 5, 5);
      p.setPen(Qt::black);
      p.drawText(box.adjusted(2, 0, -2, 0), Qt::AlignCenter, fm.elidedText(item.group, Qt::ElideRight, 48));
      continue;
    }
    const double r = pinned_only_ ? kRadius + 3 : kRadius;
    switch (n.kind) {
      case GraphPicture::Kind::Feature:
        // Darker for more influential nodes (a lower cumulative influence share).
        p.setBrush(QColor::fromRgb(colorAt(ColorMap::Sequential, 0.25 + 0.7 * (1.0 - std::clamp(n.influence, 0.0, 1.0)))));
        p.drawEllipse(c, r, r);
        break;
      case GraphPicture::Kind::Error:
        p.setBrush(QColor(0xb8, 0xbc, 0xc4));
        p.drawRect(QRectF(c.x() - r, c.y() - r, 2 * r, 2 * r));
        break;
      case GraphPicture::Kind::Token:
        p.setBrush(QColor(0xe8, 0xdc, 0xa8));
        p.drawRoundedRect(QRectF(c.x() - r - 1, c.y() - r, 2 * r + 2, 2 * r), 2, 2);
        break;
      case GraphPicture::Kind::Stream:
        p.setBrush(n.goal ? QColor(0x9a, 0xd0, 0x9a) : QColor(0xd6, 0xe4, 0xf0));
        p.drawEllipse(c, r, r);
        break;
      case GraphPicture::Kind::Mlp:
        p.setBrush(QColor(0xf6, 0xc0, 0x8f));
        p.drawRect(QRectF(c.x() - r, c.y() - r, 2 * r, 2 * r));
        break;
      case GraphPicture::Kind::Logit: {
        p.setBrush(QColor(0x9a, 0xd0, 0x9a));
        QPolygonF diamond({QPointF(c.x(), c.y() - r - 1), QPointF(c.x() + r + 1, c.y()), QPointF(c.x(), c.y() + r + 1),
                           QPointF(c.x() - r - 1, c.y())});
        p.drawPolygon(diamond);
        // The token, slanted above the node.
        p.save();
        p.translate(c.x() + 2, c.y() - r - 3);
        p.rotate(-kLabelAngle);
        p.setPen(QColor(0x22, 0x22, 0x22));
        p.drawText(QPointF(0, 0), fm.elidedText(n.label, Qt::ElideRight, kLabelWidth));
        p.restore();
        break;
      }
    }
    if (pinned_only_ && n.kind != GraphPicture::Kind::Logit) {
      p.setPen(QColor(0x22, 0x22, 0x22));
      p.drawText(QRectF(c.x() - 30, c.y() + r + 1, 60, fm.height()), Qt::AlignHCenter | Qt::AlignTop,
                 fm.elidedText(n.label, Qt::ElideRight, 58));
    }
  }
}

void GraphCanvas::mouseMoveEvent(QMouseEvent* event) {
  const int placed = placedAt(event->position());
  if (placed != hovered_) {
    hovered_ = placed;
    if (placed < 0 || !picture_) {
      QToolTip::hideText();
    } else {
      const Placed& item = layout_[static_cast<size_t>(placed)];
      QString tip;
      if (!item.group.isEmpty()) {
        tip = QStringLiteral("<b>%1</b> (supernode of %2)").arg(item.group.toHtmlEscaped()).arg(item.nodes.size());
        for (int node : item.nodes)
          tip += QStringLiteral("<br>%1").arg(picture_->nodes[static_cast<size_t>(node)].label.toHtmlEscaped());
      } else {
        tip = picture_->nodes[static_cast<size_t>(item.nodes.front())].tooltip;
      }
      QToolTip::showText(event->globalPosition().toPoint(), tip, this);
    }
  }
  QWidget::mouseMoveEvent(event);
}

void GraphCanvas::leaveEvent(QEvent* event) {
  hovered_ = -1;
  QWidget::leaveEvent(event);
}

void GraphCanvas::mousePressEvent(QMouseEvent* event) {
  if (event->button() == Qt::LeftButton) selectNode(nodeAt(event->position()));
  QWidget::mousePressEvent(event);
}

void GraphCanvas::mouseDoubleClickEvent(QMouseEvent* event) {
  const int node = nodeAt(event->position());
  if (node >= 0) Q_EMIT nodeActivated(node);
}

void GraphCanvas::contextMenuEvent(QContextMenuEvent* event) {
  Q_EMIT contextMenuForNode(nodeAt(event->pos()), event->globalPos());
  event->accept();
}

}  // namespace hs::ui
