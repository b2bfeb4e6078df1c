#include "core/tokenizer/hf_tokenizer.h"

#include <algorithm>
#include <mutex>
#include <nlohmann/json.hpp>
#include <shared_mutex>
#include <unordered_map>

#include "core/error.h"
#include "core/tokenizer/bpe.h"
#include "core/tokenizer/byte_level.h"
#include "core/tokenizer/hf_pipeline.h"
#include "core/tokenizer/vocabulary.h"

namespace hs {

using namespace tokenizer_detail;
using nlohmann::json;

// An added token of tokenizer.json. Outside the anonymous namespace because HfTokenizer::Impl
// holds a vector of them: in a unity build this file is included, and GCC warns
// (-Wsubobject-linkage) when a class of an included file has a member of an internal type.
struct HfAddedToken {
  int32_t id;
  std::string content;
  bool single_word, lstrip, rstrip, normalized;
};

namespace {

// Rust's char::is_whitespace is White_Space.
bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
         c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// Hugging Face's single_word test asks whether the neighbour is a word character, \w of Rust's
// regex crate: Alphabetic, a mark, a decimal digit, connector punctuation or a joiner.
bool is_word_char(std::string_view character) {
  const char c = character[0];
  if (static_cast<uint8_t>(c) < 0x80) return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  static const Regex word("[\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{200C}\\x{200D}]", "HeadScope's word-character class");
  return !word.find_all(character).empty();
}

// The character that ends / starts `s` (valid UTF-8, not empty).
std::string_view last_char(std::string_view s) {
  size_t i = s.size() - 1;
  while (i > 0 && (static_cast<uint8_t>(s[i]) & 0xC0) == 0x80) --i;
  return s.substr(i);
}
std::string_view first_char(std::string_view s) {
  char32_t cp = 0;
  const size_t length = decode_utf8(s, 0, cp);
  return s.substr(0, length == 0 ? 1 : length);
}

}  // namespace

// ---------------------------------------------------------------- the tokenizer

struct HfTokenizer::Impl {
  std::string source;
  bool byte_level = false;  // a ByteLevel pre-tokenizer: words are in GPT-2's byte alphabet
  std::vector<NormalizerStep> normalizer;
  std::vector<PreTokenizerStep> pre_tokenizer;
  std::vector<DecoderStep> decoder;

  // The BPE model. Its vocabulary is looked up by string through an open-addressing table of ids
  // over model_spelling, so that each string is stored once (Llama 3 has 128,000 of them).
  std::vector<std::string> model_spelling;  // [vocab_size] "" for an id the model vocabulary lacks
  std::vector<bool> in_model;               // [vocab_size]
  std::vector<int32_t> vocab_index;         // [power of two] an id, or -1 for an empty slot
  MergeTable merges;
  std::optional<int32_t> unk_id;
  bool fuse_unk = false, byte_fallback = false, ignore_merges = false;
  std::array<int32_t, 256> byte_fallback_ids{};  // <0xNN> ids, or -1

  // Added tokens, longest first within each first byte, in two sets as Hugging Face matches them.
  std::vector<HfAddedToken> added;
  std::array<std::vector<size_t>, 256> raw_by_first_byte, normalized_by_first_byte;  // indices into `added`

  std::vector<int32_t> added_of_id;  // [vocab_size] index into `added`, or -1
  int32_t vocab_size = 0;

  // Pre-token word -> ids. The app encodes the whole prompt on every keystroke, and almost every
  // word of it was seen the time before.
  mutable std::shared_mutex cache_mutex;
  mutable std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> cache;
  static constexpr size_t kCacheLimit = 100'000;

  // The id of a model vocabulary string.
  std::optional<int32_t> find(std::string_view s) const {
    if (vocab_index.empty()) return std::nullopt;
    const size_t mask = vocab_index.size() - 1;
    for (size_t i = std::hash<std::string_view>{}(s) & mask;; i = (i + 1) & mask) {
      const int32_t id = vocab_index[i];
      if (id < 0) return std::nullopt;
      if (model_spelling[static_cast<size_t>(id)] == s) return id;
    }
  }
  // Adds or moves a string to `id` (a string listed twice in a JSON object keeps its last id).
  void index_spelling(int32_t id) {
    const size_t mask = vocab_index.size() - 1;
    const std::string& s = model_spelling[static_cast<size_t>(id)];
    for (size_t i = std::hash<std::string_view>{}(s) & mask;; i = (i + 1) & mask) {
      int32_t& slot = vocab_index[i];
      if (slot < 0) {
        slot = id;
        return;
      }
      if (model_spelling[static_cast<size_t>(slot)] == s) {
        in_model[static_cast<size_t>(slot)] = false;
        model_spelling[static_cast<size_t>(slot)].clear();
        slot = id;
        return;
      }
    }
  }
  bool known(int32_t id) const {
    return id >= 0 && id < vocab_size && (in_model[static_cast<size_t>(id)] || added_of_id[static_cast<size_t>(id)] >= 0);
  }
  // What the decoder starts from: an added token's content, else the model's string.
  const std::string& spelling(int32_t id) const {
    const int32_t a = added_of_id[static_cast<size_t>(id)];
    return a >= 0 ? added[static_cast<size_t>(a)].content : model_spelling[static_cast<size_t>(id)];
  }

  std::vector<Piece> split_added(std::vector<Piece> pieces, bool normalized_set) const;
  void bpe_word(std::string_view word, std::vector<int32_t>& out) const;
};

std::vector<Piece> HfTokenizer::Impl::split_added(std::vector<Piece> pieces, bool normalized_set) const {
  const auto& index = normalized_set ? normalized_by_first_byte : raw_by_first_byte;
  std::vector<Piece> out;
  for (Piece& piece : pieces) {
    if (piece.added) {
      out.push_back(std::move(piece));
      continue;
    }
    const std::string_view s = piece.text;
    size_t emitted = 0;  // s[emitted..] is not yet in `out`
    auto emit_text = [&](size_t end) {
      if (end > emitted) out.push_back(Piece{std::string(s.substr(emitted, end - emitted)), piece.at_start && emitted == 0, {}});
    };
    for (size_t at = 0; at < s.size();) {
      const HfAddedToken* hit = nullptr;
      for (const size_t k : index[static_cast<uint8_t>(s[at])]) {
        if (s.compare(at, added[k].content.size(), added[k].content) == 0) {
          hit = &added[k];
          break;  // longest first
        }
      }
      if (hit == nullptr) {
        ++at;
        continue;
      }
      // A single_word token inside a word is text; as in Hugging Face's leftmost-longest search,
      // the search goes on after it rather than trying a shorter token here.
      if (hit->single_word && ((at > 0 && is_word_char(last_char(s.substr(0, at)))) ||
                               (at + hit->content.size() < s.size() &&
                                is_word_char(first_char(s.substr(at + hit->content.size())))))) {
        at += hit->content.size();
        continue;
      }
      size_t start = at, stop = at + hit->content.size();
      if (hit->lstrip) {
        while (start > emitted) {
          size_t p = start - 1;
          while (p > emitted && (static_cast<uint8_t>(s[p]) & 0xC0) == 0x80) --p;
          char32_t cp = 0;
          decode_utf8(s, p, cp);
          if (!is_white_space(cp)) break;
          start = p;
        }
      }
      if (hit->rstrip) {
        while (stop < s.size()) {
          char32_t cp = 0;
          const size_t length = decode_utf8(s, stop, cp);
          if (!is_white_space(cp)) break;
          stop += length;
        }
      }
      emit_text(start);
      out.push_back(Piece{std::string(s.substr(start, stop - start)), piece.at_start && start == 0, hit->id});
      emitted = at = stop;
    }
    emit_text(s.size());
  }
  return out;
}

void HfTokenizer::Impl::bpe_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges) {
    if (const auto id = find(word)) {
      out.push_back(*id);
      return;
    }
  }
  {
    std::shared_lock lock(cache_mutex);
    if (const auto it = cache.find(word); it != cache.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> symbols;
  std::optional<int32_t> pending_unk;  // an unknown run not yet written, for fuse_unk
  for (size_t i = 0; i < word.size();) {
    char32_t cp = 0;
    size_t length = decode_utf8(word, i, cp);
    if (length == 0) length = 1;  // unreachable for valid UTF-8
    const std::string_view c = word.substr(i, length);
    i += length;
    if (const auto id = find(c)) {
      if (pending_unk) symbols.push_back(*pending_unk), pending_unk.reset();
      symbols.push_back(*id);
      continue;
    }
    if (byte_fallback) {
      bool all = true;
      for (const char b : c) all = all && byte_fallback_ids[static_cast<uint8_t>(b)] >= 0;
      if (all) {
        // As Hugging Face: the byte tokens go in before a pending unknown run is written.
        for (const char b : c) symbols.push_back(byte_fallback_ids[static_cast<uint8_t>(b)]);
        continue;
      }
    }
    if (!unk_id) continue;  // Hugging Face drops a character it cannot encode when there is no unk_token
    if (pending_unk && fuse_unk) continue;
    if (pending_unk) symbols.push_back(*pending_unk);
    pending_unk = unk_id;
  }
  if (pending_unk) symbols.push_back(*pending_unk);
  bpe_merge_hf(symbols, merges);
  out.insert(out.end(), symbols.begin(), symbols.end());
  std::unique_lock lock(cache_mutex);
  if (cache.size() >= kCacheLimit) cache.clear();
  cache.emplace(std::string(word), std::move(symbols));
}

HfTokenizer::HfTokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HfTokenizer::HfTokenizer(HfTokenizer&&) noexcept = default;
HfTokenizer& HfTokenizer::operator=(HfTokenizer&&) noexcept = default;
HfTokenizer::~HfTokenizer() = default;

HfTokenizer HfTokenizer::from_json(const json& file, const std::string& source) {
  return from_parsed(split_tokenizer_json(file, source), source);
}

HfTokenizer HfTokenizer::from_parsed(TokenizerJson parsed, const std::string& source) {
  take_tokenizer_tables(parsed, source);
  const json& file = parsed.rest;
  const JsonReader r{source};
  auto impl = std::make_unique<Impl>();
  impl->source = source;
  if (!file.is_object()) r.fail("expected a Hugging Face tokenizer.json (a JSON object with a \"model\").");
  const json& model = r.member(file, "model", "the file");
  if (!model.is_object()) r.fail("\"model\" must be an object.");
  const std::string model_type = model.contains("type") && model["type"].is_string() ? model["type"].get<std::string>() : "BPE";
  if (model_type != "BPE")
    r.fail("model.type " + quote_for_message(model_type) +
           " is not a tokenizer HeadScope reads; it reads BPE models (byte-level as in GPT-2, Llama 3 and Qwen2, or "
           "SentencePiece-style as in Llama 2).");
  if (model.contains("dropout") && !model["dropout"].is_null() &&
      !(model["dropout"].is_number() && model["dropout"].get<double>() == 0.0))
    r.fail("model.dropout is " + model["dropout"].dump() +
           "; BPE dropout picks merges at random, which HeadScope does not do. Set it to null.");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (const auto v = r.optional_string(model, key, "model"); v && !v->empty())
      r.fail(std::string("model.") + key + " is " + quote_for_message(*v) + "; HeadScope reads BPE models without one.");
  impl->fuse_unk = r.bool_of(model, "fuse_unk", false, "model");
  impl->byte_fallback = r.bool_of(model, "byte_fallback", false, "model");
  impl->ignore_merges = r.bool_of(model, "ignore_merges", false, "model");

  if (!parsed.has_vocab) r.fail("model has no \"vocab\".");
  int32_t max_id = -1;
  for (const auto& entry : parsed.vocab) max_id = std::max(max_id, entry.second);

  // Added tokens: ids of their own, or of the model vocabulary.
  if (file.contains("added_tokens") && !file["added_tokens"].is_null()) {
    const json& list = file["added_tokens"];
    if (!list.is_array()) r.fail("added_tokens must be a list.");
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string where = "added_tokens[" + std::to_string(i) + "]";
      const json& t = list[i];
      const json& id = r.member(t, "id", where);
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > kMaxTokenId)
        r.fail(where + ".id must be an integer from 0 to " + std::to_string(kMaxTokenId) + ".");
      HfAddedToken a{static_cast<int32_t>(id.get<int64_t>()), r.string_of(t, "content", where),
                   r.bool_of(t, "single_word", false, where), r.bool_of(t, "lstrip", false, where),
                   r.bool_of(t, "rstrip", false, where), r.bool_of(t, "normalized", !r.bool_of(t, "special", false, where), where)};
      if (a.content.empty()) r.fail(where + ".content is empty.");
      if (find_invalid_utf8(a.content)) r.fail(where + ".content is not valid UTF-8.");
      max_id = std::max(max_id, a.id);
      impl->added.push_back(std::move(a));
    }
  }
  if (max_id < 0) r.fail("model.vocab is empty.");
  impl->vocab_size = max_id + 1;
  const auto n = static_cast<size_t>(impl->vocab_size);
  impl->model_spelling.resize(n);
  impl->in_model.assign(n, false);
  size_t slots = 16;
  while (slots < 2 * parsed.vocab.size()) slots *= 2;
  impl->vocab_index.assign(slots, -1);
  for (auto& [spelling, id] : parsed.vocab) {
    const auto i = static_cast<size_t>(id);
    if (impl->in_model[i] && impl->model_spelling[i] != spelling)
      r.fail("model.vocab gives id " + std::to_string(id) + " to both " + quote_for_message(impl->model_spelling[i]) +
             " and " + quote_for_message(spelling) + "; every id must belong to one token.");
    impl->model_spelling[i] = std::move(spelling);
    impl->in_model[i] = true;
    impl->index_spelling(id);
  }
  parsed.vocab = {};
  impl->added_of_id.assign(n, -1);
  for (size_t k = 0; k < impl->added.size(); ++k) impl->added_of_id[static_cast<size_t>(impl->added[k].id)] = static_cast<int32_t>(k);
  // Longest first, so that the first hit at a position is the longest (leftmost-longest).
  std::vector<size_t> order(impl->added.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return impl->added[a].content.size() > impl->added[b].content.size(); });
  for (const size_t k : order) {
    const HfAddedToken& a = impl->added[k];
    (a.normalized ? impl->normalized_by_first_byte : impl->raw_by_first_byte)[static_cast<uint8_t>(a.content[0])].push_back(k);
  }

  // unk_token and byte fallback.
  if (const auto unk = r.optional_string(model, "unk_token", "model")) {
    const auto id = impl->find(*unk);
    if (!id) r.fail("model.unk_token " + quote_for_message(*unk) + " is not in model.vocab.");
    impl->unk_id = id;
  }
  impl->byte_fallback_ids.fill(-1);
  if (impl->byte_fallback) {
    const char* hex = "0123456789ABCDEF";
    for (int b = 0; b < 256; ++b)
      if (const auto id = impl->find(std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">")) impl->byte_fallback_ids[b] = *id;
  }

  // Merges: every part and result must be in the vocabulary, as Hugging Face requires.
  if (!parsed.has_merges) r.fail("model has no \"merges\".");
  if (parsed.merges.size() > static_cast<size_t>(kMaxTokenId)) r.fail("model.merges is longer than HeadScope accepts.");
  impl->merges.reserve(parsed.merges.size());
  std::string joined;
  for (size_t rank = 0; rank < parsed.merges.size(); ++rank) {
    const auto& [left, right] = parsed.merges[rank];
    joined.assign(left).append(right);
    const auto a = impl->find(left), b = impl->find(right), ab = impl->find(joined);
    if (!a || !b || !ab)
      r.fail("model.merges[" + std::to_string(rank) + "] (" + quote_for_message(left) + ", " + quote_for_message(right) +
             "): " + quote_for_message(!a ? left : !b ? right : joined) +
             " is not in model.vocab; the merges and the vocabulary belong to different tokenizers.");
    impl->merges.insert_or_assign(*a, *b, Merge{static_cast<int32_t>(rank), *ab});
  }
  parsed.merges = {};

  // The pipeline.
  if (file.contains("normalizer") && !file["normalizer"].is_null())
    read_normalizer(file["normalizer"], r, "normalizer", impl->normalizer);
  if (file.contains("pre_tokenizer") && !file["pre_tokenizer"].is_null())
    read_pre_tokenizer(file["pre_tokenizer"], r, "pre_tokenizer", impl->pre_tokenizer);
  if (file.contains("decoder") && !file["decoder"].is_null()) read_decoder(file["decoder"], r, "decoder", impl->decoder);
  impl->byte_level = std::any_of(impl->pre_tokenizer.begin(), impl->pre_tokenizer.end(),
                                 [](const PreTokenizerStep& s) { return s.kind == PreTokenizerStep::Kind::ByteLevel; });

  HfTokenizer tokenizer(std::move(impl));

  // BOS from the post-processor's template for a single text.
  std::vector<const json*> processors;
  if (file.contains("post_processor") && file["post_processor"].is_object()) {
    const json& p = file["post_processor"];
    if (p.value("type", "") == "Sequence" && p.contains("processors") && p["processors"].is_array())
      for (const json& q : p["processors"]) processors.push_back(&q);
    else processors.push_back(&p);
  }
  for (const json* p : processors) {
    if (!p->is_object() || p->value("type", "") != "TemplateProcessing") continue;
    const json& single = (*p).contains("single") ? (*p)["single"] : json();
    if (!single.is_array() || single.empty() || !single[0].is_object()) continue;
    if (single[0].contains("Sequence")) {
      tokenizer.adds_bos_ = false;
    } else if (single[0].contains("SpecialToken") && single[0]["SpecialToken"].is_object()) {
      const json& special = single[0]["SpecialToken"];
      const std::string name = special.value("id", "");
      std::optional<int32_t> id;
      if ((*p).contains("special_tokens") && (*p)["special_tokens"].contains(name)) {
        const json& ids = (*p)["special_tokens"][name].value("ids", json::array());
        if (ids.is_array() && ids.size() == 1 && ids[0].is_number_integer()) id = ids[0].get<int32_t>();
      }
      if (!id) id = tokenizer.id_of(name);
      tokenizer.adds_bos_ = true;
      if (id && *id >= 0 && *id < tokenizer.vocab_size()) tokenizer.bos_token_id_ = id;
    }
  }
  return tokenizer;
}

std::vector<int32_t> HfTokenizer::encode(std::string_view text) const {
  require_utf8_text(text);
  const Impl& t = *impl_;
  std::vector<int32_t> ids;
  if (text.empty()) return ids;
  std::vector<Piece> pieces = t.split_added({Piece{std::string(text), true, {}}}, false);
  for (Piece& p : pieces)
    if (!p.added) p.text = normalize(t.normalizer, std::move(p.text));
  pieces = t.split_added(std::move(pieces), true);
  for (Piece& p : pieces) {
    if (p.added) {
      ids.push_back(*p.added);
      continue;
    }
    for (const Piece& word : pre_tokenize(t.pre_tokenizer, std::move(p))) t.bpe_word(word.text, ids);
  }
  return ids;
}

std::string HfTokenizer::decode(std::span<const int32_t> ids) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (const int32_t id : ids) {
    if (!impl_->known(id))
      throw Error("token id " + std::to_string(id) + " is not in the vocabulary (ids 0 to " +
                  std::to_string(impl_->vocab_size - 1) + ").");
    tokens.push_back(impl_->spelling(id));
  }
  return decode_tokens(impl_->decoder, std::move(tokens), true);
}

std::string HfTokenizer::token_bytes(int32_t id) const {
  const int32_t one[] = {id};
  if (!impl_->known(id)) return decode(one);  // throws
  return decode_tokens(impl_->decoder, {impl_->spelling(id)}, false);
}

std::string HfTokenizer::kind() const {
  return impl_->byte_level ? "byte-level BPE (tokenizer.json)" : "SentencePiece-style BPE (tokenizer.json)";
}

int32_t HfTokenizer::vocab_size() const { return impl_->vocab_size; }

std::optional<int32_t> HfTokenizer::end_of_text_id() const {
  for (const char* name : {"<|endoftext|>", "<|end_of_text|>", "</s>"})
    if (const auto id = id_of(name)) return id;
  return std::nullopt;
}

std::optional<int32_t> HfTokenizer::id_of(std::string_view vocab_string) const {
  for (const HfAddedToken& a : impl_->added)
    if (a.content == vocab_string) return a.id;
  return impl_->find(vocab_string);
}

}  // namespace hs
