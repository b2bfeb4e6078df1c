// FNV-1a, 64 bits: the hash the model fingerprint, the pack cache's file names and the data-set
// scan's input record use. Not cryptographic: it names and recognises, it does not authenticate.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace hs {

struct Fnv1a64 {
  static constexpr uint64_t kOffsetBasis = 0xcbf29ce484222325ull;
  static constexpr uint64_t kPrime = 0x100000001b3ull;
  uint64_t h = kOffsetBasis;

  void add(unsigned char byte) { h = (h ^ byte) * kPrime; }
  void add(const void* data, size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < n; ++i) add(p[i]);
  }
  void add(std::string_view s) { add(s.data(), s.size()); }
  void add_u64(uint64_t v) { add(&v, sizeof v); }
};

inline uint64_t fnv1a64(std::string_view s) {
  Fnv1a64 hash;
  hash.add(s);
  return hash.h;
}

}  // namespace hs
