#include "core/tokenizer/llama2c_tokenizer.h"

#include <cstring>
#include <fstream>
#include <functional>
#include <queue>
#include <unordered_map>

#include "core/error.h"
#include "core/tokenizer/byte_level.h"
#include "core/tokenizer/vocabulary.h"

namespace hs {

using namespace tokenizer_detail;

namespace {

constexpr int32_t kBos = 1, kEos = 2;
constexpr int32_t kFirstByteToken = 3;  // run.c: "the first 3 vocab elements are <unk>, <s>, </s>"
// run.c only merges a pair whose score beats its starting best score.
constexpr float kNoMergeScore = -1e10f;

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// The byte of a "<0xNN>" token, or -1.
int byte_of_token(std::string_view piece) {
  if (piece.size() != 6 || piece.substr(0, 3) != "<0x" || piece[5] != '>') return -1;
  const int hi = hex_digit(piece[3]), lo = hex_digit(piece[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

std::string read_file(const std::filesystem::path& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw Error(path.string() + ": is a folder, not a llama2.c tokenizer file.");
  if (std::filesystem::exists(path, ec) && !std::filesystem::is_regular_file(path, ec))
    throw Error(path.string() + ": is not a regular file; expected a llama2.c tokenizer .bin file.");
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) throw Error(path.string() + ": cannot read the llama2.c tokenizer (" + ec.message() + ").");
  if (size > kMaxFileBytes)
    throw Error(path.string() + ": " + std::to_string(size) + " bytes is more than the " +
                std::to_string(kMaxFileBytes >> 20) + " MiB HeadScope reads for a tokenizer. Is this the right file?");
  std::ifstream in(path, std::ios::binary);
  std::string bytes(static_cast<size_t>(size), '\0');
  if (!in || !in.read(bytes.data(), static_cast<std::streamsize>(bytes.size())))
    throw Error(path.string() + ": cannot read the llama2.c tokenizer; check that it is readable.");
  return bytes;
}

template <typename T>
T read_le(std::string_view bytes, size_t at) {
  T value;
  std::memcpy(&value, bytes.data() + at, sizeof value);  // llama2.c writes the host's order: little-endian
  return value;
}

}  // namespace

struct Llama2cTokenizer::Impl {
  std::vector<std::string> pieces;  // [vocab] the token strings as in the file
  std::vector<float> scores;        // [vocab]
  std::vector<int16_t> byte_value;  // [vocab] the byte a "<0xNN>" token stands for, else -1
  // run.c looks strings up by binary search; with two tokens of one string it finds either, so
  // this takes the lower id (real files have no such pair).
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> id_by_piece;
  int32_t space_id = 0;

  std::optional<int32_t> find(std::string_view piece) const {
    const auto it = id_by_piece.find(piece);
    if (it == id_by_piece.end()) return std::nullopt;
    return it->second;
  }
  void check_id(int32_t id) const {
    if (id < 0 || id >= static_cast<int32_t>(pieces.size()))
      throw Error("token id " + std::to_string(id) + " is outside the vocabulary (ids 0 to " +
                  std::to_string(pieces.size() - 1) + ").");
  }
};

Llama2cTokenizer::Llama2cTokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {
  bos_token_id_ = kBos;
  adds_bos_ = true;
}
Llama2cTokenizer::Llama2cTokenizer(Llama2cTokenizer&&) noexcept = default;
Llama2cTokenizer& Llama2cTokenizer::operator=(Llama2cTokenizer&&) noexcept = default;
Llama2cTokenizer::~Llama2cTokenizer() = default;

Llama2cTokenizer Llama2cTokenizer::load(const std::filesystem::path& path, std::optional<int32_t> vocab_size) {
  return from_bytes(read_file(path), vocab_size, path.string());
}

Llama2cTokenizer Llama2cTokenizer::from_bytes(std::string_view bytes, std::optional<int32_t> vocab_size,
                                              const std::string& source) {
  if (vocab_size && *vocab_size <= 0)
    throw Error(source + ": the checkpoint's vocab_size is " + std::to_string(*vocab_size) + "; it must be positive.");
  if (bytes.size() < 4)
    throw Error(source + ": " + std::to_string(bytes.size()) +
                " bytes is too short for a llama2.c tokenizer (it starts with a 4-byte max_token_length).");
  const auto max_token_length = read_le<int32_t>(bytes, 0);
  if (max_token_length < 0)
    throw Error(source + ": max_token_length is " + std::to_string(max_token_length) +
                "; this is not a llama2.c tokenizer file.");

  auto impl = std::make_unique<Impl>();
  size_t at = 4;
  while (vocab_size ? static_cast<int32_t>(impl->pieces.size()) < *vocab_size : at < bytes.size()) {
    const size_t id = impl->pieces.size();
    auto where = [&] { return source + ": token " + std::to_string(id) + " (at byte " + std::to_string(at) + ")"; };
    if (at == bytes.size() && vocab_size) {
      throw Error(source + ": holds " + std::to_string(id) + " tokens but the checkpoint's vocab_size is " +
                  std::to_string(*vocab_size) + ". Are the tokenizer and the checkpoint from the same model?");
    }
    if (bytes.size() - at < 8) throw Error(where() + ": the file is cut short inside the token's score and length.");
    const auto score = read_le<float>(bytes, at);
    const auto length = read_le<int32_t>(bytes, at + 4);
    if (length < 0) throw Error(where() + ": has length " + std::to_string(length) + "; a length cannot be negative.");
    if (length > max_token_length)
      throw Error(where() + ": is " + std::to_string(length) + " bytes, longer than the file's max_token_length (" +
                  std::to_string(max_token_length) + "); the file is damaged.");
    if (bytes.size() - at - 8 < static_cast<size_t>(length))
      throw Error(where() + ": the file is cut short inside the token's " + std::to_string(length) + " bytes.");
    std::string piece(bytes.substr(at + 8, static_cast<size_t>(length)));
    if (piece.find('\0') != std::string::npos)
      throw Error(where() + ": contains a NUL byte; llama2.c reads tokens as C strings, so this is not its file.");
    at += 8 + static_cast<size_t>(length);
    if (impl->pieces.size() >= static_cast<size_t>(kMaxTokenId))
      throw Error(source + ": holds more than " + std::to_string(kMaxTokenId) + " tokens; is this a tokenizer file?");
    impl->id_by_piece.emplace(piece, static_cast<int32_t>(id));  // keeps the lower id of a repeated string
    impl->byte_value.push_back(static_cast<int16_t>(byte_of_token(piece)));
    impl->pieces.push_back(std::move(piece));
    impl->scores.push_back(score);
  }

  // run.c's byte fallback writes id = byte + 3 without looking; check that those ids are the bytes.
  if (impl->pieces.size() < kFirstByteToken + 256)
    throw Error(source + ": has " + std::to_string(impl->pieces.size()) +
                " tokens; a llama2.c tokenizer has <unk>, <s>, </s> and the 256 byte tokens <0x00>..<0xFF> first.");
  for (int b = 0; b < 256; ++b) {
    if (impl->byte_value[kFirstByteToken + b] != b) {
      const char* hex = "0123456789ABCDEF";
      throw Error(source + ": token " + std::to_string(kFirstByteToken + b) + " is " +
                  quote_for_message(impl->pieces[kFirstByteToken + b]) + " where llama2.c expects the byte token \"<0x" +
                  hex[b >> 4] + hex[b & 0xF] + ">\" (its byte fallback uses id = byte + 3).");
    }
  }
  const auto space = impl->find(" ");
  if (!space)
    throw Error(source + ": has no token for a single space, which llama2.c's encoder puts before every text.");
  impl->space_id = *space;
  return Llama2cTokenizer(std::move(impl));
}

std::vector<int32_t> Llama2cTokenizer::encode(std::string_view text) const {
  require_utf8_text(text);
  const Impl& t = *impl_;
  std::vector<int32_t> symbol;  // [n] the token of each node; -1 once merged into its left neighbour
  symbol.reserve(text.size() + 1);
  if (!text.empty()) symbol.push_back(t.space_id);
  for (size_t i = 0; i < text.size();) {
    char32_t cp = 0;
    const size_t length = decode_utf8(text, i, cp);  // >= 1: the text is valid UTF-8
    const std::string_view character = text.substr(i, length);
    const std::optional<int32_t> id = cp == 0 ? std::nullopt : t.find(character);
    if (id) {
      symbol.push_back(*id);
    } else {
      for (const char c : character) symbol.push_back(kFirstByteToken + static_cast<uint8_t>(c));
    }
    i += length;
  }

  // run.c rescans the whole sequence for the best pair after every merge (quadratic in the text).
  // The same choice in O(n log n): a heap of adjacent pairs ordered by score, then by position,
  // over a linked list of nodes that keep their left-to-right order. An entry whose nodes changed
  // since it was queued is skipped when it comes up.
  const auto n = static_cast<int32_t>(symbol.size());
  std::vector<int32_t> prev(n), next(n);  // [n]; -1 / n mark the ends
  for (int32_t i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1;
  }
  struct Candidate {
    float score;
    int32_t pos, left, right, merged;
    bool operator<(const Candidate& o) const { return score != o.score ? score < o.score : pos > o.pos; }
  };
  std::priority_queue<Candidate> queue;
  std::string joined;
  auto queue_pair_at = [&](int32_t pos) {
    if (pos < 0 || next[pos] >= n) return;
    const int32_t left = symbol[pos], right = symbol[next[pos]];
    joined.assign(t.pieces[left]).append(t.pieces[right]);
    const auto merged = t.find(joined);
    if (merged && t.scores[*merged] > kNoMergeScore) queue.push(Candidate{t.scores[*merged], pos, left, right, *merged});
  };
  for (int32_t i = 0; i + 1 < n; ++i) queue_pair_at(i);
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    if (symbol[c.pos] != c.left || next[c.pos] >= n || symbol[next[c.pos]] != c.right) continue;
    const int32_t right = next[c.pos];
    symbol[c.pos] = c.merged;
    symbol[right] = -1;
    next[c.pos] = next[right];
    if (next[right] < n) prev[next[right]] = c.pos;
    queue_pair_at(prev[c.pos]);
    queue_pair_at(c.pos);
  }
  std::vector<int32_t> ids;
  ids.reserve(symbol.size());
  for (const int32_t id : symbol)
    if (id >= 0) ids.push_back(id);
  return ids;
}

std::string Llama2cTokenizer::decode(std::span<const int32_t> ids) const {
  std::string text;
  for (size_t i = 0; i < ids.size(); ++i) {
    impl_->check_id(ids[i]);
    std::string_view piece = impl_->pieces[ids[i]];
    // run.c: "following BOS (1) token, sentencepiece decoder strips any leading whitespace"
    if (i > 0 && ids[i - 1] == kBos && !piece.empty() && piece.front() == ' ') piece.remove_prefix(1);
    if (const int b = byte_of_token(piece); b >= 0) text += static_cast<char>(b);
    else text += piece;
  }
  return text;
}

std::string Llama2cTokenizer::token_bytes(int32_t id) const {
  impl_->check_id(id);
  if (const int b = impl_->byte_value[id]; b >= 0) return std::string(1, static_cast<char>(b));
  return impl_->pieces[id];
}

std::string Llama2cTokenizer::display(int32_t id) const {
  impl_->check_id(id);
  const std::string& piece = impl_->pieces[id];
  // llama2.c's export spells BOS and EOS "\n<s>\n" and "\n</s>\n" so that run.c prints them on a
  // line of their own; a label has no room for the newlines.
  if ((id == kBos || id == kEos) && piece.size() > 2 && piece.front() == '\n' && piece.back() == '\n')
    return display_label(std::string_view(piece).substr(1, piece.size() - 2));
  return Tokenizer::display(id);
}

float Llama2cTokenizer::score(int32_t id) const {
  impl_->check_id(id);
  return impl_->scores[id];
}

std::string Llama2cTokenizer::kind() const { return "llama2.c SentencePiece BPE"; }

int32_t Llama2cTokenizer::vocab_size() const { return static_cast<int32_t>(impl_->pieces.size()); }

std::optional<int32_t> Llama2cTokenizer::end_of_text_id() const { return kEos; }

std::optional<int32_t> Llama2cTokenizer::id_of(std::string_view vocab_string) const { return impl_->find(vocab_string); }

std::shared_ptr<const Tokenizer> load_llama2c_tokenizer(const std::filesystem::path& path,
                                                        std::optional<int32_t> vocab_size) {
  return std::make_shared<Llama2cTokenizer>(Llama2cTokenizer::load(path, vocab_size));
}

}  // namespace hs
