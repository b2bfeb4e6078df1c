#include "ui/controller/selection.h"

#include <algorithm>

namespace hs::ui {

Selection::Selection(QObject* parent) : QObject(parent) {}

void Selection::setBounds(int n_layer, int n_head, int n_pos) {
  const bool was_at_end = n_pos_ == 0 || position_ >= n_pos_ - 1;
  n_layer_ = std::max(0, n_layer);
  n_head_ = std::max(0, n_head);
  n_pos_ = std::max(0, n_pos);
  const int layer = std::clamp(layer_, 0, std::max(0, n_layer_ - 1));
  const int head = std::clamp(head_, 0, std::max(0, n_head_ - 1));
  if (layer != layer_ || head != head_) {
    layer_ = layer;
    head_ = head;
    Q_EMIT headChanged(layer_, head_);
  }
  const int pos = was_at_end ? std::max(0, n_pos_ - 1) : std::clamp(position_, 0, std::max(0, n_pos_ - 1));
  if (pos != position_) {
    position_ = pos;
    Q_EMIT positionChanged(position_);
  }
  if (hover_ >= n_pos_) setHoverPosition(-1);
}

void Selection::setHead(int layer, int head) {
  layer = std::clamp(layer, 0, std::max(0, n_layer_ - 1));
  head = std::clamp(head, 0, std::max(0, n_head_ - 1));
  if (layer == layer_ && head == head_) return;
  layer_ = layer;
  head_ = head;
  Q_EMIT headChanged(layer_, head_);
}

void Selection::setLayer(int layer) { setHead(layer, head_); }

void Selection::setPosition(int pos) {
  pos = std::clamp(pos, 0, std::max(0, n_pos_ - 1));
  if (pos == position_) return;
  position_ = pos;
  Q_EMIT positionChanged(position_);
}

void Selection::setTarget(std::optional<int32_t> target) {
  if (target == target_) return;
  target_ = target;
  Q_EMIT targetChanged();
}

void Selection::setVersus(std::optional<int32_t> versus) {
  if (versus == versus_) return;
  versus_ = versus;
  Q_EMIT targetChanged();
}

void Selection::setHoverPosition(int pos) {
  if (pos < 0 || pos >= n_pos_) pos = -1;
  if (pos == hover_) return;
  hover_ = pos;
  Q_EMIT hoverChanged(hover_);
}

void Selection::stepHead(int delta) {
  if (n_layer_ == 0 || n_head_ == 0) return;
  const int total = n_layer_ * n_head_;
  const int index = std::clamp(layer_ * n_head_ + head_ + delta, 0, total - 1);
  setHead(index / n_head_, index % n_head_);
}

void Selection::stepLayer(int delta) { setHead(layer_ + delta, head_); }

}  // namespace hs::ui
