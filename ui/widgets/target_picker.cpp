#include "ui/widgets/target_picker.h"

#include <QComboBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>

namespace hs::ui {

TargetPicker::TargetPicker(const QString& label, QWidget* parent) : QWidget(parent) {
  auto* layout = new QHBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->setSpacing(10);  // the spacing of the views' control rows it sits in
  auto* caption = new QLabel(label, this);
  layout->addWidget(caption);
  combo_ = new QComboBox(this);
  combo_->setEditable(true);
  combo_->setInsertPolicy(QComboBox::NoInsert);
  combo_->setMinimumContentsLength(24);
  combo_->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
  caption->setBuddy(combo_);
  layout->addWidget(combo_);
  error_ = new QLabel(this);
  error_->setObjectName(QStringLiteral("targetError"));
  error_->setStyleSheet(QStringLiteral("color: #b3261e;"));
  layout->addWidget(error_);

  connect(combo_, qOverload<int>(&QComboBox::activated), this, [this](int index) {
    if (updating_) return;
    error_->clear();
    const QVariant data = combo_->itemData(index);
    if (index == 0 || !data.isValid()) Q_EMIT targetChosen(std::nullopt);
    else Q_EMIT targetChosen(data.toInt());
  });
  connect(combo_->lineEdit(), &QLineEdit::returnPressed, this, &TargetPicker::applyTyped);
}

void TargetPicker::setChoices(const QString& none, const std::vector<Choice>& choices,
                              const std::optional<Choice>& current) {
  updating_ = true;
  combo_->clear();
  combo_->addItem(none);
  for (const Choice& c : choices) combo_->addItem(c.text, c.id);
  int index = 0;
  if (current) {
    index = -1;
    for (int i = 1; i < combo_->count(); ++i)
      if (combo_->itemData(i).toInt() == current->id) index = i;
    if (index < 0) {
      combo_->addItem(current->text, current->id);
      index = combo_->count() - 1;
    }
  }
  combo_->setCurrentIndex(index);
  combo_->lineEdit()->setCursorPosition(0);  // show the start of the text, not its end
  updating_ = false;
}

QString TargetPicker::errorText() const { return error_->text(); }

void TargetPicker::applyTyped() {
  if (!resolver_) return;
  const QString typed = combo_->currentText();
  for (int i = 0; i < combo_->count(); ++i) {
    if (combo_->itemText(i) == typed) {
      Q_EMIT combo_->activated(i);
      return;
    }
  }
  QString error;
  const std::optional<int32_t> id = resolver_(typed, &error);
  if (!id) {
    error_->setText(error);
    return;
  }
  error_->clear();
  Q_EMIT targetChosen(*id);
}

}  // namespace hs::ui
