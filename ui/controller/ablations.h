// The heads the person has ablated: zero or mean ablations of hook_z, applied to every run until
// removed. Every change is one step of a QUndoStack (Edit > Undo / Redo). The window hands the
// list to the controller, which re-runs the prompt with it.
#pragma once

#include <QObject>
#include <QString>

#include <optional>

#include "core/model/intervention.h"

class QUndoStack;

namespace hs::ui {

class Ablations : public QObject {
  Q_OBJECT

 public:
  explicit Ablations(QObject* parent = nullptr);

  const hs::Interventions& list() const { return list_; }
  bool isEmpty() const { return list_.empty(); }
  // How head (layer, head) is ablated, if it is.
  std::optional<hs::InterventionKind> kindOf(int layer, int head) const;
  QUndoStack* undoStack() const { return undo_; }

  // Each is one undoable step, named in the Edit menu ("Undo Zero-ablate L3H2"). Adding a head
  // that is already ablated changes its kind.
  void add(const std::vector<std::pair<int, int>>& heads, hs::InterventionKind kind);
  void remove(int layer, int head);
  void clear();
  // Without undo (a new model: the old heads mean nothing to it).
  void reset();

  // "Zero-ablate L3H2", "Mean-ablate 3 heads (L0H1, L2H3, L3H2)"
  static QString actionText(const std::vector<std::pair<int, int>>& heads, hs::InterventionKind kind);

 Q_SIGNALS:
  void changed();

 private:
  friend class SetAblationsCommand;
  void set(hs::Interventions list);
  void push(hs::Interventions after, const QString& text);

  hs::Interventions list_;
  QUndoStack* undo_ = nullptr;
};

}  // namespace hs::ui
