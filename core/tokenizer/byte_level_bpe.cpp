#include "core/tokenizer/byte_level_bpe.h"

#include <fstream>

#include "core/error.h"
#include "core/tokenizer/byte_level.h"
#include "core/tokenizer/pretokenizer.h"
#include "core/tokenizer/vocabulary.h"

namespace hs {

using namespace tokenizer_detail;

namespace {

std::string read_file(const std::filesystem::path& path, const char* what) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) {
    throw Error(path.string() + ": cannot read the tokenizer's " + what + " (" + ec.message() +
                "). A GPT-2-style model folder has vocab.json and merges.txt beside config.json.");
  }
  if (size > kMaxFileBytes) {
    throw Error(path.string() + ": " + std::to_string(size) + " bytes is more than the " + std::to_string(kMaxFileBytes >> 20) +
                " MiB HeadScope reads for a tokenizer's " + what + ". Is this the right file?");
  }
  std::ifstream in(path, std::ios::binary);
  std::string text(static_cast<size_t>(size), '\0');
  if (!in || !in.read(text.data(), static_cast<std::streamsize>(text.size()))) {
    throw Error(path.string() + ": cannot read the tokenizer's " + what + ".");
  }
  return text;
}

[[noreturn]] void throw_unknown_id(const Vocabulary& vocab, int32_t id) {
  if (id < 0 || id >= vocab.vocab_size) {
    throw Error("token id " + std::to_string(id) + " is outside the vocabulary (ids 0 to " +
                std::to_string(vocab.vocab_size - 1) + ").");
  }
  throw Error("token id " + std::to_string(id) + " is not in the vocabulary (vocab.json has no entry with this id).");
}

}  // namespace

struct ByteLevelBpeTokenizer::Impl {
  Vocabulary vocab;
};

ByteLevelBpeTokenizer::ByteLevelBpeTokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ByteLevelBpeTokenizer::ByteLevelBpeTokenizer(ByteLevelBpeTokenizer&&) noexcept = default;
ByteLevelBpeTokenizer& ByteLevelBpeTokenizer::operator=(ByteLevelBpeTokenizer&&) noexcept = default;
ByteLevelBpeTokenizer::~ByteLevelBpeTokenizer() = default;

ByteLevelBpeTokenizer ByteLevelBpeTokenizer::load(const std::filesystem::path& vocab_json,
                                                  const std::filesystem::path& merges_txt) {
  const std::string vocab = read_file(vocab_json, "vocabulary");
  const std::string merges = read_file(merges_txt, "merge list");
  return ByteLevelBpeTokenizer(
      std::make_unique<Impl>(Impl{read_vocabulary(vocab, merges, vocab_json.string(), merges_txt.string())}));
}

ByteLevelBpeTokenizer ByteLevelBpeTokenizer::from_strings(std::string_view vocab_json, std::string_view merges_txt,
                                                          const std::string& source) {
  return ByteLevelBpeTokenizer(
      std::make_unique<Impl>(Impl{read_vocabulary(vocab_json, merges_txt, "vocab.json of " + source, "merges.txt of " + source)}));
}

std::vector<int32_t> ByteLevelBpeTokenizer::encode(std::string_view text) const {
  require_utf8_text(text);
  const Vocabulary& vocab = impl_->vocab;
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 1);
  std::vector<int32_t> word;  // [symbol] of one pre-token while it is merged
  // Hugging Face's GPT2Tokenizer encodes a symbol missing from vocab.json as its unknown token,
  // <|endoftext|>.
  auto unknown = [&](std::string_view piece) -> int32_t {
    if (vocab.end_of_text) return *vocab.end_of_text;
    throw Error("the text piece " + std::string(piece.size() > 40 ? piece.substr(0, 40) : piece) +
                " needs a token this vocabulary lacks, and it has no <|endoftext|> to stand in for it.");
  };
  Pretokenizer pretokenizer;
  auto encode_ordinary = [&](std::string_view segment) {
    pretokenizer.reset(segment);
    std::string_view piece;
    while (pretokenizer.next(piece)) {
      word.clear();
      for (const char c : piece) word.push_back(vocab.byte_ids[static_cast<uint8_t>(c)]);
      bpe_merge(word, vocab.merges);
      for (int32_t& id : word)
        if (id >= vocab.vocab_size) id = unknown(piece);  // a symbol vocab.json lacks
      ids.insert(ids.end(), word.begin(), word.end());
    }
  };
  if (!vocab.end_of_text) {
    encode_ordinary(text);
    return ids;
  }
  // Hugging Face splits the text at the special token before the regex sees it, and the token
  // takes no spaces from its neighbours: " <|endoftext|> x" is " ", <|endoftext|>, " x".
  for (size_t start = 0;;) {
    const size_t hit = text.find(kEndOfText, start);
    if (hit == std::string_view::npos) {
      encode_ordinary(text.substr(start));
      break;
    }
    encode_ordinary(text.substr(start, hit - start));
    ids.push_back(*vocab.end_of_text);
    start = hit + kEndOfText.size();
  }
  return ids;
}

std::string ByteLevelBpeTokenizer::decode(std::span<const int32_t> ids) const {
  std::string text;
  for (const int32_t id : ids) {
    const Vocabulary::Token* token = impl_->vocab.find(id);
    if (token == nullptr) throw_unknown_id(impl_->vocab, id);
    text += token->bytes;
  }
  return text;
}

std::string ByteLevelBpeTokenizer::token_bytes(int32_t id) const {
  if (const Vocabulary::Token* token = impl_->vocab.find(id)) return token->bytes;
  throw_unknown_id(impl_->vocab, id);
}

std::string ByteLevelBpeTokenizer::kind() const { return "GPT-2 byte-level BPE"; }

int32_t ByteLevelBpeTokenizer::vocab_size() const { return impl_->vocab.vocab_size; }

std::optional<int32_t> ByteLevelBpeTokenizer::end_of_text_id() const { return impl_->vocab.end_of_text; }

std::optional<int32_t> ByteLevelBpeTokenizer::id_of(std::string_view vocab_string) const {
  const auto it = impl_->vocab.id_by_spelling.find(vocab_string);
  if (it == impl_->vocab.id_by_spelling.end()) return std::nullopt;
  return it->second;
}

}  // namespace hs
