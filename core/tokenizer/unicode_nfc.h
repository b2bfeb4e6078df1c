// Unicode Normalization Form C, for tokenizer.json files whose normalizer is NFC (Qwen2). Private to
// core/tokenizer (tests include it).
//
// The core has no ICU and no Qt, so the tables (combining classes, canonical decompositions,
// primary compositions) are generated from Python's unicodedata by tools/unicode/make_nfc_tables.py
// into unicode_nfc_data.inc; the algorithm is UAX #15's: full canonical decomposition (Hangul
// algorithmically), canonical ordering, canonical composition. Characters assigned after that
// table's Unicode version have class 0 and no decomposition here, as in any older normalizer.
#pragma once

#include <string>
#include <string_view>

namespace hs::tokenizer_detail {

// The NFC form of valid UTF-8 text. Text that is already NFC comes back unchanged.
std::string to_nfc(std::string_view text);

}  // namespace hs::tokenizer_detail
