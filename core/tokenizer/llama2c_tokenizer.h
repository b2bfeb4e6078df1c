// llama2.c's tokenizer file (`tokenizer.bin`, `tok512.bin`, ...) and its encoder.
//
// The file: int32 max_token_length, then per token in id order: float32 score, int32 length,
// `length` bytes (little-endian, as llama2.c's export writes it). SentencePiece's "▁" is already
// a space in these strings; ids 1 and 2 are BOS and EOS ("\n<s>\n", "\n</s>\n"); ids 3..258 are
// the byte tokens <0x00>..<0xFF>.
//
// encode() is llama2.c run.c's encode(): a dummy " " token first when the text is not empty, one
// token per UTF-8 character (its bytes as byte tokens, id = byte + 3, when the character is not in
// the vocabulary), then, as long as some adjacent pair's concatenation is a vocabulary string,
// merge the pair whose result has the highest score (the leftmost on a tie). There is no
// pre-tokenization: the whole text is one sequence. Like every Tokenizer, encode() never adds BOS;
// bos_token_id() is 1 and adds_bos() is true (run.c always prepends it).
//
// Where run.c's C strings cannot follow, this encoder decides: a NUL character in the text is the
// byte token <0x00> (run.c would stop at it); a text that is not valid UTF-8 is refused, as by
// every HeadScope tokenizer.
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

class Llama2cTokenizer final : public Tokenizer {
 public:
  // Reads `vocab_size` tokens (the checkpoint's config knows the count; the file does not), or,
  // without it, every token up to the end of the file. Throws hs::Error naming the file, the token
  // and what is wrong (cut short, a negative length, no byte tokens at ids 3..258, ...).
  static Llama2cTokenizer load(const std::filesystem::path& path, std::optional<int32_t> vocab_size = std::nullopt);
  // Same, from the file's bytes; `source` names it in messages.
  static Llama2cTokenizer from_bytes(std::string_view bytes, std::optional<int32_t> vocab_size = std::nullopt,
                                     const std::string& source = "tokenizer.bin");

  Llama2cTokenizer(Llama2cTokenizer&&) noexcept;
  Llama2cTokenizer& operator=(Llama2cTokenizer&&) noexcept;
  ~Llama2cTokenizer() override;

  std::string kind() const override;
  std::vector<int32_t> encode(std::string_view text) const override;
  // run.c's decode() for each id in turn: a token right after BOS loses its leading space, a byte
  // token is its byte.
  std::string decode(std::span<const int32_t> ids) const override;
  // The token's string; a byte token's one byte.
  std::string token_bytes(int32_t id) const override;
  // As the base class, but BOS and EOS read "<s>" and "</s>" without their newlines.
  std::string display(int32_t id) const override;
  int32_t vocab_size() const override;
  // EOS (id 2).
  std::optional<int32_t> end_of_text_id() const override;
  // In the file's spelling (a space, not "▁").
  std::optional<int32_t> id_of(std::string_view vocab_string) const override;
  // The token's score in the file (higher merges first).
  float score(int32_t id) const;

 private:
  struct Impl;
  explicit Llama2cTokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The tokenizer of a llama2.c checkpoint, for the model loader; see Llama2cTokenizer::load.
std::shared_ptr<const Tokenizer> load_llama2c_tokenizer(const std::filesystem::path& path,
                                                        std::optional<int32_t> vocab_size = std::nullopt);

}  // namespace hs
