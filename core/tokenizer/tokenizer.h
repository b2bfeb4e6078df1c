// GPT-2 byte-level BPE, read from a Hugging Face `vocab.json` + `merges.txt` pair.
//
// encode() follows Hugging Face's GPT2Tokenizer exactly: the text is split at occurrences of the
// special token `<|endoftext|>` (each becomes its id), every other piece is pre-tokenized with
// GPT-2's regex (real Unicode letter/number classes, via PCRE2), each pre-token's UTF-8 bytes are
// mapped through GPT-2's bytes_to_unicode table and merged by rank. encode() never adds BOS.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace hs {

class Tokenizer {
 public:
  // Reads both files; throws hs::Error naming the file, the line or entry, what was expected and
  // what was found (e.g. a merge whose parts are not in the vocabulary, a duplicate id).
  static Tokenizer load(const std::filesystem::path& vocab_json, const std::filesystem::path& merges_txt);
  // Same, from the files' contents; `source` names them in messages (used by tests and fuzzers).
  static Tokenizer from_strings(std::string_view vocab_json, std::string_view merges_txt,
                                const std::string& source = "tokenizer");

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Throws hs::Error when `text` is not valid UTF-8 (the message gives the byte offset).
  std::vector<int32_t> encode(std::string_view text) const;
  // The raw bytes the ids stand for, concatenated (may be invalid UTF-8 mid-character).
  std::string decode(std::span<const int32_t> ids) const;
  // The bytes of one token. Throws hs::Error for an id outside the vocabulary.
  std::string token_bytes(int32_t id) const;
  // A short label for views: valid UTF-8 always; a space is shown as "␣", a newline as "↵",
  // a tab as "⇥", a carriage return as "␍", other control bytes and bytes that are not complete
  // UTF-8 as "<0xNN>".
  std::string display(int32_t id) const;

  // Number of ids (max id + 1).
  int32_t vocab_size() const;
  // The id of `<|endoftext|>`, when the vocabulary has it.
  std::optional<int32_t> end_of_text_id() const;
  // The id of an exact vocabulary string (in the vocab.json spelling), when present.
  std::optional<int32_t> id_of(std::string_view vocab_string) const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace hs
