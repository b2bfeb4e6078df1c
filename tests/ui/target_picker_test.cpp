// The target-token picker the Contributions and Logit Lens views share.
#include <catch2/catch.hpp>

#include <QComboBox>
#include <QLabel>
#include <QLineEdit>
#include <QSignalSpy>
#include <QTest>

#include "ui/widgets/target_picker.h"

using namespace hs::ui;

TEST_CASE("The target picker offers its choices and says which target was chosen or why not", "[widgets][target]") {
  TargetPicker picker(QStringLiteral("Target token:"));
  std::vector<std::optional<int32_t>> chosen;
  QObject::connect(&picker, &TargetPicker::targetChosen, [&](std::optional<int32_t> t) { chosen.push_back(t); });
  QComboBox* combo = picker.combo();

  // The target among the choices is current; one that is not is added after them.
  const std::vector<TargetPicker::Choice> choices = {{QStringLiteral("␣mat (p = 0.41)"), 7},
                                                     {QStringLiteral("␣hat (p = 0.20)"), 9}};
  picker.setChoices(QStringLiteral("predicted: ␣mat"), choices, TargetPicker::Choice{QStringLiteral("␣hat"), 9});
  REQUIRE(combo->count() == 3);
  CHECK(combo->currentIndex() == 2);
  picker.setChoices(QStringLiteral("predicted: ␣mat"), choices, TargetPicker::Choice{QStringLiteral("␣dog"), 4});
  REQUIRE(combo->count() == 4);
  CHECK(combo->currentText() == QStringLiteral("␣dog"));
  picker.setChoices(QStringLiteral("predicted: ␣mat"), choices, std::nullopt);
  CHECK(combo->currentIndex() == 0);
  CHECK(chosen.empty());  // setting the items chooses nothing

  Q_EMIT combo->activated(1);
  Q_EMIT combo->activated(0);
  REQUIRE(chosen.size() == 2);
  CHECK(chosen[0] == std::optional<int32_t>(7));
  CHECK(chosen[1] == std::nullopt);

  // Typed text: an item's text picks it; anything else goes to the resolver.
  picker.setResolver([](const QString& typed, QString* error) -> std::optional<int32_t> {
    if (typed == QStringLiteral("cat")) return 5;
    *error = QStringLiteral("“%1” is not one token").arg(typed);
    return std::nullopt;
  });
  combo->setEditText(QStringLiteral("␣hat (p = 0.20)"));
  Q_EMIT combo->lineEdit()->returnPressed();
  combo->setEditText(QStringLiteral("the cat"));
  Q_EMIT combo->lineEdit()->returnPressed();
  CHECK(picker.errorText() == QStringLiteral("“the cat” is not one token"));
  combo->setEditText(QStringLiteral("cat"));
  Q_EMIT combo->lineEdit()->returnPressed();
  CHECK(picker.errorText().isEmpty());
  REQUIRE(chosen.size() == 4);
  CHECK(chosen[2] == std::optional<int32_t>(9));
  CHECK(chosen[3] == std::optional<int32_t>(5));
}
