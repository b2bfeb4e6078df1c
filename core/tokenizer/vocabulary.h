// The tokenizer files as read and checked: the state behind hs::ByteLevelBpeTokenizer. Private to
// core/tokenizer (tests include it).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/tokenizer/bpe.h"

namespace hs::tokenizer_detail {

// Lets the spelling map be searched with a string_view, without building a std::string.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

struct Vocabulary {
  struct Token {
    int32_t id;
    std::string bytes;  // what the token stands for: its vocab.json spelling mapped back to bytes
  };
  std::vector<Token> tokens;  // sorted by id; ids are unique but may have gaps
  bool dense = false;         // tokens[i].id == i for every i (true for every real vocabulary)
  int32_t vocab_size = 0;     // max id + 1
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> id_by_spelling;  // vocab.json as read
  std::array<int32_t, 256> byte_ids{};  // the id of each single-byte token, by byte value
  MergeTable merges;
  std::optional<int32_t> end_of_text;
  // Symbols the merge process can reach that vocab.json lacks (a byte, a merge part or result),
  // as Hugging Face's slow GPT2Tokenizer allows: they get ids from vocab_size up, take part in
  // merges like any other, and a word that ends on one is encoded as the unknown token.
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> virtual_by_spelling;
  int32_t next_virtual_id = 0;
  size_t missing_bytes = 0;

  // The token with this id, or nullptr.
  const Token* find(int32_t id) const;
};

inline constexpr std::string_view kEndOfText = "<|endoftext|>";
// Limits that keep hostile files from exhausting memory; real files are far below them.
inline constexpr int64_t kMaxTokenId = 9'999'999;
inline constexpr size_t kMaxFileBytes = size_t{256} << 20;

// Parses and checks both files. `vocab_name` / `merges_name` name them in messages.
Vocabulary read_vocabulary(std::string_view vocab_json, std::string_view merges_txt, const std::string& vocab_name,
                           const std::string& merges_name);

}  // namespace hs::tokenizer_detail
