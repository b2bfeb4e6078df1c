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

#include "core/tokenizer/tokenizer.h"

namespace hs {

class ByteLevelBpeTokenizer final : public Tokenizer {
 public:
  // Reads both files; throws hs::Error naming the file, the line or entry, what was expected and
  // what was found (e.g. a merge whose parts are not in the vocabulary, a duplicate id).
  static ByteLevelBpeTokenizer load(const std::filesystem::path& vocab_json, const std::filesystem::path& merges_txt);
  // Same, from the files' contents; `source` names them in messages (used by tests and fuzzers,
  // and for tokenizer.json, whose BPE model holds the same two tables).
  static ByteLevelBpeTokenizer from_strings(std::string_view vocab_json, std::string_view merges_txt,
                                            const std::string& source = "tokenizer");

  ByteLevelBpeTokenizer(ByteLevelBpeTokenizer&&) noexcept;
  ByteLevelBpeTokenizer& operator=(ByteLevelBpeTokenizer&&) noexcept;
  ~ByteLevelBpeTokenizer() override;

  std::string kind() const override;
  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(std::span<const int32_t> ids) const override;
  std::string token_bytes(int32_t id) const override;
  int32_t vocab_size() const override;
  std::optional<int32_t> end_of_text_id() const override;
  // In the vocab.json spelling (a space is "Ġ").
  std::optional<int32_t> id_of(std::string_view vocab_string) const override;

 private:
  struct Impl;
  explicit ByteLevelBpeTokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace hs
