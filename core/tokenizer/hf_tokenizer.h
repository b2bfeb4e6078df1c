// A Hugging Face fast-tokenizer file (`tokenizer.json`) with a BPE model, read the way Hugging
// Face's `tokenizers` library runs it:
//
//   text -> added tokens that are not `normalized` split out (leftmost, longest first; with their
//           single_word / lstrip / rstrip rules)
//        -> normalizer on each remaining piece (Sequence of NFC, Prepend, Replace)
//        -> added tokens that are `normalized` split out
//        -> pre-tokenizer (Sequence of Split with a regex or string, ByteLevel, Metaspace)
//        -> BPE model on each word (merges by rank; ignore_merges; byte_fallback to <0xNN>
//           tokens, else unk_token, fused when fuse_unk)
//
// Two flavours come out of the same code: byte-level (a ByteLevel pre-tokenizer maps bytes to
// GPT-2's printable characters first: GPT-2, GPT-NeoX/Pythia, Llama 3, Qwen2) and
// SentencePiece-style (no byte mapping; "▁" for a space, byte fallback: Llama 2, TinyLlama).
// Regexes run on PCRE2 with `\s` read as Unicode White_Space, which is what Oniguruma (used by
// Hugging Face) means by it.
//
// encode() never adds BOS (Model::encode does). decode() runs the file's decoder (ByteLevel,
// Replace, ByteFallback, Fuse, Strip, Metaspace) on the tokens, so it may drop the leading space
// that the normalizer or pre-tokenizer added, as Hugging Face's decode does; unlike Hugging Face
// it keeps bytes that are not UTF-8 as they are instead of replacing them with U+FFFD.
// token_bytes() is one token through the same decoder without its stripping steps.
//
// BOS: a post_processor TemplateProcessing (alone or in a Sequence) whose single-text template
// starts with a special token sets bos_token_id() to it and adds_bos() to true; one that starts
// with the text sets adds_bos() to false. load_tokenizer then applies tokenizer_config.json's
// `bos_token` and `add_bos_token`, which win, as they do in transformers.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/tokenizer/tokenizer.h"

namespace hs {

class HfTokenizer final : public Tokenizer {
 public:
  // Reads a parsed tokenizer.json; `source` names the file in messages. Throws hs::Error for a
  // model, normalizer, pre-tokenizer or decoder HeadScope does not read (naming it and what it
  // reads), and for a broken vocabulary or merge list.
  static HfTokenizer from_json(const nlohmann::json& file, const std::string& source);

  HfTokenizer(HfTokenizer&&) noexcept;
  HfTokenizer& operator=(HfTokenizer&&) noexcept;
  ~HfTokenizer() override;

  std::string kind() const override;
  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(std::span<const int32_t> ids) const override;
  std::string token_bytes(int32_t id) const override;
  int32_t vocab_size() const override;
  // <|endoftext|>, else <|end_of_text|>, else </s>, when the vocabulary has one.
  std::optional<int32_t> end_of_text_id() const override;
  // A model vocabulary string (byte-level spelling, "Ġ" for a space; or "▁the") or an added token.
  std::optional<int32_t> id_of(std::string_view vocab_string) const override;
 private:
  struct Impl;
  explicit HfTokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace hs
