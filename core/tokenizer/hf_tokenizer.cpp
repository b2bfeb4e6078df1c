#include "core/tokenizer/hf_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <mutex>
#include <nlohmann/json.hpp>
#include <shared_mutex>
#include <unordered_map>

#include "core/error.h"
#include "core/tokenizer/bpe.h"
#include "core/tokenizer/byte_level.h"
#include "core/tokenizer/pretokenizer.h"
#include "core/tokenizer/unicode_nfc.h"
#include "core/tokenizer/vocabulary.h"

namespace hs {

using namespace tokenizer_detail;
using nlohmann::json;

namespace {

// ---------------------------------------------------------------- regexes

// \s as White_Space (PropList.txt), which is Oniguruma's \s for Unicode text; PCRE2's own \s under
// UCP adds U+180E.
constexpr std::string_view kWhiteSpaceRanges =
    R"(\x{09}-\x{0D}\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

// A tokenizer.json regex (Oniguruma syntax) in PCRE2's: the same except for \s and \S, which
// are spelled out as above.
std::string pcre2_pattern(std::string_view onig) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < onig.size(); ++i) {
    const char c = onig[i];
    if (c == '\\' && i + 1 < onig.size()) {
      const char e = onig[++i];
      if (e == 's') {
        out += in_class ? std::string(kWhiteSpaceRanges) : "[" + std::string(kWhiteSpaceRanges) + "]";
      } else if (e == 'S' && !in_class) {
        out += "[^" + std::string(kWhiteSpaceRanges) + "]";
      } else {
        out += c;
        out += e;
      }
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      if (i + 1 < onig.size() && onig[i + 1] == '^') out += onig[++i];
      if (i + 1 < onig.size() && onig[i + 1] == ']') out += onig[++i];  // a literal ] first in a class
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  if (pcre2_get_error_message(code, buffer, sizeof buffer) < 0) return "PCRE2 error " + std::to_string(code);
  return reinterpret_cast<const char*>(buffer);
}

// A compiled pattern, shared by all threads (each match gets its own match data).
class Regex {
 public:
  Regex(const std::string& pattern, const std::string& where) {
    int error = 0;
    PCRE2_SIZE offset = 0;
    const std::string translated = pcre2_pattern(pattern);
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(), PCRE2_UTF | PCRE2_UCP,
                          &error, &offset, nullptr);
    if (code_ == nullptr)
      throw Error(where + ": the regex " + quote_for_message(pattern) + " does not compile (" + pcre2_message(error) +
                  " at offset " + std::to_string(offset) + ").");
    jit_ = pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE) == 0;
  }
  ~Regex() { pcre2_code_free(code_); }
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Every match in `text` (valid UTF-8) as [begin, end) byte offsets, one after another like
  // Rust's find_iter: an empty match moves the search on by one character.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const {
    std::vector<std::pair<size_t, size_t>> found;
    pcre2_match_data* match = pcre2_match_data_create_from_pattern(code_, nullptr);
    if (match == nullptr) throw Error("out of memory while tokenizing (PCRE2 match data)");
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t offset = 0;
    while (offset <= text.size()) {
      int rc = jit_ ? pcre2_jit_match(code_, subject, text.size(), offset, PCRE2_NO_UTF_CHECK, match, nullptr)
                    : PCRE2_ERROR_JIT_BADOPTION;
      if (rc < 0 && rc != PCRE2_ERROR_NOMATCH)
        rc = pcre2_match(code_, subject, text.size(), offset, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, match, nullptr);
      if (rc == PCRE2_ERROR_NOMATCH) break;
      if (rc < 0) {
        pcre2_match_data_free(match);
        throw Error("internal error: a pre-tokenizer regex failed at byte " + std::to_string(offset) + " (" +
                    pcre2_message(rc) + ")");
      }
      const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match);
      found.emplace_back(ovector[0], ovector[1]);
      offset = ovector[1];
      if (ovector[1] == ovector[0]) {  // step over one character
        if (offset == text.size()) break;
        ++offset;
        while (offset < text.size() && (static_cast<uint8_t>(text[offset]) & 0xC0) == 0x80) ++offset;
      }
    }
    pcre2_match_data_free(match);
    return found;
  }

 private:
  pcre2_code* code_ = nullptr;
  bool jit_ = false;
};

// A Split pattern or Replace pattern: {"Regex": "..."} or {"String": "..."}.
struct Pattern {
  std::string literal;
  std::shared_ptr<const Regex> regex;

  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const {
    if (regex) return regex->find_all(text);
    std::vector<std::pair<size_t, size_t>> found;
    if (literal.empty()) return found;
    for (size_t at = text.find(literal); at != std::string_view::npos; at = text.find(literal, at + literal.size()))
      found.emplace_back(at, at + literal.size());
    return found;
  }
};

// ---------------------------------------------------------------- reading the file

struct Reader {
  const std::string& source;

  [[noreturn]] void fail(const std::string& what) const { throw Error(source + ": " + what); }

  const json& member(const json& object, const char* key, const std::string& where) const {
    if (!object.is_object() || !object.contains(key)) fail(where + " has no \"" + key + "\".");
    return object[key];
  }
  std::string string_of(const json& object, const char* key, const std::string& where) const {
    const json& v = member(object, key, where);
    if (!v.is_string()) fail(where + "." + key + " must be a string.");
    return v.get<std::string>();
  }
  std::optional<std::string> optional_string(const json& object, const char* key, const std::string& where) const {
    if (!object.is_object() || !object.contains(key) || object[key].is_null()) return std::nullopt;
    if (!object[key].is_string()) fail(where + "." + key + " must be a string or null.");
    return object[key].get<std::string>();
  }
  bool bool_of(const json& object, const char* key, bool fallback, const std::string& where) const {
    if (!object.is_object() || !object.contains(key) || object[key].is_null()) return fallback;
    if (!object[key].is_boolean()) fail(where + "." + key + " must be true or false.");
    return object[key].get<bool>();
  }
  std::string type_of(const json& object, const std::string& where) const {
    if (!object.is_object()) fail(where + " must be an object.");
    return string_of(object, "type", where);
  }
  Pattern pattern_of(const json& object, const std::string& where) const {
    const json& p = member(object, "pattern", where);
    if (p.is_object() && p.contains("String") && p["String"].is_string()) return Pattern{p["String"].get<std::string>(), nullptr};
    if (p.is_object() && p.contains("Regex") && p["Regex"].is_string())
      return Pattern{"", std::make_shared<const Regex>(p["Regex"].get<std::string>(), source + ": " + where)};
    fail(where + ".pattern must be {\"String\": ...} or {\"Regex\": ...}.");
  }
};

// ---------------------------------------------------------------- pipeline steps

struct NormalizerStep {
  enum class Kind { Nfc, Prepend, Replace } kind;
  std::string text;  // Prepend: what; Replace: the replacement
  Pattern pattern;   // Replace
};

enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };
enum class PrependScheme { First, Always, Never };

struct PreTokenizerStep {
  enum class Kind { Split, ByteLevel, Metaspace } kind;
  // Split
  Pattern pattern;
  SplitBehavior behavior = SplitBehavior::Isolated;
  bool invert = false;
  // ByteLevel
  bool add_prefix_space = false, use_regex = true;
  // Metaspace
  std::string replacement;
  PrependScheme prepend_scheme = PrependScheme::Always;
  bool split = true;
};

struct DecoderStep {
  enum class Kind { ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace } kind;
  std::string from, to;  // Replace (a String pattern) / Metaspace's replacement (from) and " " (to)
  std::string content;   // Strip: the character
  size_t start = 0, stop = 0;
  bool strips_first = false;  // Metaspace with a prepend scheme: the first token loses a leading space
};

struct AddedToken {
  int32_t id;
  std::string content;
  bool single_word, lstrip, rstrip, normalized;
};

// A piece of text on its way through the pipeline, or an added token already found.
struct Piece {
  std::string text;
  bool at_start;  // begins at offset 0 of the original text (Metaspace's "first" scheme)
  std::optional<int32_t> added;
};

SplitBehavior behavior_of(const std::string& name, const Reader& r, const std::string& where) {
  if (name == "Removed") return SplitBehavior::Removed;
  if (name == "Isolated") return SplitBehavior::Isolated;
  if (name == "MergedWithPrevious") return SplitBehavior::MergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::MergedWithNext;
  if (name == "Contiguous") return SplitBehavior::Contiguous;
  r.fail(where + ".behavior " + quote_for_message(name) +
         " is not one of Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous.");
}

void read_normalizer(const json& j, const Reader& r, const std::string& where, std::vector<NormalizerStep>& out) {
  const std::string type = r.type_of(j, where);
  if (type == "Sequence") {
    const json& list = r.member(j, "normalizers", where);
    if (!list.is_array()) r.fail(where + ".normalizers must be a list.");
    for (size_t i = 0; i < list.size(); ++i) read_normalizer(list[i], r, where + ".normalizers[" + std::to_string(i) + "]", out);
  } else if (type == "NFC") {
    out.push_back({NormalizerStep::Kind::Nfc, "", {}});
  } else if (type == "Prepend") {
    out.push_back({NormalizerStep::Kind::Prepend, r.string_of(j, "prepend", where), {}});
  } else if (type == "Replace") {
    out.push_back({NormalizerStep::Kind::Replace, r.string_of(j, "content", where), r.pattern_of(j, where)});
  } else {
    r.fail("the normalizer " + quote_for_message(type) + " (" + where +
           ") is not one HeadScope reads; it reads NFC, Prepend, Replace and a Sequence of them.");
  }
}

void read_pre_tokenizer(const json& j, const Reader& r, const std::string& where, std::vector<PreTokenizerStep>& out) {
  const std::string type = r.type_of(j, where);
  PreTokenizerStep step{};
  if (type == "Sequence") {
    const json& list = r.member(j, "pretokenizers", where);
    if (!list.is_array()) r.fail(where + ".pretokenizers must be a list.");
    for (size_t i = 0; i < list.size(); ++i)
      read_pre_tokenizer(list[i], r, where + ".pretokenizers[" + std::to_string(i) + "]", out);
    return;
  }
  if (type == "Split") {
    step.kind = PreTokenizerStep::Kind::Split;
    step.pattern = r.pattern_of(j, where);
    step.behavior = behavior_of(r.string_of(j, "behavior", where), r, where);
    step.invert = r.bool_of(j, "invert", false, where);
  } else if (type == "ByteLevel") {
    step.kind = PreTokenizerStep::Kind::ByteLevel;
    step.add_prefix_space = r.bool_of(j, "add_prefix_space", true, where);
    step.use_regex = r.bool_of(j, "use_regex", true, where);
  } else if (type == "Metaspace") {
    step.kind = PreTokenizerStep::Kind::Metaspace;
    step.replacement = r.string_of(j, "replacement", where);
    step.split = r.bool_of(j, "split", true, where);
    if (const auto scheme = r.optional_string(j, "prepend_scheme", where)) {
      if (*scheme == "first") step.prepend_scheme = PrependScheme::First;
      else if (*scheme == "always") step.prepend_scheme = PrependScheme::Always;
      else if (*scheme == "never") step.prepend_scheme = PrependScheme::Never;
      else r.fail(where + ".prepend_scheme " + quote_for_message(*scheme) + " is not one of first, always, never.");
    } else {  // files written before prepend_scheme existed
      step.prepend_scheme = r.bool_of(j, "add_prefix_space", true, where) ? PrependScheme::Always : PrependScheme::Never;
    }
  } else {
    r.fail("the pre_tokenizer " + quote_for_message(type) + " (" + where +
           ") is not one HeadScope reads; it reads Split, ByteLevel, Metaspace and a Sequence of them.");
  }
  out.push_back(std::move(step));
}

void read_decoder(const json& j, const Reader& r, const std::string& where, std::vector<DecoderStep>& out) {
  const std::string type = r.type_of(j, where);
  DecoderStep step{};
  if (type == "Sequence") {
    const json& list = r.member(j, "decoders", where);
    if (!list.is_array()) r.fail(where + ".decoders must be a list.");
    for (size_t i = 0; i < list.size(); ++i) read_decoder(list[i], r, where + ".decoders[" + std::to_string(i) + "]", out);
    return;
  }
  if (type == "ByteLevel") {
    step.kind = DecoderStep::Kind::ByteLevel;
  } else if (type == "Replace") {
    step.kind = DecoderStep::Kind::Replace;
    const Pattern p = r.pattern_of(j, where);
    if (p.regex) r.fail(where + ": a Replace decoder with a regex is not one HeadScope reads; it reads a String pattern.");
    step.from = p.literal;
    step.to = r.string_of(j, "content", where);
  } else if (type == "ByteFallback") {
    step.kind = DecoderStep::Kind::ByteFallback;
  } else if (type == "Fuse") {
    step.kind = DecoderStep::Kind::Fuse;
  } else if (type == "Strip") {
    step.kind = DecoderStep::Kind::Strip;
    step.content = r.string_of(j, "content", where);
    const json& start = r.member(j, "start", where);
    const json& stop = r.member(j, "stop", where);
    if (!start.is_number_unsigned() || !stop.is_number_unsigned()) r.fail(where + ".start and .stop must be counts.");
    step.start = start.get<size_t>();
    step.stop = stop.get<size_t>();
  } else if (type == "Metaspace") {
    step.kind = DecoderStep::Kind::Metaspace;
    step.from = r.string_of(j, "replacement", where);
    step.to = " ";
    const auto scheme = r.optional_string(j, "prepend_scheme", where);
    step.strips_first = scheme ? *scheme != "never" : r.bool_of(j, "add_prefix_space", true, where);
  } else {
    r.fail("the decoder " + quote_for_message(type) + " (" + where +
           ") is not one HeadScope reads; it reads ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace and a "
           "Sequence of them.");
  }
  out.push_back(std::move(step));
}

std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
  if (from.empty()) return std::string(s);
  std::string out;
  size_t at = 0;
  for (size_t hit; (hit = s.find(from, at)) != std::string_view::npos; at = hit + from.size()) out.append(s.substr(at, hit - at)).append(to);
  return out.append(s.substr(at));
}

// The byte a vocabulary spelling "<0xNN>" stands for (Hugging Face writes "<0x0A>"), or -1.
int byte_fallback_value(std::string_view s) {
  if (s.size() != 6 || s.substr(0, 3) != "<0x" || s[5] != '>') return -1;
  auto hex = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1; };
  const int hi = hex(s[3]), lo = hex(s[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

// Rust's char::is_whitespace is White_Space.
bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
         c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// The code point that ends / starts `s` (valid UTF-8, not empty).
char32_t last_char(std::string_view s) {
  size_t i = s.size() - 1;
  while (i > 0 && (static_cast<uint8_t>(s[i]) & 0xC0) == 0x80) --i;
  char32_t cp = 0;
  decode_utf8(s, i, cp);
  return cp;
}
char32_t first_char(std::string_view s) {
  char32_t cp = 0;
  decode_utf8(s, 0, cp);
  return cp;
}

// Hugging Face's single_word test: a word character is alphanumeric or '_'. Non-ASCII characters
// are taken as word characters unless they are whitespace (close to Rust's char::is_alphanumeric
// for letters and digits; punctuation outside ASCII counts as a word character here).
bool is_word_char(char32_t c) {
  if (c < 0x80) return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  return !is_white_space(c);
}

}  // namespace

// ---------------------------------------------------------------- the tokenizer

struct HfTokenizer::Impl {
  std::string source;
  bool byte_level = false;  // a ByteLevel pre-tokenizer: words are in GPT-2's byte alphabet
  std::vector<NormalizerStep> normalizer;
  std::vector<PreTokenizerStep> pre_tokenizer;
  std::vector<DecoderStep> decoder;

  // The BPE model.
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> vocab;
  MergeTable merges;
  std::optional<int32_t> unk_id;
  bool fuse_unk = false, byte_fallback = false, ignore_merges = false;
  std::array<int32_t, 256> byte_fallback_ids{};  // <0xNN> ids, or -1

  // Added tokens, longest first within each first byte, in two sets as Hugging Face matches them.
  std::vector<AddedToken> added;
  std::array<std::vector<size_t>, 256> raw_by_first_byte, normalized_by_first_byte;  // indices into `added`

  std::vector<std::string> spelling_of_id;  // [vocab_size] model or added spelling; "" for a gap
  std::vector<bool> is_added;               // [vocab_size]
  int32_t vocab_size = 0;

  // Pre-token word -> ids. The app encodes the whole prompt on every keystroke, and almost every
  // word of it was seen the time before.
  mutable std::shared_mutex cache_mutex;
  mutable std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> cache;
  static constexpr size_t kCacheLimit = 100'000;

  std::optional<int32_t> find(std::string_view s) const {
    const auto it = vocab.find(s);
    if (it == vocab.end()) return std::nullopt;
    return it->second;
  }

  std::vector<Piece> split_added(std::vector<Piece> pieces, bool normalized_set) const;
  std::string normalize(std::string s) const;
  std::vector<Piece> pre_tokenize(Piece piece) const;
  void bpe_word(std::string_view word, std::vector<int32_t>& out) const;
  std::string decode_tokens(std::vector<std::string> tokens, bool strip) const;
};

std::vector<Piece> HfTokenizer::Impl::split_added(std::vector<Piece> pieces, bool normalized_set) const {
  const auto& index = normalized_set ? normalized_by_first_byte : raw_by_first_byte;
  std::vector<Piece> out;
  for (Piece& piece : pieces) {
    if (piece.added) {
      out.push_back(std::move(piece));
      continue;
    }
    const std::string_view s = piece.text;
    size_t emitted = 0;  // s[emitted..] is not yet in `out`
    auto emit_text = [&](size_t end) {
      if (end > emitted) out.push_back(Piece{std::string(s.substr(emitted, end - emitted)), piece.at_start && emitted == 0, {}});
    };
    for (size_t at = 0; at < s.size();) {
      const AddedToken* hit = nullptr;
      for (const size_t k : index[static_cast<uint8_t>(s[at])]) {
        const AddedToken& t = added[k];
        if (s.compare(at, t.content.size(), t.content) != 0) continue;
        const size_t stop = at + t.content.size();
        if (t.single_word && ((at > 0 && is_word_char(last_char(s.substr(0, at)))) ||
                              (stop < s.size() && is_word_char(first_char(s.substr(stop))))))
          continue;
        hit = &t;
        break;  // longest first
      }
      if (hit == nullptr) {
        ++at;
        continue;
      }
      size_t start = at, stop = at + hit->content.size();
      if (hit->lstrip) {
        while (start > emitted) {
          size_t p = start - 1;
          while (p > emitted && (static_cast<uint8_t>(s[p]) & 0xC0) == 0x80) --p;
          char32_t cp = 0;
          decode_utf8(s, p, cp);
          if (!is_white_space(cp)) break;
          start = p;
        }
      }
      if (hit->rstrip) {
        while (stop < s.size()) {
          char32_t cp = 0;
          const size_t length = decode_utf8(s, stop, cp);
          if (!is_white_space(cp)) break;
          stop += length;
        }
      }
      emit_text(start);
      out.push_back(Piece{std::string(s.substr(start, stop - start)), piece.at_start && start == 0, hit->id});
      emitted = at = stop;
    }
    emit_text(s.size());
  }
  return out;
}

std::string HfTokenizer::Impl::normalize(std::string s) const {
  for (const NormalizerStep& step : normalizer) {
    switch (step.kind) {
      case NormalizerStep::Kind::Nfc:
        s = to_nfc(s);
        break;
      case NormalizerStep::Kind::Prepend:
        if (!s.empty()) s = step.text + s;
        break;
      case NormalizerStep::Kind::Replace: {
        std::string out;
        size_t at = 0;
        for (const auto& [b, e] : step.pattern.find_all(s)) {
          out.append(s, at, b - at).append(step.text);
          at = e;
        }
        out.append(s, at);
        s = std::move(out);
        break;
      }
    }
  }
  return s;
}

std::vector<Piece> HfTokenizer::Impl::pre_tokenize(Piece first) const {
  std::vector<Piece> pieces{std::move(first)};
  for (const PreTokenizerStep& step : pre_tokenizer) {
    std::vector<Piece> out;
    for (Piece& piece : pieces) {
      // Splits `piece` at `matches` (each flagged as a match or not) by `behavior`.
      auto split = [&](const std::string& text, const std::vector<std::pair<size_t, size_t>>& found, SplitBehavior behavior,
                       bool invert) {
        std::vector<std::pair<std::pair<size_t, size_t>, bool>> parts;  // ((begin, end), is_match)
        size_t at = 0;
        for (const auto& [b, e] : found) {
          if (b > at) parts.push_back({{at, b}, false});
          parts.push_back({{b, e}, true});
          at = e;
        }
        if (at < text.size()) parts.push_back({{at, text.size()}, false});
        if (invert)
          for (auto& p : parts) p.second = !p.second;
        std::vector<std::pair<size_t, size_t>> spans;
        switch (behavior) {
          case SplitBehavior::Isolated:
            for (const auto& p : parts) spans.push_back(p.first);
            break;
          case SplitBehavior::Removed:
            for (const auto& p : parts)
              if (!p.second) spans.push_back(p.first);
            break;
          case SplitBehavior::MergedWithPrevious: {
            bool previous_match = false;
            for (const auto& p : parts) {
              if (p.second && !previous_match && !spans.empty()) spans.back().second = p.first.second;
              else spans.push_back(p.first);
              previous_match = p.second;
            }
            break;
          }
          case SplitBehavior::MergedWithNext: {  // Hugging Face walks backwards here
            bool next_match = false;
            for (auto p = parts.rbegin(); p != parts.rend(); ++p) {
              if (p->second && !next_match && !spans.empty()) spans.back().first = p->first.first;
              else spans.push_back(p->first);
              next_match = p->second;
            }
            std::reverse(spans.begin(), spans.end());
            break;
          }
          case SplitBehavior::Contiguous: {
            bool previous_match = false;
            for (const auto& p : parts) {
              if (p.second == previous_match && !spans.empty()) spans.back().second = p.first.second;
              else spans.push_back(p.first);
              previous_match = p.second;
            }
            break;
          }
        }
        for (const auto& [b, e] : spans)
          if (e > b) out.push_back(Piece{text.substr(b, e - b), piece.at_start && b == 0, {}});
      };
      switch (step.kind) {
        case PreTokenizerStep::Kind::Split:
          split(piece.text, step.pattern.find_all(piece.text), step.behavior, step.invert);
          break;
        case PreTokenizerStep::Kind::ByteLevel: {
          std::string text = std::move(piece.text);
          if (step.add_prefix_space && (text.empty() || text.front() != ' ')) text.insert(text.begin(), ' ');
          std::vector<Piece> words;
          if (step.use_regex) {
            for (const std::string_view w : pretokenize(text)) words.push_back(Piece{std::string(w), false, {}});
          } else {
            words.push_back(Piece{std::move(text), false, {}});
          }
          for (Piece& w : words) {  // to GPT-2's printable byte alphabet
            std::string mapped;
            mapped.reserve(w.text.size() * 2);
            for (const char c : w.text) append_utf8(mapped, byte_to_codepoint()[static_cast<uint8_t>(c)]);
            if (!mapped.empty()) out.push_back(Piece{std::move(mapped), false, {}});
          }
          break;
        }
        case PreTokenizerStep::Kind::Metaspace: {
          std::string text = replace_all(piece.text, " ", step.replacement);
          const bool starts = text.compare(0, step.replacement.size(), step.replacement) == 0;
          if (!starts && (step.prepend_scheme == PrependScheme::Always ||
                          (step.prepend_scheme == PrependScheme::First && piece.at_start)))
            text = step.replacement + text;
          if (!step.split) {
            out.push_back(Piece{std::move(text), piece.at_start, {}});
          } else {
            Pattern p{step.replacement, nullptr};
            const auto found = p.find_all(text);
            split(text, found, SplitBehavior::MergedWithNext, false);
          }
          break;
        }
      }
    }
    pieces = std::move(out);
  }
  return pieces;
}

void HfTokenizer::Impl::bpe_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges) {
    if (const auto id = find(word)) {
      out.push_back(*id);
      return;
    }
  }
  {
    std::shared_lock lock(cache_mutex);
    if (const auto it = cache.find(word); it != cache.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> symbols;
  std::optional<int32_t> pending_unk;  // an unknown run not yet written, for fuse_unk
  for (size_t i = 0; i < word.size();) {
    char32_t cp = 0;
    size_t length = decode_utf8(word, i, cp);
    if (length == 0) length = 1;  // unreachable for valid UTF-8
    const std::string_view c = word.substr(i, length);
    i += length;
    if (const auto id = find(c)) {
      if (pending_unk) symbols.push_back(*pending_unk), pending_unk.reset();
      symbols.push_back(*id);
      continue;
    }
    if (byte_fallback) {
      bool all = true;
      for (const char b : c) all = all && byte_fallback_ids[static_cast<uint8_t>(b)] >= 0;
      if (all) {
        // As Hugging Face: the byte tokens go in before a pending unknown run is written.
        for (const char b : c) symbols.push_back(byte_fallback_ids[static_cast<uint8_t>(b)]);
        continue;
      }
    }
    if (!unk_id) continue;  // Hugging Face drops a character it cannot encode when there is no unk_token
    if (pending_unk && fuse_unk) continue;
    if (pending_unk) symbols.push_back(*pending_unk);
    pending_unk = unk_id;
  }
  if (pending_unk) symbols.push_back(*pending_unk);
  bpe_merge_hf(symbols, merges);
  out.insert(out.end(), symbols.begin(), symbols.end());
  std::unique_lock lock(cache_mutex);
  if (cache.size() >= kCacheLimit) cache.clear();
  cache.emplace(std::string(word), std::move(symbols));
}

std::string HfTokenizer::Impl::decode_tokens(std::vector<std::string> tokens, bool strip) const {
  for (const DecoderStep& step : decoder) {
    switch (step.kind) {
      case DecoderStep::Kind::ByteLevel:
        for (std::string& t : tokens) {
          std::string bytes;
          bool all = true;
          for (size_t i = 0; i < t.size() && all;) {
            char32_t cp = 0;
            const size_t length = decode_utf8(t, i, cp);
            const int b = length == 0 ? -1 : byte_of_codepoint(cp);
            if (b < 0) all = false;
            else bytes += static_cast<char>(b);
            i += length == 0 ? 1 : length;
          }
          // A token of other characters (an added token such as "<pad>") stands for its own bytes.
          if (all) t = std::move(bytes);
        }
        break;
      case DecoderStep::Kind::Replace:
        for (std::string& t : tokens) t = replace_all(t, step.from, step.to);
        break;
      case DecoderStep::Kind::ByteFallback:
        for (std::string& t : tokens)
          if (const int b = byte_fallback_value(t); b >= 0) t = std::string(1, static_cast<char>(b));
        break;
      case DecoderStep::Kind::Fuse: {
        std::string all;
        for (const std::string& t : tokens) all += t;
        tokens.assign(1, std::move(all));
        break;
      }
      case DecoderStep::Kind::Strip:
        if (!strip) break;
        for (std::string& t : tokens) {
          for (size_t k = 0; k < step.start && t.compare(0, step.content.size(), step.content) == 0 && !step.content.empty(); ++k)
            t.erase(0, step.content.size());
          for (size_t k = 0; k < step.stop && t.size() >= step.content.size() && !step.content.empty() &&
                             t.compare(t.size() - step.content.size(), step.content.size(), step.content) == 0;
               ++k)
            t.erase(t.size() - step.content.size());
        }
        break;
      case DecoderStep::Kind::Metaspace:
        for (size_t i = 0; i < tokens.size(); ++i) {
          tokens[i] = replace_all(tokens[i], step.from, step.to);
          if (strip && i == 0 && step.strips_first && !tokens[i].empty() && tokens[i].front() == ' ') tokens[i].erase(0, 1);
        }
        break;
    }
  }
  std::string text;
  for (const std::string& t : tokens) text += t;
  return text;
}

HfTokenizer::HfTokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HfTokenizer::HfTokenizer(HfTokenizer&&) noexcept = default;
HfTokenizer& HfTokenizer::operator=(HfTokenizer&&) noexcept = default;
HfTokenizer::~HfTokenizer() = default;

HfTokenizer HfTokenizer::from_json(const json& file, const std::string& source) {
  const Reader r{source};
  auto impl = std::make_unique<Impl>();
  impl->source = source;
  if (!file.is_object()) r.fail("expected a Hugging Face tokenizer.json (a JSON object with a \"model\").");
  const json& model = r.member(file, "model", "the file");
  if (!model.is_object()) r.fail("\"model\" must be an object.");
  const std::string model_type = model.contains("type") && model["type"].is_string() ? model["type"].get<std::string>() : "BPE";
  if (model_type != "BPE")
    r.fail("model.type " + quote_for_message(model_type) +
           " is not a tokenizer HeadScope reads; it reads BPE models (byte-level as in GPT-2, Llama 3 and Qwen2, or "
           "SentencePiece-style as in Llama 2).");
  if (model.contains("dropout") && !model["dropout"].is_null() &&
      !(model["dropout"].is_number() && model["dropout"].get<double>() == 0.0))
    r.fail("model.dropout is " + model["dropout"].dump() +
           "; BPE dropout picks merges at random, which HeadScope does not do. Set it to null.");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (const auto v = r.optional_string(model, key, "model"); v && !v->empty())
      r.fail(std::string("model.") + key + " is " + quote_for_message(*v) + "; HeadScope reads BPE models without one.");
  impl->fuse_unk = r.bool_of(model, "fuse_unk", false, "model");
  impl->byte_fallback = r.bool_of(model, "byte_fallback", false, "model");
  impl->ignore_merges = r.bool_of(model, "ignore_merges", false, "model");

  // The vocabulary.
  const json& vocab = r.member(model, "vocab", "model");
  if (!vocab.is_object()) r.fail("model.vocab must be an object mapping token strings to ids.");
  int32_t max_id = -1;
  for (const auto& [spelling, id] : vocab.items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > kMaxTokenId)
      r.fail("model.vocab: the id of " + quote_for_message(spelling) + " is " + id.dump().substr(0, 40) +
             "; expected an integer from 0 to " + std::to_string(kMaxTokenId) + ".");
    const auto value = static_cast<int32_t>(id.get<int64_t>());
    impl->vocab.emplace(spelling, value);
    max_id = std::max(max_id, value);
  }

  // Added tokens: ids of their own, or of the model vocabulary.
  if (file.contains("added_tokens") && !file["added_tokens"].is_null()) {
    const json& list = file["added_tokens"];
    if (!list.is_array()) r.fail("added_tokens must be a list.");
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string where = "added_tokens[" + std::to_string(i) + "]";
      const json& t = list[i];
      const json& id = r.member(t, "id", where);
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > kMaxTokenId)
        r.fail(where + ".id must be an integer from 0 to " + std::to_string(kMaxTokenId) + ".");
      AddedToken a{static_cast<int32_t>(id.get<int64_t>()), r.string_of(t, "content", where),
                   r.bool_of(t, "single_word", false, where), r.bool_of(t, "lstrip", false, where),
                   r.bool_of(t, "rstrip", false, where), r.bool_of(t, "normalized", !r.bool_of(t, "special", false, where), where)};
      if (a.content.empty()) r.fail(where + ".content is empty.");
      if (find_invalid_utf8(a.content)) r.fail(where + ".content is not valid UTF-8.");
      max_id = std::max(max_id, a.id);
      impl->added.push_back(std::move(a));
    }
  }
  if (max_id < 0) r.fail("model.vocab is empty.");
  impl->vocab_size = max_id + 1;
  impl->spelling_of_id.assign(static_cast<size_t>(impl->vocab_size), "");
  impl->is_added.assign(static_cast<size_t>(impl->vocab_size), false);
  for (const auto& [spelling, id] : impl->vocab) impl->spelling_of_id[id] = spelling;
  for (const AddedToken& a : impl->added) {
    impl->spelling_of_id[a.id] = a.content;
    impl->is_added[a.id] = true;
  }
  // Longest first, so that the first hit at a position is the longest (leftmost-longest).
  std::vector<size_t> order(impl->added.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return impl->added[a].content.size() > impl->added[b].content.size(); });
  for (const size_t k : order) {
    const AddedToken& a = impl->added[k];
    (a.normalized ? impl->normalized_by_first_byte : impl->raw_by_first_byte)[static_cast<uint8_t>(a.content[0])].push_back(k);
  }

  // unk_token and byte fallback.
  if (const auto unk = r.optional_string(model, "unk_token", "model")) {
    const auto id = impl->find(*unk);
    if (!id) r.fail("model.unk_token " + quote_for_message(*unk) + " is not in model.vocab.");
    impl->unk_id = id;
  }
  impl->byte_fallback_ids.fill(-1);
  if (impl->byte_fallback) {
    const char* hex = "0123456789ABCDEF";
    for (int b = 0; b < 256; ++b)
      if (const auto id = impl->find(std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">")) impl->byte_fallback_ids[b] = *id;
  }

  // Merges: "a b" (older files) or ["a", "b"]; every part and result must be in the vocabulary,
  // as Hugging Face requires.
  const json& merges = r.member(model, "merges", "model");
  if (!merges.is_array()) r.fail("model.merges must be a list.");
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const json& m = merges[rank];
    std::string left, right;
    if (m.is_string()) {
      const std::string line = m.get<std::string>();
      const size_t space = line.find(' ');
      if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos)
        r.fail("model.merges[" + std::to_string(rank) + "] " + quote_for_message(line) +
               " is not two tokens separated by one space.");
      left = line.substr(0, space);
      right = line.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
    } else {
      r.fail("model.merges[" + std::to_string(rank) + "] is neither \"a b\" nor [\"a\", \"b\"].");
    }
    const auto a = impl->find(left), b = impl->find(right), ab = impl->find(left + right);
    if (!a || !b || !ab)
      r.fail("model.merges[" + std::to_string(rank) + "] (" + quote_for_message(left) + ", " + quote_for_message(right) +
             "): " + quote_for_message(!a ? left : !b ? right : left + right) +
             " is not in model.vocab; the merges and the vocabulary belong to different tokenizers.");
    if (rank > static_cast<size_t>(kMaxTokenId)) r.fail("model.merges is longer than HeadScope accepts.");
    impl->merges.insert_or_assign(*a, *b, Merge{static_cast<int32_t>(rank), *ab});
  }

  // The pipeline.
  if (file.contains("normalizer") && !file["normalizer"].is_null())
    read_normalizer(file["normalizer"], r, "normalizer", impl->normalizer);
  if (file.contains("pre_tokenizer") && !file["pre_tokenizer"].is_null())
    read_pre_tokenizer(file["pre_tokenizer"], r, "pre_tokenizer", impl->pre_tokenizer);
  if (file.contains("decoder") && !file["decoder"].is_null()) read_decoder(file["decoder"], r, "decoder", impl->decoder);
  impl->byte_level = std::any_of(impl->pre_tokenizer.begin(), impl->pre_tokenizer.end(),
                                 [](const PreTokenizerStep& s) { return s.kind == PreTokenizerStep::Kind::ByteLevel; });

  HfTokenizer tokenizer(std::move(impl));

  // BOS from the post-processor's template for a single text.
  std::vector<const json*> processors;
  if (file.contains("post_processor") && file["post_processor"].is_object()) {
    const json& p = file["post_processor"];
    if (p.value("type", "") == "Sequence" && p.contains("processors") && p["processors"].is_array())
      for (const json& q : p["processors"]) processors.push_back(&q);
    else processors.push_back(&p);
  }
  for (const json* p : processors) {
    if (!p->is_object() || p->value("type", "") != "TemplateProcessing") continue;
    const json& single = (*p).contains("single") ? (*p)["single"] : json();
    if (!single.is_array() || single.empty() || !single[0].is_object()) continue;
    if (single[0].contains("Sequence")) {
      tokenizer.adds_bos_ = false;
    } else if (single[0].contains("SpecialToken") && single[0]["SpecialToken"].is_object()) {
      const json& special = single[0]["SpecialToken"];
      const std::string name = special.value("id", "");
      std::optional<int32_t> id;
      if ((*p).contains("special_tokens") && (*p)["special_tokens"].contains(name)) {
        const json& ids = (*p)["special_tokens"][name].value("ids", json::array());
        if (ids.is_array() && ids.size() == 1 && ids[0].is_number_integer()) id = ids[0].get<int32_t>();
      }
      if (!id) id = tokenizer.id_of(name);
      tokenizer.adds_bos_ = true;
      if (id && *id >= 0 && *id < tokenizer.vocab_size()) tokenizer.bos_token_id_ = id;
    }
  }
  return tokenizer;
}

std::vector<int32_t> HfTokenizer::encode(std::string_view text) const {
  require_utf8_text(text);
  const Impl& t = *impl_;
  std::vector<int32_t> ids;
  if (text.empty()) return ids;
  std::vector<Piece> pieces = t.split_added({Piece{std::string(text), true, {}}}, false);
  for (Piece& p : pieces)
    if (!p.added) p.text = t.normalize(std::move(p.text));
  pieces = t.split_added(std::move(pieces), true);
  for (Piece& p : pieces) {
    if (p.added) {
      ids.push_back(*p.added);
      continue;
    }
    for (const Piece& word : t.pre_tokenize(std::move(p))) t.bpe_word(word.text, ids);
  }
  return ids;
}

std::string HfTokenizer::decode(std::span<const int32_t> ids) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (const int32_t id : ids) {
    if (id < 0 || id >= impl_->vocab_size || (impl_->spelling_of_id[id].empty() && !impl_->is_added[id]))
      throw Error("token id " + std::to_string(id) + " is not in the vocabulary (ids 0 to " +
                  std::to_string(impl_->vocab_size - 1) + ").");
    tokens.push_back(impl_->spelling_of_id[id]);
  }
  return impl_->decode_tokens(std::move(tokens), true);
}

std::string HfTokenizer::token_bytes(int32_t id) const {
  const int32_t one[] = {id};
  if (id < 0 || id >= impl_->vocab_size) return decode(one);  // throws
  return impl_->decode_tokens({impl_->spelling_of_id[id]}, false);
}

std::string HfTokenizer::kind() const {
  return impl_->byte_level ? "byte-level BPE (tokenizer.json)" : "SentencePiece-style BPE (tokenizer.json)";
}

int32_t HfTokenizer::vocab_size() const { return impl_->vocab_size; }

std::optional<int32_t> HfTokenizer::end_of_text_id() const {
  for (const char* name : {"<|endoftext|>", "<|end_of_text|>", "</s>"})
    if (const auto id = id_of(name)) return id;
  return std::nullopt;
}

std::optional<int32_t> HfTokenizer::id_of(std::string_view vocab_string) const {
  for (const AddedToken& a : impl_->added)
    if (a.content == vocab_string) return a.id;
  return impl_->find(vocab_string);
}

}  // namespace hs
