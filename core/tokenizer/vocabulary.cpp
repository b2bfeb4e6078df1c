// Reading vocab.json and merges.txt. Both come from wherever a user found a model, so every
// entry is checked and every failure says which file, which entry or line, what was expected and
// what was found. Nothing here allocates more than a small multiple of the input's size.
#include "core/tokenizer/vocabulary.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/tokenizer/byte_level.h"

namespace hs::tokenizer_detail {

namespace {

struct VocabEntry {
  std::string spelling;
  int32_t id;
};

// Reads vocab.json as a stream of SAX events, so that only the expected shape (one flat object
// of integers) is ever built: a deeply nested or huge array is refused at its first bracket.
class VocabReader final : public nlohmann::json_sax<nlohmann::json> {
 public:
  explicit VocabReader(const std::string& name) : name_(name) {}

  std::vector<VocabEntry> entries;
  std::string error;  // set when a callback refused the input

  bool null() override { return refuse_value("null"); }
  bool boolean(bool) override { return refuse_value("a boolean"); }
  bool number_integer(number_integer_t value) override {
    if (value < 0) return refuse_value(std::to_string(value) + ", a negative number");
    return accept_id(static_cast<uint64_t>(value));
  }
  bool number_unsigned(number_unsigned_t value) override { return accept_id(value); }
  bool number_float(number_float_t, const string_t& text) override {
    return refuse_value(text.substr(0, 40) + ", which is not an integer");
  }
  bool string(string_t&) override { return refuse_value("a string"); }
  bool binary(binary_t&) override { return refuse_value("binary data"); }
  bool start_object(std::size_t) override {
    if (depth_ == 0) {
      depth_ = 1;
      return true;
    }
    return refuse_value("an object");
  }
  bool key(string_t& key) override {
    key_ = std::move(key);
    return true;
  }
  bool end_object() override {
    depth_ = 0;
    return true;
  }
  bool start_array(std::size_t) override { return refuse_value("an array"); }
  bool end_array() override { return false; }  // unreachable: every array is refused at its start
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& ex) override {
    error = name_ + ": not valid JSON (" + json_error_reason(ex) +
            "). Expected a JSON object mapping token strings to ids, like a Hugging Face vocab.json.";
    return false;
  }

 private:
  bool refuse_value(const std::string& found) {
    if (depth_ == 0) {
      error = name_ + ": expected a JSON object mapping token strings to ids at the top level, found " + found +
              ". Use the vocab.json of a GPT-2-style Hugging Face model.";
    } else {
      error = name_ + ": entry " + std::to_string(entries.size() + 1) + " (" + quote_for_message(key_) +
              "): expected a non-negative integer id, found " + found + ".";
    }
    return false;
  }
  bool accept_id(uint64_t value) {
    if (depth_ == 0) return refuse_value("a number");
    if (value > static_cast<uint64_t>(kMaxTokenId)) {
      error = name_ + ": entry " + std::to_string(entries.size() + 1) + " (" + quote_for_message(key_) + ") has id " +
              std::to_string(value) + "; HeadScope accepts ids up to " + std::to_string(kMaxTokenId) +
              ". Is this a tokenizer vocabulary?";
      return false;
    }
    entries.push_back(VocabEntry{std::move(key_), static_cast<int32_t>(value)});
    return true;
  }

  const std::string& name_;
  int depth_ = 0;
  std::string key_;
};

std::string byte_spelling(int b) {
  std::string spelling;
  append_utf8(spelling, byte_to_codepoint()[b]);
  return spelling;
}

// The bytes a vocabulary spelling stands for. A spelling made only of table characters maps
// through the table; any other spelling (an added token such as "<pad>" with characters outside
// the table) stands for its own UTF-8 bytes, as in Hugging Face's ByteLevel decoder.
std::string bytes_of_spelling(const std::string& spelling) {
  std::string bytes;
  bytes.reserve(spelling.size());
  for (size_t i = 0; i < spelling.size();) {
    char32_t cp = 0;
    const size_t length = decode_utf8(spelling, i, cp);
    const int b = length == 0 ? -1 : byte_of_codepoint(cp);
    if (b < 0) return spelling;
    bytes += static_cast<char>(b);
    i += length;
  }
  return bytes;
}

void read_vocab(std::string_view text, const std::string& name, Vocabulary& vocab) {
  if (text.size() > kMaxFileBytes) {
    throw Error(name + ": " + std::to_string(text.size()) + " bytes is more than the " + std::to_string(kMaxFileBytes >> 20) +
                " MiB HeadScope reads for a vocabulary (GPT-2's is 1 MB). Is this the right file?");
  }
  VocabReader reader(name);
  const bool ok = nlohmann::json::sax_parse(text.begin(), text.end(), &reader);
  if (!ok) throw Error(reader.error.empty() ? name + ": could not be read as JSON" : reader.error);
  std::vector<VocabEntry>& entries = reader.entries;

  vocab.id_by_spelling.reserve(entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    const auto [it, inserted] = vocab.id_by_spelling.emplace(entries[i].spelling, entries[i].id);
    if (!inserted) {
      throw Error(name + ": the token " + quote_for_message(entries[i].spelling) + " appears twice (ids " +
                  std::to_string(it->second) + " and " + std::to_string(entries[i].id) +
                  "); every token string must appear once.");
    }
  }

  vocab.tokens.reserve(entries.size());
  for (VocabEntry& entry : entries) vocab.tokens.push_back({entry.id, bytes_of_spelling(entry.spelling)});
  std::vector<size_t> order(entries.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return entries[a].id < entries[b].id; });
  for (size_t k = 1; k < order.size(); ++k) {
    const VocabEntry& a = entries[order[k - 1]];
    const VocabEntry& b = entries[order[k]];
    if (a.id == b.id) {
      throw Error(name + ": the tokens " + quote_for_message(a.spelling) + " and " + quote_for_message(b.spelling) +
                  " both have id " + std::to_string(a.id) + "; every id must belong to exactly one token.");
    }
  }
  std::sort(vocab.tokens.begin(), vocab.tokens.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  vocab.vocab_size = vocab.tokens.empty() ? 0 : vocab.tokens.back().id + 1;
  vocab.dense = vocab.vocab_size == static_cast<int32_t>(vocab.tokens.size());

  // Byte-level BPE starts every word from single-byte tokens. Real vocabularies have all 256;
  // small test vocabularies may not, and Hugging Face then encodes such a byte as the unknown
  // token, so a missing byte gets a virtual id instead of refusing the file.
  vocab.next_virtual_id = vocab.vocab_size;
  for (int b = 0; b < 256; ++b) {
    const std::string spelling = byte_spelling(b);
    const auto it = vocab.id_by_spelling.find(spelling);
    if (it == vocab.id_by_spelling.end()) {
      vocab.byte_ids[b] = vocab.next_virtual_id;
      vocab.virtual_by_spelling.emplace(spelling, vocab.next_virtual_id++);
      ++vocab.missing_bytes;
    } else {
      vocab.byte_ids[b] = it->second;
    }
  }
  if (vocab.missing_bytes == 256)
    throw Error(name + ": has none of the 256 byte tokens of GPT-2's byte-level BPE (e.g. \"\xC4\xA0\" for a space); "
                "is this a GPT-2-style vocabulary?");

  if (const auto it = vocab.id_by_spelling.find(kEndOfText); it != vocab.id_by_spelling.end()) {
    vocab.end_of_text = it->second;
  }
}

void read_merges(std::string_view text, const std::string& name, Vocabulary& vocab) {
  if (text.size() > kMaxFileBytes) {
    throw Error(name + ": " + std::to_string(text.size()) + " bytes is more than the " + std::to_string(kMaxFileBytes >> 20) +
                " MiB HeadScope reads for a merge list (GPT-2's is 0.5 MB). Is this the right file?");
  }
  // A merge part or result that vocab.json lacks gets a virtual id (see Vocabulary), as the
  // slow Hugging Face tokenizer merges strings without consulting the vocabulary.
  auto lookup = [&](std::string_view spelling) -> const int32_t* {
    if (const auto it = vocab.id_by_spelling.find(spelling); it != vocab.id_by_spelling.end()) return &it->second;
    if (const auto it = vocab.virtual_by_spelling.find(spelling); it != vocab.virtual_by_spelling.end()) return &it->second;
    if (vocab.next_virtual_id >= kMaxTokenId * 2)
      throw Error(name + ": names more tokens outside the vocabulary than HeadScope accepts; are vocab.json and "
                  "merges.txt from the same model?");
    return &vocab.virtual_by_spelling.emplace(std::string(spelling), vocab.next_virtual_id++).first->second;
  };
  int32_t rank = 0;  // < 2^31: the file is at most 256 MiB and every merge line has >= 4 bytes
  size_t line_number = 0;
  size_t start = 0;
  while (start < text.size()) {
    size_t stop = text.find('\n', start);
    if (stop == std::string_view::npos) stop = text.size();
    std::string_view line = text.substr(start, stop - start);
    start = stop + 1;
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);  // a file saved with CRLF
    if (line_number == 1) {
      if (line.substr(0, 3) == "\xEF\xBB\xBF") line.remove_prefix(3);  // a byte order mark
      if (line.substr(0, 8) == "#version") continue;
    }
    if (line.empty()) continue;

    auto where = [&] { return name + ": line " + std::to_string(line_number) + " (" + quote_for_message(line) + ")"; };
    const size_t parts = static_cast<size_t>(std::count(line.begin(), line.end(), ' ')) + 1;
    const size_t space = line.find(' ');
    if (parts != 2 || space == 0 || space + 1 == line.size()) {
      throw Error(where() + ": expected two tokens separated by one space, found " +
                  (parts == 2 ? std::string("an empty token") : std::to_string(parts) + (parts == 1 ? " part" : " parts")) +
                  ". Each line of merges.txt is one merge, like \"\xC4\xA0 t\".");
    }
    if (const auto bad = find_invalid_utf8(line))
      throw Error(where() + ": is not valid UTF-8 at byte " + std::to_string(bad->offset) +
                  "; merges.txt is a UTF-8 text file. Is this the right file?");
    const std::string_view left = line.substr(0, space);
    const std::string_view right = line.substr(space + 1);
    const int32_t* left_id = lookup(left);
    const int32_t* right_id = lookup(right);
    std::string joined;
    joined.reserve(left.size() + right.size());
    joined.append(left).append(right);
    const int32_t* merged_id = lookup(joined);
    vocab.merges.insert_or_assign(*left_id, *right_id, Merge{rank, *merged_id});
    ++rank;
  }
}

}  // namespace

const Vocabulary::Token* Vocabulary::find(int32_t id) const {
  if (id < 0 || id >= vocab_size) return nullptr;
  if (dense) return &tokens[static_cast<size_t>(id)];
  const auto it = std::lower_bound(tokens.begin(), tokens.end(), id, [](const Token& t, int32_t v) { return t.id < v; });
  return it != tokens.end() && it->id == id ? &*it : nullptr;
}

Vocabulary read_vocabulary(std::string_view vocab_json, std::string_view merges_txt, const std::string& vocab_name,
                           const std::string& merges_name) {
  Vocabulary vocab;
  read_vocab(vocab_json, vocab_name, vocab);
  read_merges(merges_txt, merges_name, vocab);
  return vocab;
}

}  // namespace hs::tokenizer_detail
