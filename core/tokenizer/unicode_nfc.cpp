#include "core/tokenizer/unicode_nfc.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/tokenizer/byte_level.h"

namespace hs::tokenizer_detail {

namespace {

struct CombiningClass {
  char32_t cp;
  uint8_t ccc;
};
struct Decomposition {
  char32_t cp, first, second;  // second == 0 for a singleton
};
struct Composition {
  char32_t first, second, composite;
};

#include "core/tokenizer/unicode_nfc_data.inc"

// Hangul syllables compose and decompose by arithmetic (Unicode 3.12).
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

uint8_t combining_class(char32_t cp) {
  const auto it = std::lower_bound(std::begin(kCombiningClasses), std::end(kCombiningClasses), cp,
                                   [](const CombiningClass& e, char32_t c) { return e.cp < c; });
  return it != std::end(kCombiningClasses) && it->cp == cp ? it->ccc : 0;
}

void decompose(char32_t cp, std::vector<char32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const char32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    return;
  }
  const auto it = std::lower_bound(std::begin(kDecompositions), std::end(kDecompositions), cp,
                                   [](const Decomposition& e, char32_t c) { return e.cp < c; });
  if (it == std::end(kDecompositions) || it->cp != cp) {
    out.push_back(cp);
    return;
  }
  decompose(it->first, out);
  if (it->second != 0) decompose(it->second, out);
}

// The primary composite of a pair, or 0.
char32_t compose(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase && b < kTBase + kTCount)
    return a + (b - kTBase);
  const auto it = std::lower_bound(std::begin(kCompositions), std::end(kCompositions), std::pair{a, b},
                                   [](const Composition& e, const std::pair<char32_t, char32_t>& k) {
                                     return e.first != k.first ? e.first < k.first : e.second < k.second;
                                   });
  return it != std::end(kCompositions) && it->first == a && it->second == b ? it->composite : 0;
}

}  // namespace

std::string to_nfc(std::string_view text) {
  // Nothing below U+0300 decomposes, combines or composes with what follows it.
  if (std::all_of(text.begin(), text.end(), [](char c) { return static_cast<uint8_t>(c) < 0xCC; })) return std::string(text);

  std::vector<char32_t> cps;  // [chars] fully decomposed
  cps.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    char32_t cp = 0;
    const size_t length = decode_utf8(text, i, cp);
    if (length == 0) {  // not reached for valid UTF-8; keep the byte's Latin-1 reading rather than loop
      cp = static_cast<uint8_t>(text[i]);
      i += 1;
    } else {
      i += length;
    }
    decompose(cp, cps);
  }
  // Canonical ordering: a stable sort by combining class of every run of non-starters.
  for (size_t i = 0; i < cps.size();) {
    if (combining_class(cps[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < cps.size() && combining_class(cps[j]) != 0) ++j;
    std::stable_sort(cps.begin() + static_cast<std::ptrdiff_t>(i), cps.begin() + static_cast<std::ptrdiff_t>(j),
                     [](char32_t a, char32_t b) { return combining_class(a) < combining_class(b); });
    i = j;
  }
  // Canonical composition: each character joins the last starter unless something between them
  // blocks it (a class of 0, or at least its own).
  std::vector<char32_t> out;
  out.reserve(cps.size());
  std::ptrdiff_t starter = -1;
  uint8_t last_class = 0;
  for (const char32_t cp : cps) {
    const uint8_t cls = combining_class(cp);
    if (starter >= 0) {
      const bool adjacent = static_cast<size_t>(starter) + 1 == out.size();
      if (adjacent || (last_class != 0 && last_class < cls)) {
        if (const char32_t composite = compose(out[static_cast<size_t>(starter)], cp)) {
          out[static_cast<size_t>(starter)] = composite;
          continue;
        }
      }
    }
    if (cls == 0) starter = static_cast<std::ptrdiff_t>(out.size());
    out.push_back(cp);
    last_class = cls;
  }
  std::string result;
  result.reserve(text.size());
  for (const char32_t cp : out) append_utf8(result, cp);
  return result;
}

}  // namespace hs::tokenizer_detail
