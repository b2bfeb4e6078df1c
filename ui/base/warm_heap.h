#pragma once

#include <cstddef>

class QObject;

namespace hs::ui {

// Leaves `bytes` of touched free memory in the GUI thread's malloc arena, once per process, one
// block per event-loop turn so the GUI thread never stalls on it.
//
// Why: a widget that changes size (a plot's paint buffer when the token strip wraps to a new row)
// allocates a buffer of the new size before it frees the old one. When the arena has no free chunk
// that large, the buffer comes from pages never touched, and each page faults on its first write,
// in the middle of a relayout. Free memory that was written is reused without a fault, but only
// if it was not written with zeros: on some kernels (this project's benchmark VM among them)
// zero-filled anonymous pages are reclaimed and fault again, so the blocks are filled with a
// non-zero pattern. The memory stays resident, counted in the process's RSS.
//
// `owner` (on the GUI thread) parents the timer that paces the blocks. glibc only; elsewhere, or
// on a second call, it does nothing.
void warmGuiHeap(QObject* owner, std::size_t bytes = std::size_t{32} << 20);

}  // namespace hs::ui
