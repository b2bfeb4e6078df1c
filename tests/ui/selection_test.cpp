#include <catch2/catch.hpp>

#include <QSignalSpy>

#include "ui/controller/selection.h"

using hs::ui::Selection;

TEST_CASE("Selection clamps into the model and the prompt, and follows the last token", "[selection]") {
  Selection s;
  s.setBounds(4, 8, 5);
  CHECK(s.position() == 4);  // a fresh selection sits on the last token
  s.setHead(9, 9);
  CHECK(s.layer() == 3);
  CHECK(s.head() == 7);
  s.setBounds(4, 8, 7);      // typing: the last token stays selected
  CHECK(s.position() == 6);
  s.setPosition(2);
  s.setBounds(4, 8, 9);      // an earlier position stays where it was
  CHECK(s.position() == 2);
  s.setBounds(2, 4, 1);      // a smaller model and prompt
  CHECK(s.layer() == 1);
  CHECK(s.head() == 3);
  CHECK(s.position() == 0);
}

TEST_CASE("Selection steps through heads in reading order and through layers", "[selection]") {
  Selection s;
  s.setBounds(3, 4, 2);
  QSignalSpy spy(&s, &Selection::headChanged);
  s.stepHead(1);
  CHECK((s.layer() == 0 && s.head() == 1));
  s.setHead(0, 3);
  s.stepHead(1);  // wraps into the next layer
  CHECK((s.layer() == 1 && s.head() == 0));
  s.stepHead(-1);
  CHECK((s.layer() == 0 && s.head() == 3));
  s.stepLayer(5);
  CHECK((s.layer() == 2 && s.head() == 3));
  s.stepHead(1);  // the last head stays put
  CHECK((s.layer() == 2 && s.head() == 3));
  CHECK(spy.count() == 5);
}

TEST_CASE("Selection's hover position is cleared outside the prompt", "[selection]") {
  Selection s;
  s.setBounds(1, 1, 3);
  s.setHoverPosition(2);
  CHECK(s.hoverPosition() == 2);
  s.setHoverPosition(7);
  CHECK(s.hoverPosition() == -1);
}
