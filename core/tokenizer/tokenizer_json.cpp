// Reading a tokenizer.json: model.vocab and model.merges straight into flat lists, the rest into a
// JSON value (core/tokenizer/hf_tokenizer.h, TokenizerJson).
#include <algorithm>
#include <cstdint>
#include <limits>

#include "core/error.h"
#include "core/tokenizer/byte_level.h"
#include "core/tokenizer/hf_tokenizer.h"
#include "core/tokenizer/vocabulary.h"

namespace hs {

using nlohmann::json;
using tokenizer_detail::kMaxTokenId;
using tokenizer_detail::quote_for_message;

namespace {

std::string bad_id(const std::string& spelling, const std::string& found) {
  return "model.vocab: the id of " + quote_for_message(spelling) + " is " + found.substr(0, 40) +
         "; expected an integer from 0 to " + std::to_string(kMaxTokenId) + ".";
}

// "a b" -> ("a", "b"), or an error message.
std::string split_merge(const std::string& line, size_t index, std::vector<std::pair<std::string, std::string>>& out) {
  const size_t space = line.find(' ');
  if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos)
    return "model.merges[" + std::to_string(index) + "] " + quote_for_message(line) +
           " is not two tokens separated by one space.";
  out.emplace_back(line.substr(0, space), line.substr(space + 1));
  return "";
}

// Builds the JSON value of everything but the two tables, which it collects as they stream by.
class Sax final : public nlohmann::json_sax<json> {
 public:
  explicit Sax(TokenizerJson& out) : out_(out) {}
  std::string error;  // without the source; set when a callback refuses the input

  bool null() override { return value(json(nullptr)); }
  bool boolean(bool v) override { return value(json(v)); }
  bool number_integer(number_integer_t v) override {
    if (mode_ == Mode::Vocab) return vocab_id(v, std::to_string(v));
    return value(json(v));
  }
  bool number_unsigned(number_unsigned_t v) override {
    if (mode_ == Mode::Vocab)
      return vocab_id(v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ? -1 : static_cast<int64_t>(v),
                      std::to_string(v));
    return value(json(v));
  }
  bool number_float(number_float_t v, const string_t& text) override {
    if (mode_ == Mode::Vocab) return fail(bad_id(key_, text));
    return value(json(v));
  }
  bool string(string_t& v) override {
    if (mode_ == Mode::Merges) {
      error = split_merge(v, out_.merges.size(), out_.merges);
      return error.empty();
    }
    if (mode_ == Mode::MergePair) {
      pair_.push_back(std::move(v));
      return pair_.size() <= 2 || fail(not_a_merge());
    }
    if (mode_ == Mode::Vocab) return fail(bad_id(key_, "a string"));
    return value(json(std::move(v)));
  }
  bool binary(binary_t&) override { return fail("holds binary data, which a tokenizer.json does not."); }
  bool start_object(std::size_t) override {
    if (mode_ == Mode::Vocab) return fail(bad_id(key_, "an object"));
    if (mode_ != Mode::Dom) return fail(not_a_merge());
    if (in_model() && key_ == "vocab" && !out_.has_vocab) {
      mode_ = Mode::Vocab;
      out_.has_vocab = true;
      return true;
    }
    return open(json::object());
  }
  bool end_object() override {
    if (mode_ == Mode::Vocab) mode_ = Mode::Dom;
    else stack_.pop_back();
    return true;
  }
  bool start_array(std::size_t) override {
    if (mode_ == Mode::Merges) {
      mode_ = Mode::MergePair;
      pair_.clear();
      return true;
    }
    if (mode_ == Mode::Vocab) return fail(bad_id(key_, "a list"));
    if (mode_ == Mode::MergePair) return fail(not_a_merge());
    if (in_model() && key_ == "merges" && !out_.has_merges) {
      mode_ = Mode::Merges;
      out_.has_merges = true;
      return true;
    }
    return open(json::array());
  }
  bool end_array() override {
    if (mode_ == Mode::MergePair) {
      if (pair_.size() != 2) return fail(not_a_merge());
      out_.merges.emplace_back(std::move(pair_[0]), std::move(pair_[1]));
      mode_ = Mode::Merges;
    } else if (mode_ == Mode::Merges) {
      mode_ = Mode::Dom;
    } else {
      stack_.pop_back();
    }
    return true;
  }
  bool key(string_t& k) override {
    key_ = std::move(k);
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    error = "not valid JSON (" + json_error_reason(e) + ").";
    return false;
  }

 private:
  enum class Mode { Dom, Vocab, Merges, MergePair };

  bool fail(std::string message) {
    error = std::move(message);
    return false;
  }
  std::string not_a_merge() const {
    return "model.merges[" + std::to_string(out_.merges.size()) + "] is neither \"a b\" nor [\"a\", \"b\"].";
  }
  bool in_model() const { return stack_.size() == 2 && stack_.back() == model_; }
  bool vocab_id(int64_t id, const std::string& text) {
    if (id < 0 || id > kMaxTokenId) return fail(bad_id(key_, text));
    out_.vocab.emplace_back(std::move(key_), static_cast<int32_t>(id));
    return true;
  }
  // Puts `v` where the parser is (the root, a member named key_, or the next list element). The
  // pointers on stack_ stay valid: objects are std::map, and a list only grows while no pointer
  // into it is held.
  json* insert(json&& v) {
    if (stack_.empty()) {
      out_.rest = std::move(v);
      return &out_.rest;
    }
    json& parent = *stack_.back();
    if (parent.is_object()) {
      json& slot = parent[key_];
      slot = std::move(v);
      return &slot;
    }
    parent.push_back(std::move(v));
    return &parent.back();
  }
  bool value(json&& v) {
    if (mode_ == Mode::Vocab) return fail(bad_id(key_, v.dump()));
    if (mode_ != Mode::Dom) return fail(not_a_merge());
    insert(std::move(v));
    return true;
  }
  bool open(json&& container) {
    const bool is_model = stack_.size() == 1 && key_ == "model" && container.is_object();
    stack_.push_back(insert(std::move(container)));
    if (is_model) model_ = stack_.back();
    return true;
  }

  TokenizerJson& out_;
  Mode mode_ = Mode::Dom;
  std::vector<json*> stack_;
  const json* model_ = nullptr;
  std::string key_;
  std::vector<std::string> pair_;
};

// ---------------------------------------------------------------- the fast path
//
// Building nlohmann's objects for the two tables was most of the time to open a Llama 3 or Qwen2
// tokenizer.json (docs/benchmarks.md). So: one structural pass finds model.vocab and model.merges, a small scanner reads them (plain
// strings, non-negative integer ids), and nlohmann parses the rest with the tables cut out. Any
// surprise (a number that is not a plain id, a shape the scanner does not expect, broken JSON)
// sends the whole file down nlohmann's path, which gives the canonical message.

struct TableScanner {
  std::string_view t;
  size_t i = 0;

  void ws() {
    while (i < t.size() && (t[i] == ' ' || t[i] == '\n' || t[i] == '\r' || t[i] == '\t')) ++i;
  }
  bool eat(char c) {
    ws();
    if (i < t.size() && t[i] == c) {
      ++i;
      return true;
    }
    return false;
  }
  static int hex(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
  }
  bool hex4(uint32_t& v) {
    if (i + 4 > t.size()) return false;
    v = 0;
    for (int k = 0; k < 4; ++k) {
      const int h = hex(t[i + k]);
      if (h < 0) return false;
      v = v * 16 + static_cast<uint32_t>(h);
    }
    i += 4;
    return true;
  }
  // A JSON string at i (after whitespace), decoded; false for anything unusual.
  bool string(std::string& out) {
    ws();
    if (i >= t.size() || t[i] != '"') return false;
    ++i;
    out.clear();
    while (i < t.size()) {
      const char c = t[i];
      if (c == '"') {
        ++i;
        return true;
      }
      if (static_cast<unsigned char>(c) < 0x20) return false;
      if (c != '\\') {
        const size_t run = t.find_first_of("\"\\", i);
        const size_t end = run == std::string_view::npos ? t.size() : run;
        for (size_t k = i; k < end; ++k)
          if (static_cast<unsigned char>(t[k]) < 0x20) return false;
        out.append(t.substr(i, end - i));
        i = end;
        continue;
      }
      if (++i >= t.size()) return false;
      const char e = t[i++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          uint32_t cp = 0;
          if (!hex4(cp)) return false;
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            uint32_t low = 0;
            if (i + 2 > t.size() || t[i] != '\\' || t[i + 1] != 'u') return false;
            i += 2;
            if (!hex4(low) || low < 0xDC00 || low > 0xDFFF) return false;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            return false;
          }
          tokenizer_detail::append_utf8(out, static_cast<char32_t>(cp));
          break;
        }
        default:
          return false;
      }
    }
    return false;
  }
  // Skips any JSON value without decoding it (strings and brackets only need to balance here; the
  // rest is checked by nlohmann later).
  bool skip_value() {
    ws();
    int depth = 0;
    while (i < t.size()) {
      const char c = t[i];
      if (c == '"') {
        ++i;
        while (i < t.size() && t[i] != '"') i += t[i] == '\\' ? 2 : 1;
        if (i >= t.size()) return false;
        ++i;
      } else if (c == '{' || c == '[') {
        ++depth;
        ++i;
      } else if (c == '}' || c == ']') {
        if (depth == 0) return true;
        --depth;
        ++i;
      } else if (c == ',' && depth == 0) {
        return true;
      } else {
        ++i;
      }
      if (depth == 0 && (c == '"' || c == '}' || c == ']')) return true;
    }
    return depth == 0;
  }
};

bool scan_vocab(TableScanner& s, std::vector<std::pair<std::string, int32_t>>& out) {
  if (!s.eat('{')) return false;
  if (s.eat('}')) return true;
  std::string key;
  do {
    if (!s.string(key) || !s.eat(':')) return false;
    s.ws();
    int64_t id = 0;
    size_t digits = 0;
    while (s.i < s.t.size() && s.t[s.i] >= '0' && s.t[s.i] <= '9' && digits < 10) {
      id = id * 10 + (s.t[s.i++] - '0');
      ++digits;
    }
    if (digits == 0 || id > kMaxTokenId || (digits > 1 && s.t[s.i - digits] == '0')) return false;
    if (s.i < s.t.size() && (s.t[s.i] == '.' || s.t[s.i] == 'e' || s.t[s.i] == 'E' || (s.t[s.i] >= '0' && s.t[s.i] <= '9')))
      return false;
    out.emplace_back(key, static_cast<int32_t>(id));
  } while (s.eat(','));
  return s.eat('}');
}

bool scan_merges(TableScanner& s, std::vector<std::pair<std::string, std::string>>& out) {
  if (!s.eat('[')) return false;
  if (s.eat(']')) return true;
  std::string a, b;
  do {
    if (s.eat('[')) {
      if (!s.string(a) || !s.eat(',') || !s.string(b) || !s.eat(']')) return false;
      out.emplace_back(std::move(a), std::move(b));
    } else {
      if (!s.string(a)) return false;
      const size_t space = a.find(' ');
      if (space == std::string::npos || a.find(' ', space + 1) != std::string::npos) return false;
      out.emplace_back(a.substr(0, space), a.substr(space + 1));
    }
  } while (s.eat(','));
  return s.eat(']');
}

// The byte ranges [begin, end) of the values of "model" -> "vocab" and "merges", when the file is
// an object whose "model" is an object.
bool locate_tables(std::string_view text, std::pair<size_t, size_t>& vocab, std::pair<size_t, size_t>& merges) {
  TableScanner s{text};
  std::string key;
  if (!s.eat('{')) return false;
  bool found_model = false;
  do {
    if (!s.string(key) || !s.eat(':')) return false;
    s.ws();
    if (key == "model" && found_model) return false;  // nlohmann keeps the last of repeated keys
    if (key != "model") {
      if (!s.skip_value()) return false;
      continue;
    }
    found_model = true;
    if (!s.eat('{')) return false;
    if (s.eat('}')) continue;
    do {
      if (!s.string(key) || !s.eat(':')) return false;
      s.ws();
      const size_t begin = s.i;
      if (!s.skip_value()) return false;
      if ((key == "vocab" && vocab.second != 0) || (key == "merges" && merges.second != 0)) return false;
      if (key == "vocab") vocab = {begin, s.i};
      if (key == "merges") merges = {begin, s.i};
    } while (s.eat(','));
    if (!s.eat('}')) return false;
  } while (s.eat(','));
  return s.eat('}') && found_model;
}

bool parse_fast(std::string_view text, TokenizerJson& out) {
  std::pair<size_t, size_t> vocab{0, 0}, merges{0, 0};
  if (!locate_tables(text, vocab, merges)) return false;
  // nlohmann refuses strings that are not UTF-8; the scanner below does not look.
  for (const auto& r : {vocab, merges})
    if (tokenizer_detail::find_invalid_utf8(text.substr(r.first, r.second - r.first))) return false;
  // Room for every entry at once: growing a list of a few hundred thousand strings step by step
  // copies it over and over. Each entry has a ':' (vocab) or at least one ',' after it (merges);
  // a few extra in strings only over-reserve.
  const auto count = [&](const std::pair<size_t, size_t>& r, char c) {
    return static_cast<size_t>(std::count(text.begin() + static_cast<std::ptrdiff_t>(r.first),
                                          text.begin() + static_cast<std::ptrdiff_t>(r.second), c));
  };
  out.vocab.reserve(count(vocab, ':'));
  out.merges.reserve(count(merges, ',') + 1);
  if (vocab.second > vocab.first) {
    TableScanner s{text.substr(0, vocab.second), vocab.first};
    if (!scan_vocab(s, out.vocab)) return false;
    s.ws();
    if (s.i != vocab.second) return false;
    out.has_vocab = true;
  }
  if (merges.second > merges.first) {
    TableScanner s{text.substr(0, merges.second), merges.first};
    if (!scan_merges(s, out.merges)) return false;
    s.ws();
    if (s.i != merges.second) return false;
    out.has_merges = true;
  }
  // The rest, with each table cut down to an empty one of its kind (then dropped).
  std::string rest;
  rest.reserve(text.size() - (vocab.second - vocab.first) - (merges.second - merges.first) + 4);
  const bool vocab_first = vocab.first < merges.first;
  const auto& [a, b] = vocab_first ? std::pair{vocab, merges} : std::pair{merges, vocab};
  auto empty_of = [&](const std::pair<size_t, size_t>& r) { return r == vocab ? "{}" : "[]"; };
  size_t at = 0;
  for (const auto& r : {a, b}) {
    if (r.second <= r.first) continue;
    rest.append(text.substr(at, r.first - at)).append(empty_of(r));
    at = r.second;
  }
  rest.append(text.substr(at));
  try {
    out.rest = json::parse(rest);
  } catch (const std::exception&) {
    return false;
  }
  json& model = out.rest["model"];
  if (out.has_vocab) model.erase("vocab");
  if (out.has_merges) model.erase("merges");
  return true;
}

}  // namespace

TokenizerJson split_tokenizer_json(json file, const std::string& source) {
  TokenizerJson out;
  out.rest = std::move(file);
  take_tokenizer_tables(out, source);
  return out;
}

void take_tokenizer_tables(TokenizerJson& file, const std::string& source) {
  if (!file.rest.is_object() || !file.rest.contains("model") || !file.rest["model"].is_object()) return;
  json& model = file.rest["model"];
  // Another kind of model keeps its tables of another shape; HfTokenizer refuses it by its type.
  if (model.contains("type") && model["type"] != "BPE") return;
  if (!file.has_vocab && model.contains("vocab")) {
    const json& vocab = model["vocab"];
    if (!vocab.is_object()) throw Error(source + ": model.vocab must be an object mapping token strings to ids.");
    for (const auto& [spelling, id] : vocab.items()) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > kMaxTokenId)
        throw Error(source + ": " + bad_id(spelling, id.dump()));
      file.vocab.emplace_back(spelling, static_cast<int32_t>(id.get<int64_t>()));
    }
    file.has_vocab = true;
    model.erase("vocab");
  }
  if (!file.has_merges && model.contains("merges")) {
    const json& merges = model["merges"];
    if (!merges.is_array()) throw Error(source + ": model.merges must be a list.");
    for (const json& m : merges) {
      if (m.is_string()) {
        if (const std::string e = split_merge(m.get<std::string>(), file.merges.size(), file.merges); !e.empty())
          throw Error(source + ": " + e);
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        file.merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
      } else {
        throw Error(source + ": model.merges[" + std::to_string(file.merges.size()) +
                    "] is neither \"a b\" nor [\"a\", \"b\"].");
      }
    }
    file.has_merges = true;
    model.erase("merges");
  }
}

TokenizerJson parse_tokenizer_json(std::string_view text, const std::string& source) {
  {
    TokenizerJson fast;
    if (parse_fast(text, fast)) {
      take_tokenizer_tables(fast, source);
      return fast;
    }
  }
  TokenizerJson out;
  Sax sax(out);
  if (!json::sax_parse(text.begin(), text.end(), &sax))
    throw Error(source + ": " + (sax.error.empty() ? "could not be read as JSON." : sax.error));
  take_tokenizer_tables(out, source);  // tables of the wrong shape were left in the JSON value
  return out;
}

}  // namespace hs
