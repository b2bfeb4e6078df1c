// splitmix64's finalizer (Steele, Lea and Flood 2014): a cheap 64-bit mix whose outputs pass
// statistical tests. The repeated-random prompts (head_scores.h) draw from splitmix64's stream,
// the BPE merge table hashes pairs with it, and the head statistics' sample keys are made with it.
#pragma once

#include <cstdint>

namespace hs {

inline uint64_t splitmix64_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace hs
