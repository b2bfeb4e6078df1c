#include "ui/base/warm_heap.h"

#include <QTimer>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

namespace hs::ui {

void warmGuiHeap(QObject* owner, std::size_t bytes) {
#if defined(__GLIBC__)
  static bool started = false;
  if (started) return;
  started = true;
  // Blocks below the mmap threshold that the core fixes (core/model/forward.cpp) come from the
  // heap; freed together, neighbours merge into chunks that its trim threshold keeps resident.
  constexpr std::size_t kBlock = std::size_t{1} << 20;
  constexpr unsigned char kPattern = 0xA5;  // not zero: see the header
  // The blocks are freed together when all are written, or when the owner goes first.
  struct Blocks {
    std::vector<void*> held;
    void release() {
      for (void* b : held) std::free(b);
      held.clear();
    }
    ~Blocks() { release(); }
  };
  auto blocks = std::make_shared<Blocks>();
  auto* timer = new QTimer(owner);
  timer->setInterval(4);
  QObject::connect(timer, &QTimer::timeout, timer, [timer, blocks, bytes] {
    void* p = blocks->held.size() * kBlock < bytes ? std::malloc(kBlock) : nullptr;
    if (p) {
      std::memset(p, kPattern, kBlock);
      blocks->held.push_back(p);
      return;
    }
    blocks->release();
    timer->stop();
    timer->deleteLater();
  });
  timer->start();
#else
  (void)owner;
  (void)bytes;
#endif
}

}  // namespace hs::ui
