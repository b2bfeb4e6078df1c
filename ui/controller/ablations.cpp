#include "ui/controller/ablations.h"

#include <QStringList>
#include <QUndoCommand>
#include <QUndoStack>

#include <algorithm>

namespace hs::ui {

// One step: the list before and after it.
class SetAblationsCommand : public QUndoCommand {
 public:
  SetAblationsCommand(Ablations* owner, hs::Interventions before, hs::Interventions after, const QString& text)
      : QUndoCommand(text), owner_(owner), before_(std::move(before)), after_(std::move(after)) {}
  void undo() override { owner_->set(before_); }
  void redo() override { owner_->set(after_); }

 private:
  Ablations* owner_;
  hs::Interventions before_, after_;
};

namespace {

QString head(int layer, int h) { return QStringLiteral("L%1H%2").arg(layer).arg(h); }

}  // namespace

Ablations::Ablations(QObject* parent) : QObject(parent), undo_(new QUndoStack(this)) {}

std::optional<hs::InterventionKind> Ablations::kindOf(int layer, int h) const {
  for (const hs::Intervention& i : list_)
    if (i.layer == layer && i.head == h) return i.kind;
  return std::nullopt;
}

QString Ablations::actionText(const std::vector<std::pair<int, int>>& heads, hs::InterventionKind kind) {
  const QString verb = kind == hs::InterventionKind::Mean ? QStringLiteral("Mean-ablate") : QStringLiteral("Zero-ablate");
  if (heads.size() == 1) return QStringLiteral("%1 %2").arg(verb, head(heads[0].first, heads[0].second));
  QStringList names;
  for (const auto& [l, h] : heads) names << head(l, h);
  return QStringLiteral("%1 %2 heads (%3)").arg(verb).arg(heads.size()).arg(names.join(QStringLiteral(", ")));
}

void Ablations::add(const std::vector<std::pair<int, int>>& heads, hs::InterventionKind kind) {
  hs::Interventions after = list_;
  // Named copies, not a structured binding: clang before 16 cannot capture one in the lambda below.
  for (const auto& lh : heads) {
    const int l = lh.first, h = lh.second;
    const hs::Intervention i = kind == hs::InterventionKind::Mean ? hs::mean_ablation(l, h) : hs::zero_ablation(l, h);
    auto same = std::find_if(after.begin(), after.end(), [&](const hs::Intervention& o) { return o.layer == l && o.head == h; });
    if (same != after.end()) *same = i;
    else after.push_back(i);
  }
  if (after != list_) push(std::move(after), actionText(heads, kind));
}

void Ablations::remove(int layer, int h) {
  hs::Interventions after = list_;
  std::erase_if(after, [&](const hs::Intervention& i) { return i.layer == layer && i.head == h; });
  if (after != list_) push(std::move(after), QStringLiteral("Remove the ablation of %1").arg(head(layer, h)));
}

void Ablations::clear() {
  if (!list_.empty()) push({}, QStringLiteral("Clear Ablations"));
}

void Ablations::reset() {
  undo_->clear();
  set({});
}

void Ablations::push(hs::Interventions after, const QString& text) {
  undo_->push(new SetAblationsCommand(this, list_, std::move(after), text));  // push() runs redo()
}

void Ablations::set(hs::Interventions list) {
  if (list == list_) return;
  list_ = std::move(list);
  Q_EMIT changed();
}

}  // namespace hs::ui
