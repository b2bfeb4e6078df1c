// GPT-2's pre-tokenization regex, run with PCRE2. Private to core/tokenizer (tests include it).
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

namespace hs::tokenizer_detail {

// The pattern as HeadScope spells it for PCRE2: GPT-2's
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// with \s written out as the Unicode White_Space property, which is what Python's `regex`
// module (used by Hugging Face's GPT2Tokenizer) means by \s for text. Neither neighbour agrees:
// PCRE2's own \s under PCRE2_UCP adds U+180E (MONGOLIAN VOWEL SEPARATOR, a format character since
// Unicode 6.3), and Python's str.isspace() adds U+001C..U+001F. \p{L} and \p{N} come from PCRE2's
// tables (Unicode 14.0 in PCRE2 10.42, the same as Python 3.11's unicodedata); characters assigned
// in later Unicode versions count as "other" here.
extern const char* const kGpt2Pattern;

// Splits valid UTF-8 text into GPT-2 pre-tokens, one at a time. Like Python's re.findall, matches
// follow one another; every character lands in exactly one piece because each character is
// whitespace, a letter, a number or "other". One object per thread (it owns PCRE2 match data);
// the compiled pattern behind it is shared and compiled once per process.
class Pretokenizer {
 public:
  Pretokenizer();
  explicit Pretokenizer(std::string_view text) : Pretokenizer() { reset(text); }
  ~Pretokenizer();
  Pretokenizer(const Pretokenizer&) = delete;
  Pretokenizer& operator=(const Pretokenizer&) = delete;

  // The next pre-token, or false at the end of the text. Throws hs::Error if PCRE2 fails (it does
  // not for valid UTF-8; checked anyway).
  bool next(std::string_view& piece);
  // Starts over on another text, reusing the match data.
  void reset(std::string_view text) {
    text_ = text;
    offset_ = 0;
  }

 private:
  std::string_view text_;
  size_t offset_ = 0;
  void* match_data_ = nullptr;  // pcre2_match_data*, kept out of this header
};

// All pre-tokens of `text` (for tests).
std::vector<std::string_view> pretokenize(std::string_view text);

// PCRE2's message for an error code.
std::string pcre2_message(int code);

}  // namespace hs::tokenizer_detail
