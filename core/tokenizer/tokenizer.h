// What HeadScope asks of a tokenizer, whatever files it was read from. Callers (the model, the
// CLI, the views) hold a `const Tokenizer&` and never learn which kind it is; a new kind of
// tokenizer file is one class implementing this and one branch in load_tokenizer
// (core/tokenizer/load.h). GPT-2's byte-level BPE is core/tokenizer/byte_level_bpe.h.
//
// Ids are the model's token ids. Text is UTF-8; a token stands for bytes, which need not be whole
// UTF-8 characters (byte-level tokenizers split them).
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
  virtual ~Tokenizer() = default;

  // A short name of the kind, for `info` and messages, e.g. "GPT-2 byte-level BPE".
  virtual std::string kind() const = 0;

  // Throws hs::Error when `text` is not valid UTF-8 (the message gives the byte offset). Never
  // adds BOS: the model does that (Model::encode).
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // The raw bytes the ids stand for, concatenated (may be invalid UTF-8 mid-character). Throws
  // hs::Error for an id outside the vocabulary.
  virtual std::string decode(std::span<const int32_t> ids) const = 0;
  // The bytes of one token. Throws hs::Error for an id outside the vocabulary.
  virtual std::string token_bytes(int32_t id) const = 0;
  // A short label for views: valid UTF-8 always; a space is shown as "␣", a newline as "↵",
  // a tab as "⇥", a carriage return as "␍", other control bytes and bytes that are not complete
  // UTF-8 as one hex group "‹E6 97›". By default the label of token_bytes(id). A prompt's labels
  // come from display_in_context, which also names a character split across tokens.
  virtual std::string display(int32_t id) const;

  // Number of ids (max id + 1).
  virtual int32_t vocab_size() const = 0;
  // The id of `<|endoftext|>` (or the kind's end-of-text token), when the vocabulary has it.
  virtual std::optional<int32_t> end_of_text_id() const = 0;
  // The id of an exact vocabulary string (in the tokenizer file's own spelling), when present.
  virtual std::optional<int32_t> id_of(std::string_view vocab_string) const = 0;

  // The tokenizer's own beginning-of-sequence token, when its files name one the vocabulary has
  // (Hugging Face: `bos_token` of tokenizer_config.json or special_tokens_map.json). Model::bos_id()
  // falls back from it to end_of_text_id() and then to config.json.
  std::optional<int32_t> bos_token_id() const { return bos_token_id_; }
  // Whether the tokenizer's own rules put a BOS before every text, when its files say: Hugging
  // Face's `add_bos_token` of tokenizer_config.json, else a tokenizer.json post_processor template
  // that starts with a special token (Llama 3); llama2.c always. std::nullopt when they are silent
  // (GPT-2's vocab.json + merges.txt). encode() still never adds it: Model::encode does, and a
  // caller may use this to choose its default, as Hugging Face's tokenizer would.
  std::optional<bool> adds_bos() const { return adds_bos_; }

 protected:
  Tokenizer() = default;
  // Protected so that a Tokenizer is never copied or moved by its base (slicing); concrete kinds
  // are values of their own type.
  Tokenizer(const Tokenizer&) = default;
  Tokenizer(Tokenizer&&) noexcept = default;
  Tokenizer& operator=(const Tokenizer&) = default;
  Tokenizer& operator=(Tokenizer&&) noexcept = default;

  // Set by a kind whose file fixes it, or by load_tokenizer from the folder's special-token files.
  std::optional<int32_t> bos_token_id_;
  std::optional<bool> adds_bos_;

 private:
  friend std::shared_ptr<const Tokenizer> load_tokenizer(const std::filesystem::path& model_dir);
};

// The labels of a prompt's tokens: display(id) each, except that a character whose bytes are
// split across neighbouring tokens (byte-level BPE splits rare characters, emoji, CJK) shows in
// each of those tokens as the whole character followed by the bytes that token holds:
// "日‹E6 97›", "日‹A5›". Bytes that form no character stay "‹E6 97›". Throws hs::Error for an id
// outside the vocabulary.
std::vector<std::string> display_in_context(const Tokenizer& tokenizer, std::span<const int32_t> ids);

}  // namespace hs
