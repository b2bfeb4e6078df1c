// A view on a hidden tab rebuilding its plots on every keystroke is work nobody sees, and it was
// most of the window's own time per keystroke (docs/benchmarks.md, "Measurements behind the
// code"). RefreshWhenShown runs a view's refresh at once while the view is visible, and otherwise
// once, when it is next shown.
#pragma once

#include <QObject>

#include <functional>

class QWidget;

namespace hs::ui {

class RefreshWhenShown : public QObject {
 public:
  RefreshWhenShown(QWidget* view, std::function<void()> refresh);

  // Refresh now if the view is visible, else when it is next shown.
  void request();
  // A refresh is owed: the view's plots show older data than the view holds.
  bool pending() const { return pending_; }

 protected:
  bool eventFilter(QObject* watched, QEvent* event) override;

 private:
  QWidget* view_;
  std::function<void()> refresh_;
  bool pending_ = false;
};

}  // namespace hs::ui
