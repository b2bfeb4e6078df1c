#include "core/tokenizer/byte_level.h"

#include "core/error.h"

#include <algorithm>

namespace hs::tokenizer_detail {

namespace {

std::array<char32_t, 256> make_byte_table() {
  std::array<char32_t, 256> table{};
  char32_t next_unprintable = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    table[b] = printable ? static_cast<char32_t>(b) : next_unprintable++;
  }
  return table;
}

// The table's characters all lie below U+0144, so the inverse is a small array.
constexpr char32_t kInverseSize = 0x200;

std::array<int16_t, kInverseSize> make_inverse_table() {
  std::array<int16_t, kInverseSize> inverse;
  inverse.fill(-1);
  const auto& table = byte_to_codepoint();
  for (int b = 0; b < 256; ++b) inverse[table[b]] = static_cast<int16_t>(b);
  return inverse;
}

const char kHex[] = "0123456789abcdef";
const char kHexUpper[] = "0123456789ABCDEF";

bool is_continuation(uint8_t b) { return (b & 0xC0) == 0x80; }

}  // namespace

const std::array<char32_t, 256>& byte_to_codepoint() {
  static const std::array<char32_t, 256> table = make_byte_table();
  return table;
}

int byte_of_codepoint(char32_t cp) {
  static const std::array<int16_t, kInverseSize> inverse = make_inverse_table();
  return cp < kInverseSize ? inverse[cp] : -1;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::optional<Utf8Problem> find_invalid_utf8(std::string_view text) {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const uint8_t b = s[i];
    if (b < 0x80) {
      ++i;
      continue;
    }
    // Lead byte: how many continuation bytes follow, and the allowed range of the first one
    // (Table 3-7 narrows it after E0, ED, F0 and F4).
    size_t length = 0;
    uint8_t lo = 0x80, hi = 0xBF;
    if (b < 0xC0) return Utf8Problem{i, b, "a continuation byte with no lead byte before it"};
    if (b < 0xC2) return Utf8Problem{i, b, "an overlong (non-shortest) encoding starts here"};
    if (b < 0xE0) {
      length = 2;
    } else if (b < 0xF0) {
      length = 3;
      if (b == 0xE0) lo = 0xA0;
      if (b == 0xED) hi = 0x9F;
    } else if (b < 0xF5) {
      length = 4;
      if (b == 0xF0) lo = 0x90;
      if (b == 0xF4) hi = 0x8F;
    } else {
      return Utf8Problem{i, b, "this byte never occurs in UTF-8"};
    }
    if (i + 1 >= n) return Utf8Problem{i, b, "the text ends inside the sequence that starts here"};
    const uint8_t second = s[i + 1];
    if (second < lo || second > hi) {
      if (!is_continuation(second)) return Utf8Problem{i, b, "the sequence that starts here is cut short"};
      if (b == 0xED) return Utf8Problem{i, b, "an encoded UTF-16 surrogate (U+D800..U+DFFF) starts here"};
      if (b == 0xF4) return Utf8Problem{i, b, "a value above U+10FFFF starts here"};
      return Utf8Problem{i, b, "an overlong (non-shortest) encoding starts here"};
    }
    for (size_t k = 2; k < length; ++k) {
      if (i + k >= n) return Utf8Problem{i, b, "the text ends inside the sequence that starts here"};
      if (!is_continuation(s[i + k])) return Utf8Problem{i, b, "the sequence that starts here is cut short"};
    }
    i += length;
  }
  return std::nullopt;
}

size_t decode_utf8(std::string_view text, size_t pos, char32_t& cp) {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  const uint8_t b = s[pos];
  if (b < 0x80) {
    cp = b;
    return 1;
  }
  size_t length = 0;
  uint8_t lo = 0x80, hi = 0xBF;
  char32_t value = 0;
  if (b < 0xC2) return 0;
  if (b < 0xE0) {
    length = 2;
    value = b & 0x1F;
  } else if (b < 0xF0) {
    length = 3;
    value = b & 0x0F;
    if (b == 0xE0) lo = 0xA0;
    if (b == 0xED) hi = 0x9F;
  } else if (b < 0xF5) {
    length = 4;
    value = b & 0x07;
    if (b == 0xF0) lo = 0x90;
    if (b == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (pos + length > n) return 0;
  if (s[pos + 1] < lo || s[pos + 1] > hi) return 0;
  for (size_t k = 1; k < length; ++k) {
    if (!is_continuation(s[pos + k])) return 0;
    value = (value << 6) | (s[pos + k] & 0x3F);
  }
  cp = value;
  return length;
}

void require_utf8_text(std::string_view text) {
  if (const auto problem = find_invalid_utf8(text)) {
    const char* digits = "0123456789abcdef";
    throw Error("text is not valid UTF-8 at byte " + std::to_string(problem->offset) + " (0x" + digits[problem->byte >> 4] +
                digits[problem->byte & 0xF] + "); HeadScope reads text as UTF-8 (" + problem->reason + ").");
  }
}

namespace {

// "‹E6 97›": bytes that are not (complete, printable) UTF-8, as one group in hex.
void append_byte_group(std::string& label, std::string_view bytes) {
  label += "\u2039";  // ‹
  for (size_t k = 0; k < bytes.size(); ++k) {
    const auto b = static_cast<uint8_t>(bytes[k]);
    if (k > 0) label += ' ';
    label += kHexUpper[b >> 4];
    label += kHexUpper[b & 0xF];
  }
  label += "\u203A";  // ›
}

}  // namespace

std::string display_label(std::string_view bytes) {
  std::string label;
  label.reserve(bytes.size() + 8);
  std::string stray;  // bytes waiting to be shown as one ‹..› group
  auto flush = [&] {
    if (!stray.empty()) append_byte_group(label, stray);
    stray.clear();
  };
  size_t i = 0;
  while (i < bytes.size()) {
    char32_t cp = 0;
    const size_t length = decode_utf8(bytes, i, cp);
    if (length == 0) {  // a byte of a character split across tokens, or not UTF-8 at all
      stray += bytes[i];
      ++i;
      continue;
    }
    if (cp < 0x20 && cp != ' ' && cp != '\n' && cp != '\t' && cp != '\r') {  // C0 controls, DEL and C1 too
      stray.append(bytes.substr(i, length));
      i += length;
      continue;
    }
    if (cp >= 0x7F && cp <= 0x9F) {
      stray.append(bytes.substr(i, length));
      i += length;
      continue;
    }
    flush();
    if (cp == ' ') {
      label += "\u2423";  // ␣
    } else if (cp == '\n') {
      label += "\u21B5";  // ↵
    } else if (cp == '\t') {
      label += "\u21E5";  // ⇥
    } else if (cp == '\r') {
      label += "\u240D";  // ␍
    } else {
      label.append(bytes.substr(i, length));
    }
    i += length;
  }
  flush();
  return label;
}

std::vector<std::string> display_labels_in_context(const std::vector<std::string>& bytes,
                                                   const std::vector<std::string>& labels) {
  std::vector<std::string> out = labels;
  // The whole text, and where each token starts in it.
  std::string text;
  std::vector<size_t> start(bytes.size() + 1, 0);
  for (size_t t = 0; t < bytes.size(); ++t) {
    start[t] = text.size();
    text += bytes[t];
  }
  start[bytes.size()] = text.size();
  // Per token, the parts of split characters it holds: (offset in the token, length, character).
  struct Part {
    size_t offset, length;
    char32_t cp;
  };
  std::vector<std::vector<Part>> parts(bytes.size());
  size_t token = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    while (token + 1 < bytes.size() && start[token + 1] <= pos) ++token;
    char32_t cp = 0;
    const size_t length = decode_utf8(text, pos, cp);
    if (length == 0) {
      ++pos;
      continue;
    }
    const size_t end = pos + length;
    // Split across tokens, and printable (a split C1 control stays hex).
    if (end > start[token + 1] && cp > 0x9F) {
      for (size_t t = token; t < bytes.size() && start[t] < end; ++t) {
        const size_t from = std::max(pos, start[t]), to = std::min(end, start[t + 1]);
        if (to > from) parts[t].push_back({from - start[t], to - from, cp});
      }
    }
    pos = end;
  }
  for (size_t t = 0; t < bytes.size(); ++t) {
    if (parts[t].empty()) continue;
    const std::string_view b = bytes[t];
    std::string label;
    size_t at = 0;
    for (const Part& part : parts[t]) {
      label += display_label(b.substr(at, part.offset - at));
      append_utf8(label, part.cp);
      append_byte_group(label, b.substr(part.offset, part.length));
      at = part.offset + part.length;
    }
    label += display_label(b.substr(at));
    out[t] = std::move(label);
  }
  return out;
}

std::string quote_for_message(std::string_view s, size_t max_bytes) {
  std::string out = "\"";
  size_t i = 0;
  while (i < s.size()) {
    if (i >= max_bytes) {
      out += "...";
      break;
    }
    char32_t cp = 0;
    const size_t length = decode_utf8(s, i, cp);
    if (length == 0 || cp < 0x20 || cp == 0x7F || cp == '"' || cp == '\\') {
      const auto b = static_cast<uint8_t>(s[i]);
      if (cp == '"' && length == 1) {
        out += "\\\"";
      } else if (cp == '\\' && length == 1) {
        out += "\\\\";
      } else {
        out += "\\x";
        out += kHex[b >> 4];
        out += kHex[b & 0xF];
      }
      ++i;
      continue;
    }
    out.append(s.substr(i, length));
    i += length;
  }
  out += '"';
  return out;
}

}  // namespace hs::tokenizer_detail
