#include "core/model/model.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "core/model/memory_guard.h"
#include "core/tensor/safetensors.h"

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
  std::ostringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  if (s.size() > limit) throw Error(p.string() + ": is larger than " + std::to_string(limit >> 20) + " MB; not a tokenizer file.");
  return s;
}

// A fast-tokenizer folder may carry only tokenizer.json; its BPE model holds the same vocabulary
// and merges as vocab.json + merges.txt.
std::shared_ptr<const Tokenizer> tokenizer_from_tokenizer_json(const fs::path& p) {
  const std::string text = read_small_file(p, 256u << 20);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    throw Error(p.string() + ": not valid JSON (" + e.what() + ").");
  }
  if (!j.is_object() || !j.contains("model") || !j["model"].is_object() || !j["model"].contains("vocab") ||
      !j["model"].contains("merges"))
    throw Error(p.string() + ": expected a Hugging Face tokenizer.json with a BPE model (model.vocab, model.merges).");
  const auto& merges = j["model"]["merges"];
  if (!merges.is_array()) throw Error(p.string() + ": model.merges must be a list.");
  std::string merges_txt = "#version: 0.2\n";
  for (const auto& m : merges) {
    if (m.is_string()) merges_txt += m.get<std::string>() + "\n";
    else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string())
      merges_txt += m[0].get<std::string>() + " " + m[1].get<std::string>() + "\n";
    else throw Error(p.string() + ": a merge in model.merges is neither \"a b\" nor [\"a\", \"b\"].");
  }
  return std::make_shared<const Tokenizer>(Tokenizer::from_strings(j["model"]["vocab"].dump(), merges_txt, p.string()));
}

}  // namespace

std::shared_ptr<const Model> Model::load(const fs::path& dir, const ProgressFn& progress) {
  auto report = [&](double f, const std::string& stage) {
    if (progress) progress(f, stage);
  };
  std::error_code ec;
  if (!fs::exists(dir, ec)) throw Error(dir.string() + ": no such folder. Choose a Hugging Face GPT-2 model folder.");
  if (!fs::is_directory(dir, ec))
    throw Error(dir.string() + ": is a file, not a folder. Choose the folder that holds config.json and model.safetensors.");

  const fs::path weights_path = dir / "model.safetensors";
  if (!fs::exists(weights_path, ec)) {
    for (const char* pickle : {"pytorch_model.bin", "model.pt", "model.bin", "pytorch_model.bin.index.json"})
      if (fs::exists(dir / pickle, ec))
        throw Error(dir.string() + ": has only a pickle checkpoint (" + pickle +
                    "), which can run arbitrary code when loaded, so HeadScope does not open it. Convert it once, "
                    "in a Python you trust: `from transformers import GPT2LMHeadModel; "
                    "GPT2LMHeadModel.from_pretrained(DIR).save_pretrained(DIR, safe_serialization=True)`, "
                    "which writes model.safetensors.");
    if (fs::exists(dir / "model.safetensors.index.json", ec))
      throw Error(dir.string() + ": the weights are sharded (model.safetensors.index.json); HeadScope reads a single "
                  "model.safetensors. Re-save with a larger max_shard_size.");
    throw Error(dir.string() + ": no model.safetensors. A Hugging Face GPT-2 folder holds config.json, "
                "model.safetensors, vocab.json and merges.txt.");
  }

  std::shared_ptr<Model> m(new Model());
  m->dir_ = dir;
  m->name_ = fs::absolute(dir, ec).lexically_normal().filename().string();
  if (m->name_.empty()) m->name_ = fs::absolute(dir, ec).lexically_normal().parent_path().filename().string();

  report(0.02, "reading config.json");
  const ModelConfig config = load_config(dir / "config.json");
  report(0.05, "mapping model.safetensors");
  auto file = SafetensorsFile::open(weights_path);
  check_load_memory(*file, config, m->name_);
  report(0.15, "checking and converting weights");
  m->weights_ = Weights::load(file, config);
  report(0.85, "reading the tokenizer");
  const fs::path vocab = dir / "vocab.json", merges = dir / "merges.txt";
  if (fs::exists(vocab, ec) && fs::exists(merges, ec)) {
    m->tokenizer_ = std::make_shared<const Tokenizer>(Tokenizer::load(vocab, merges));
  } else if (fs::exists(dir / "tokenizer.json", ec)) {
    m->tokenizer_ = tokenizer_from_tokenizer_json(dir / "tokenizer.json");
  } else {
    throw Error(dir.string() + ": no tokenizer: expected vocab.json and merges.txt (or tokenizer.json) beside "
                "model.safetensors. Copy them from the model's original folder.");
  }
  // The tokenizer's own BOS, as Hugging Face reads it (a string, or {"content": ...}).
  for (const char* f : {"tokenizer_config.json", "special_tokens_map.json"}) {
    if (m->tokenizer_bos_ || !fs::exists(dir / f, ec)) continue;
    try {
      const nlohmann::json j = nlohmann::json::parse(read_small_file(dir / f, 16u << 20));
      if (!j.is_object() || !j.contains("bos_token")) continue;
      const nlohmann::json& b = j["bos_token"];
      const nlohmann::json& content = b.is_object() && b.contains("content") ? b["content"] : b;
      if (content.is_string()) m->tokenizer_bos_ = m->tokenizer_->id_of(content.get<std::string>());
    } catch (const std::exception&) {
      // A damaged optional file is not worth refusing the model for; BOS falls back below.
    }
  }
  m->warnings_ = m->weights_->warnings();
  if (m->tokenizer_->vocab_size() > config.d_vocab)
    m->warnings_.push_back("the tokenizer has " + std::to_string(m->tokenizer_->vocab_size()) +
                           " tokens but the model only " + std::to_string(config.d_vocab) +
                           " (vocab_size); text that uses the extra tokens cannot run.");
  report(1.0, "ready");
  return m;
}

int32_t Model::bos_id() const {
  if (tokenizer_bos_ && *tokenizer_bos_ < config().d_vocab) return *tokenizer_bos_;
  if (auto eot = tokenizer_->end_of_text_id(); eot && *eot < config().d_vocab) return *eot;
  if (config().bos_token_id && *config().bos_token_id < config().d_vocab) return *config().bos_token_id;
  throw Error(name_ + ": has no beginning-of-sequence token (no bos_token_id in config.json and no <|endoftext|> in "
              "the vocabulary); run without BOS (--no-bos).");
}

std::vector<int32_t> Model::encode(std::string_view text, bool prepend_bos) const {
  std::vector<int32_t> ids;
  if (prepend_bos) ids.push_back(bos_id());
  const std::vector<int32_t> body = tokenizer_->encode(text);
  ids.insert(ids.end(), body.begin(), body.end());
  return ids;
}

std::shared_ptr<ActivationCache> Model::run(std::span<const int32_t> tokens, const RunOptions& options,
                                            std::shared_ptr<const ActivationCache> previous) const {
  return forward(weights_, tokens, options, std::move(previous));
}

}  // namespace hs
