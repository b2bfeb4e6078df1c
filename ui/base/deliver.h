#pragma once

#include <QFuture>
#include <QMetaObject>
#include <QObject>

#include <memory>

namespace hs::ui {

// Hands a worker's result to `done` on `context`'s thread, always through the event loop.
//
// QFuture::then(context, f) is not enough on its own: Qt 6.4 invokes f with AutoConnection, so
// when the work has already finished by the time then() attaches f, f runs at once, inside the
// call that started the work. A request*() could then answer before it returned, re-entering its
// caller (CI caught the controller doing this with a fast job). Such an early answer is posted
// instead, like every other one; the usual late answer is not delayed by an extra hop.
template <typename T, typename Done>
void deliverLater(QFuture<T> future, QObject* context, Done done) {
  auto attached = std::make_shared<bool>(false);  // read and written on context's thread only
  future.then(context, [context, attached, done](T result) {
    if (*attached) {
      done(result);
      return;
    }
    QMetaObject::invokeMethod(context, [done, result] { done(result); }, Qt::QueuedConnection);
  });
  *attached = true;
}

}  // namespace hs::ui
