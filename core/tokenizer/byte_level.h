// GPT-2's byte <-> character table and the UTF-8 helpers the tokenizer needs. Private to
// core/tokenizer (tests include it; nothing else should).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hs::tokenizer_detail {

// GPT-2's bytes_to_unicode(): printable Latin-1 bytes ('!'..'~', '¡'..'¬', '®'..'ÿ') stand for
// themselves, the other 68 bytes (controls, space, 0x7F-0xA0, 0xAD) for U+0100.. in byte order,
// so that every vocabulary string is printable. Space is 'Ġ' (U+0120), '\n' is 'Ċ' (U+010A).
const std::array<char32_t, 256>& byte_to_codepoint();
// The inverse: the byte a vocabulary character stands for, or -1 for characters outside the table.
int byte_of_codepoint(char32_t cp);

// Appends the UTF-8 encoding of a valid code point.
void append_utf8(std::string& out, char32_t cp);

struct Utf8Problem {
  size_t offset;       // of the first byte of the bad sequence
  uint8_t byte;        // the byte at `offset`
  const char* reason;  // a short phrase, e.g. "the sequence that starts here is cut short"
};
// Strict UTF-8 (Unicode Table 3-7): no overlong forms, no surrogates, nothing above U+10FFFF.
std::optional<Utf8Problem> find_invalid_utf8(std::string_view text);

// Throws the hs::Error every tokenizer gives for text that is not valid UTF-8 (with the offset).
void require_utf8_text(std::string_view text);

// Decodes one well-formed sequence at `pos`; returns its length (1-4) and sets `cp`, or returns 0
// when the bytes at `pos` are not a complete, well-formed sequence.
size_t decode_utf8(std::string_view text, size_t pos, char32_t& cp);

// The label display() shows for a token's bytes (see Tokenizer::display): bytes that are not
// complete, printable UTF-8 as one hex group "‹E6 97›".
std::string display_label(std::string_view bytes);

// The labels of a sequence of tokens (their bytes, and their labels one by one): the same, except
// in a token holding part of a character split across tokens, where that part shows as the whole
// character and then the bytes this token holds, "日‹E6 97›" and "日‹A5›" (see display_in_context).
std::vector<std::string> display_labels_in_context(const std::vector<std::string>& bytes,
                                                   const std::vector<std::string>& labels);

// `s` in double quotes for an error message: at most `max_bytes` of it (then "..."), control
// characters and bytes that are not UTF-8 written as \xNN, so the message stays one readable line.
std::string quote_for_message(std::string_view s, size_t max_bytes = 60);

}  // namespace hs::tokenizer_detail
