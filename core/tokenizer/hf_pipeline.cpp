#include "core/tokenizer/hf_pipeline.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>

#include "core/tokenizer/byte_level.h"
#include "core/tokenizer/pretokenizer.h"
#include "core/tokenizer/unicode_nfc.h"

namespace hs::tokenizer_detail {

using nlohmann::json;

namespace {

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

// The byte a vocabulary spelling "<0xNN>" stands for (Hugging Face writes "<0x0A>"), or -1.
int byte_fallback_value(std::string_view s) {
  if (s.size() != 6 || s.substr(0, 3) != "<0x" || s[5] != '>') return -1;
  auto hex = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1; };
  const int hi = hex(s[3]), lo = hex(s[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

SplitBehavior behavior_of(const std::string& name, const JsonReader& r, const std::string& where) {
  if (name == "Removed") return SplitBehavior::Removed;
  if (name == "Isolated") return SplitBehavior::Isolated;
  if (name == "MergedWithPrevious") return SplitBehavior::MergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::MergedWithNext;
  if (name == "Contiguous") return SplitBehavior::Contiguous;
  r.fail(where + ".behavior " + quote_for_message(name) +
         " is not one of Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous.");
}

}  // namespace

Regex::Regex(const std::string& pattern, const std::string& where) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  const std::string translated = pcre2_pattern(pattern);
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(), PCRE2_UTF | PCRE2_UCP, &error,
                        &offset, nullptr);
  if (code_ == nullptr)
    throw Error(where + ": the regex " + quote_for_message(pattern) + " does not compile (" + pcre2_message(error) +
                " at offset " + std::to_string(offset) + ").");
  jit_ = pcre2_jit_compile(static_cast<pcre2_code*>(code_), PCRE2_JIT_COMPLETE) == 0;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

std::vector<std::pair<size_t, size_t>> Regex::find_all(std::string_view text) const {
  auto* code = static_cast<pcre2_code*>(code_);
  std::vector<std::pair<size_t, size_t>> found;
  pcre2_match_data* match = pcre2_match_data_create_from_pattern(code, nullptr);
  if (match == nullptr) throw Error("out of memory while tokenizing (PCRE2 match data)");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t offset = 0;
  while (offset <= text.size()) {
    int rc = jit_ ? pcre2_jit_match(code, subject, text.size(), offset, PCRE2_NO_UTF_CHECK, match, nullptr)
                  : PCRE2_ERROR_JIT_BADOPTION;
    // No JIT, or its stack ran out on a long run: the interpreter has no such limit.
    if (rc < 0 && rc != PCRE2_ERROR_NOMATCH)
      rc = pcre2_match(code, subject, text.size(), offset, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, match, nullptr);
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

std::vector<std::pair<size_t, size_t>> Pattern::find_all(std::string_view text) const {
  if (regex) return regex->find_all(text);
  std::vector<std::pair<size_t, size_t>> found;
  if (literal.empty()) return found;
  for (size_t at = text.find(literal); at != std::string_view::npos; at = text.find(literal, at + literal.size()))
    found.emplace_back(at, at + literal.size());
  return found;
}

const json& JsonReader::member(const json& object, const char* key, const std::string& where) const {
  if (!object.is_object() || !object.contains(key)) fail(where + " has no \"" + key + "\".");
  return object[key];
}
std::string JsonReader::string_of(const json& object, const char* key, const std::string& where) const {
  const json& v = member(object, key, where);
  if (!v.is_string()) fail(where + "." + key + " must be a string.");
  return v.get<std::string>();
}
std::optional<std::string> JsonReader::optional_string(const json& object, const char* key, const std::string& where) const {
  if (!object.is_object() || !object.contains(key) || object[key].is_null()) return std::nullopt;
  if (!object[key].is_string()) fail(where + "." + key + " must be a string or null.");
  return object[key].get<std::string>();
}
bool JsonReader::bool_of(const json& object, const char* key, bool fallback, const std::string& where) const {
  if (!object.is_object() || !object.contains(key) || object[key].is_null()) return fallback;
  if (!object[key].is_boolean()) fail(where + "." + key + " must be true or false.");
  return object[key].get<bool>();
}
std::string JsonReader::type_of(const json& object, const std::string& where) const {
  if (!object.is_object()) fail(where + " must be an object.");
  return string_of(object, "type", where);
}
Pattern JsonReader::pattern_of(const json& object, const std::string& where) const {
  const json& p = member(object, "pattern", where);
  if (p.is_object() && p.contains("String") && p["String"].is_string()) return Pattern{p["String"].get<std::string>(), nullptr};
  if (p.is_object() && p.contains("Regex") && p["Regex"].is_string())
    return Pattern{"", std::make_shared<const Regex>(p["Regex"].get<std::string>(), source + ": " + where)};
  fail(where + ".pattern must be {\"String\": ...} or {\"Regex\": ...}.");
}

void read_normalizer(const json& j, const JsonReader& r, const std::string& where, std::vector<NormalizerStep>& out) {
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

void read_pre_tokenizer(const json& j, const JsonReader& r, const std::string& where, std::vector<PreTokenizerStep>& out) {
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
  } else if (type == "Digits") {
    // Hugging Face splits at every char::is_numeric character (\p{N}): each one alone, or runs.
    step.kind = PreTokenizerStep::Kind::Split;
    step.pattern = Pattern{"", std::make_shared<const Regex>("\\p{N}", r.source + ": " + where)};
    step.behavior = r.bool_of(j, "individual_digits", false, where) ? SplitBehavior::Isolated : SplitBehavior::Contiguous;
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
           ") is not one HeadScope reads; it reads Split, Digits, ByteLevel, Metaspace and a Sequence of them.");
  }
  out.push_back(std::move(step));
}

void read_decoder(const json& j, const JsonReader& r, const std::string& where, std::vector<DecoderStep>& out) {
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

std::string normalize(const std::vector<NormalizerStep>& normalizer, std::string s) {
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

std::vector<Piece> pre_tokenize(const std::vector<PreTokenizerStep>& pre_tokenizer, Piece first) {
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

std::string decode_tokens(const std::vector<DecoderStep>& decoder, std::vector<std::string> tokens, bool strip) {
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

}  // namespace hs::tokenizer_detail
