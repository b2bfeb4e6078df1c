#include "ui/widgets/refresh_when_shown.h"

#include <QEvent>
#include <QWidget>

namespace hs::ui {

RefreshWhenShown::RefreshWhenShown(QWidget* view, std::function<void()> refresh)
    : QObject(view), view_(view), refresh_(std::move(refresh)) {
  view_->installEventFilter(this);
}

void RefreshWhenShown::request() {
  if (!view_->isVisible()) {
    pending_ = true;
    return;
  }
  pending_ = false;
  refresh_();
}

bool RefreshWhenShown::eventFilter(QObject* watched, QEvent* event) {
  // Show reaches the view before it is painted, so the first frame already has the new data.
  if (watched == view_ && event->type() == QEvent::Show && pending_) {
    pending_ = false;
    refresh_();
  }
  return QObject::eventFilter(watched, event);
}

}  // namespace hs::ui
