// The one selection every view shares: a head (layer, head), a destination position, the target
// token for logit attribution, and the position under the mouse. Views set it when clicked and
// follow its signals; nobody keeps a private copy.
#pragma once

#include <QObject>

#include <cstdint>
#include <optional>

namespace hs::ui {

class Selection : public QObject {
  Q_OBJECT

 public:
  explicit Selection(QObject* parent = nullptr);

  int layer() const { return layer_; }
  int head() const { return head_; }
  int position() const { return position_; }
  // The attribution target; empty means "the predicted next token".
  std::optional<int32_t> target() const { return target_; }
  // The token a logit difference subtracts from the target: the metric the Attribution view and
  // the Attention view's edge attributions explain is logit(target) - logit(versus); empty: the
  // target's logit alone. Changing it emits targetChanged.
  std::optional<int32_t> versus() const { return versus_; }
  int hoverPosition() const { return hover_; }  // -1 when nothing is hovered

  int layerCount() const { return n_layer_; }
  int headCount() const { return n_head_; }
  int positionCount() const { return n_pos_; }

  // The model's shape and the prompt's length; the selection is clamped into them. A position at
  // the end of the previous prompt stays at the end, so typing keeps the last token selected.
  void setBounds(int n_layer, int n_head, int n_pos);

  void setHead(int layer, int head);
  void setLayer(int layer);
  void setPosition(int pos);
  void setTarget(std::optional<int32_t> target);
  void setVersus(std::optional<int32_t> versus);
  void setHoverPosition(int pos);
  // Moves through heads in reading order (wrapping into the next/previous layer), or layers.
  void stepHead(int delta);
  void stepLayer(int delta);

 Q_SIGNALS:
  void headChanged(int layer, int head);
  void positionChanged(int pos);
  void targetChanged();
  void hoverChanged(int pos);

 private:
  int n_layer_ = 0, n_head_ = 0, n_pos_ = 0;
  int layer_ = 0, head_ = 0, position_ = 0, hover_ = -1;
  std::optional<int32_t> target_;
  std::optional<int32_t> versus_;
};

}  // namespace hs::ui
