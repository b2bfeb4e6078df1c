// The parts of a tokenizer.json around its BPE model: normalizers, pre-tokenizers and decoders,
// read from the file and applied as Hugging Face's tokenizers applies them. Private to
// core/tokenizer (hf_tokenizer.cpp uses it; tests may include it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/error.h"

namespace hs::tokenizer_detail {

// A regex of a tokenizer.json (Oniguruma syntax, run with PCRE2 in UTF mode with Unicode
// properties; \s and \S mean White_Space as in Oniguruma). Compiled once, shared by threads.
class Regex {
 public:
  // Throws hs::Error, prefixed with `where`, when the pattern does not compile.
  Regex(const std::string& pattern, const std::string& where);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
  // Every match in `text` (valid UTF-8) as [begin, end) byte offsets, one after another like
  // Rust's find_iter: an empty match moves the search on by one character.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;

 private:
  void* code_ = nullptr;  // pcre2_code*, kept out of this header
  bool jit_ = false;
};

// A Split or Replace pattern: {"Regex": "..."} or {"String": "..."}.
struct Pattern {
  std::string literal;
  std::shared_ptr<const Regex> regex;
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;
};

// Reads members of the file's JSON; every failure is an hs::Error that names the file and the
// member.
struct JsonReader {
  const std::string& source;

  [[noreturn]] void fail(const std::string& what) const { throw Error(source + ": " + what); }
  const nlohmann::json& member(const nlohmann::json& object, const char* key, const std::string& where) const;
  std::string string_of(const nlohmann::json& object, const char* key, const std::string& where) const;
  std::optional<std::string> optional_string(const nlohmann::json& object, const char* key, const std::string& where) const;
  bool bool_of(const nlohmann::json& object, const char* key, bool fallback, const std::string& where) const;
  std::string type_of(const nlohmann::json& object, const std::string& where) const;
  Pattern pattern_of(const nlohmann::json& object, const std::string& where) const;
};

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

// A piece of text on its way through the pipeline, or an added token already found.
struct Piece {
  std::string text;
  bool at_start;  // begins at offset 0 of the original text (Metaspace's "first" scheme)
  std::optional<int32_t> added;
};

// Each reads one part of the file (a Sequence is flattened into the list). `where` is the part's
// path for messages, e.g. "pre_tokenizer.pretokenizers[1]"; a type HeadScope does not implement
// is refused by name.
void read_normalizer(const nlohmann::json& j, const JsonReader& r, const std::string& where, std::vector<NormalizerStep>& out);
void read_pre_tokenizer(const nlohmann::json& j, const JsonReader& r, const std::string& where,
                        std::vector<PreTokenizerStep>& out);
void read_decoder(const nlohmann::json& j, const JsonReader& r, const std::string& where, std::vector<DecoderStep>& out);

// The normalized text of one piece.
std::string normalize(const std::vector<NormalizerStep>& steps, std::string s);
// The words of one piece (empty words dropped), each already in the model's alphabet.
std::vector<Piece> pre_tokenize(const std::vector<PreTokenizerStep>& steps, Piece piece);
// The decoder on a list of token strings; `strip` off leaves out the steps that strip spaces at
// the ends (for one token shown alone).
std::string decode_tokens(const std::vector<DecoderStep>& steps, std::vector<std::string> tokens, bool strip);

std::string replace_all(std::string_view s, std::string_view from, std::string_view to);

}  // namespace hs::tokenizer_detail
