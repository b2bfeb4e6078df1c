#include "core/tokenizer/load.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>

#include "core/error.h"
#include "core/tokenizer/byte_level_bpe.h"
#include "core/tokenizer/hf_tokenizer.h"

namespace hs {
namespace fs = std::filesystem;
namespace {

std::string read_small_file(const fs::path& p, size_t limit) {
  std::error_code ec;
  // A pipe would block the read and a device such as /dev/zero would never end.
  if (fs::exists(p, ec) && !fs::is_regular_file(p, ec))
    throw Error(p.string() + ": is not a regular file; expected a JSON file.");
  if (const auto size = fs::file_size(p, ec); !ec && size > limit)
    throw Error(p.string() + ": is larger than " + std::to_string(limit >> 20) + " MB; not a tokenizer file.");
  std::ifstream in(p, std::ios::binary);
  if (!in) throw Error(p.string() + ": cannot open; check that it exists and is readable.");
  // One read into a buffer of the file's size (a stream copy of a large tokenizer.json is slow),
  // then whatever is left in case the file grew.
  std::string s(ec ? 0 : static_cast<size_t>(fs::file_size(p, ec)), '\0');
  in.read(s.data(), static_cast<std::streamsize>(s.size()));
  s.resize(static_cast<size_t>(in.gcount()));
  std::ostringstream rest;
  rest << in.rdbuf();
  s += rest.str();
  if (s.size() > limit) throw Error(p.string() + ": is larger than " + std::to_string(limit >> 20) + " MB; not a tokenizer file.");
  return s;
}

// A tokenizer.json with nothing but its BPE model (no normalizer, pre-tokenizer or decoder) is
// read as GPT-2's vocab.json + merges.txt, which hold the same two tables; HeadScope did so before
// it read the rest of the file, and such files come from GPT-2-style folders. Every other
// tokenizer.json runs as Hugging Face runs it (HfTokenizer).
std::shared_ptr<Tokenizer> from_tokenizer_json(const fs::path& p) {
  TokenizerJson file = parse_tokenizer_json(read_small_file(p, 256u << 20), p.string());
  const nlohmann::json& j = file.rest;
  if (!j.is_object() || !j.contains("model") || !j["model"].is_object())
    throw Error(p.string() + ": expected a Hugging Face tokenizer.json with a \"model\" object.");
  auto absent = [&](const char* key) { return !j.contains(key) || j[key].is_null(); };
  const nlohmann::json& model = j["model"];
  const bool plain_model = !model.contains("type") || model["type"] == "BPE";
  if (!(plain_model && absent("normalizer") && absent("pre_tokenizer") && absent("decoder") &&
        !model.value("byte_fallback", false)))
    return std::make_shared<HfTokenizer>(HfTokenizer::from_parsed(std::move(file), p.string()));

  if (!file.has_vocab || !file.has_merges)
    throw Error(p.string() + ": expected a Hugging Face tokenizer.json with a BPE model (model.vocab, model.merges).");
  nlohmann::json vocab = nlohmann::json::object();
  for (const auto& [spelling, id] : file.vocab) vocab[spelling] = id;
  std::string merges_txt = "#version: 0.2\n";
  for (const auto& [left, right] : file.merges) merges_txt += left + " " + right + "\n";
  return std::make_shared<ByteLevelBpeTokenizer>(ByteLevelBpeTokenizer::from_strings(vocab.dump(), merges_txt, p.string()));
}

// The tokenizer's own BOS, as Hugging Face reads it: `bos_token` (a string, or {"content": ...})
// of the first of the two files that names one the vocabulary has.
std::optional<int32_t> bos_of_special_tokens(const fs::path& dir, const Tokenizer& tokenizer) {
  std::error_code ec;
  for (const char* f : {"tokenizer_config.json", "special_tokens_map.json"}) {
    if (!fs::exists(dir / f, ec)) continue;
    try {
      const nlohmann::json j = nlohmann::json::parse(read_small_file(dir / f, 16u << 20));
      if (!j.is_object() || !j.contains("bos_token")) continue;
      const nlohmann::json& b = j["bos_token"];
      const nlohmann::json& content = b.is_object() && b.contains("content") ? b["content"] : b;
      if (!content.is_string()) continue;
      if (const auto id = tokenizer.id_of(content.get<std::string>())) return id;
    } catch (const std::exception&) {
      // A damaged optional file is not worth refusing the model for; BOS falls back (Model::bos_id).
    }
  }
  return std::nullopt;
}

// `add_bos_token` of tokenizer_config.json, when it is there and true or false.
std::optional<bool> add_bos_token(const fs::path& dir) {
  std::error_code ec;
  if (!fs::exists(dir / "tokenizer_config.json", ec)) return std::nullopt;
  try {
    const nlohmann::json j = nlohmann::json::parse(read_small_file(dir / "tokenizer_config.json", 16u << 20));
    if (j.is_object() && j.contains("add_bos_token") && j["add_bos_token"].is_boolean()) return j["add_bos_token"].get<bool>();
  } catch (const std::exception&) {
    // As for bos_token: a damaged optional file leaves the tokenizer's own rule.
  }
  return std::nullopt;
}

}  // namespace

std::shared_ptr<const Tokenizer> load_tokenizer(const fs::path& dir) {
  std::error_code ec;
  std::shared_ptr<Tokenizer> tokenizer;
  const fs::path vocab = dir / "vocab.json", merges = dir / "merges.txt";
  if (fs::exists(vocab, ec) && fs::exists(merges, ec)) {
    tokenizer = std::make_shared<ByteLevelBpeTokenizer>(ByteLevelBpeTokenizer::load(vocab, merges));
  } else if (fs::exists(dir / "tokenizer.json", ec)) {
    tokenizer = from_tokenizer_json(dir / "tokenizer.json");
  } else {
    throw Error(dir.string() + ": no tokenizer: expected vocab.json and merges.txt (or tokenizer.json) beside "
                "model.safetensors. Copy them from the model's original folder.");
  }
  // The special-token files name BOS for transformers, whatever tokenizer.json's template says.
  if (const auto bos = bos_of_special_tokens(dir, *tokenizer)) tokenizer->bos_token_id_ = bos;
  if (const auto adds = add_bos_token(dir)) tokenizer->adds_bos_ = adds;
  return tokenizer;
}

}  // namespace hs
