#include "core/io/base64.h"

#include "core/error.h"

namespace hs {

namespace {
constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int sextet(unsigned char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}
}  // namespace

std::string base64_encode(const void* data, size_t bytes) {
  const auto* p = static_cast<const uint8_t*>(data);
  std::string out;
  out.reserve((bytes + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= bytes; i += 3) {
    const uint32_t v = (uint32_t{p[i]} << 16) | (uint32_t{p[i + 1]} << 8) | p[i + 2];
    for (int s = 18; s >= 0; s -= 6) out.push_back(kAlphabet[(v >> s) & 63]);
  }
  if (i < bytes) {
    const uint32_t v = (uint32_t{p[i]} << 16) | (i + 1 < bytes ? uint32_t{p[i + 1]} << 8 : 0);
    out.push_back(kAlphabet[(v >> 18) & 63]);
    out.push_back(kAlphabet[(v >> 12) & 63]);
    out.push_back(i + 1 < bytes ? kAlphabet[(v >> 6) & 63] : '=');
    out.push_back('=');
  }
  return out;
}

int64_t base64_decoded_size(std::string_view text) {
  if (text.size() % 4 != 0) return -1;
  if (text.empty()) return 0;
  int64_t n = static_cast<int64_t>(text.size() / 4 * 3);
  if (text.back() == '=') --n;
  if (text.size() >= 2 && text[text.size() - 2] == '=') --n;
  return n;
}

std::vector<uint8_t> base64_decode(std::string_view text, const std::string& what) {
  const int64_t size = base64_decoded_size(text);
  if (size < 0) throw Error(what + " is not base64: its length " + std::to_string(text.size()) + " is not a multiple of 4");
  std::vector<uint8_t> out;
  out.reserve(static_cast<size_t>(size));
  for (size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    int s[4];
    for (int k = 0; k < 4; ++k) {
      const unsigned char c = static_cast<unsigned char>(text[i + static_cast<size_t>(k)]);
      s[k] = sextet(c);
      // '=' only as the last one or two characters of the text.
      if (s[k] < 0 && !(c == '=' && last && k >= 2 && (k == 3 || text[i + 3] == '=')))
        throw Error(what + " is not base64: character " + std::to_string(i + static_cast<size_t>(k)) + " is not in its alphabet");
    }
    const uint32_t v = (static_cast<uint32_t>(s[0]) << 18) | (static_cast<uint32_t>(s[1]) << 12) |
                       (static_cast<uint32_t>(s[2] < 0 ? 0 : s[2]) << 6) | static_cast<uint32_t>(s[3] < 0 ? 0 : s[3]);
    out.push_back(static_cast<uint8_t>(v >> 16));
    if (s[2] >= 0) out.push_back(static_cast<uint8_t>(v >> 8));
    if (s[3] >= 0) out.push_back(static_cast<uint8_t>(v));
  }
  return out;
}

}  // namespace hs
