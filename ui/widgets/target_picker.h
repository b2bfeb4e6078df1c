// A target-token picker: "Label: [editable list] error". The first item means no target (the
// view's default, e.g. the predicted token); the others are token ids. Picking an item, or typing
// one of them or any single token and pressing Enter, emits targetChosen; typed text that is not
// one token shows why beside the list. It knows no model: the views give it their run's top
// tokens as choices and a resolver that tokenizes what was typed.
#pragma once

#include <QString>
#include <QWidget>

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

class QComboBox;
class QLabel;

namespace hs::ui {

class TargetPicker : public QWidget {
  Q_OBJECT

 public:
  struct Choice {
    QString text;  // "␣mat (p = 0.41)"
    int32_t id = 0;
  };
  // The one token `typed` stands for, or nullopt with `error` saying why.
  using Resolver = std::function<std::optional<int32_t>(const QString& typed, QString* error)>;

  explicit TargetPicker(const QString& label, QWidget* parent = nullptr);

  void setResolver(Resolver resolver) { resolver_ = std::move(resolver); }
  // The items: `none`, then `choices`, then `current` when it is not among them; the current
  // item is `current`'s, or `none` without one. Emits nothing.
  void setChoices(const QString& none, const std::vector<Choice>& choices, const std::optional<Choice>& current);

  QComboBox* combo() const { return combo_; }
  QString errorText() const;

 Q_SIGNALS:
  // nullopt: the first item (no target).
  void targetChosen(std::optional<int32_t> target);

 private:
  void applyTyped();

  QComboBox* combo_ = nullptr;
  QLabel* error_ = nullptr;
  Resolver resolver_;
  bool updating_ = false;
};

}  // namespace hs::ui
