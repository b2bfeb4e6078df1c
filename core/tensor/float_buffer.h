// std::allocator, except that resize() and emplace(n) leave new elements uninitialized (default-,
// not value-initialized). For buffers written in full right away: the forward pass's attention
// patterns (zero-filling them first was a wasted pass over the largest buffer of a long run), a
// weight converted from 16 bits, Q/K/V joined into one matrix; their pages are then touched once,
// by that write.
#pragma once

#include <memory>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

namespace hs {

template <class T>
struct UninitializedAllocator : std::allocator<T> {
  template <class U>
  struct rebind {
    using other = UninitializedAllocator<U>;
  };
  UninitializedAllocator() noexcept = default;
  template <class U>
  UninitializedAllocator(const UninitializedAllocator<U>&) noexcept {}
  template <class U>
  void construct(U* p) noexcept(std::is_nothrow_default_constructible_v<U>) {
    ::new (static_cast<void*>(p)) U;  // default-initialized: no zero fill for float
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

using FloatBuffer = std::vector<float, UninitializedAllocator<float>>;

}  // namespace hs
