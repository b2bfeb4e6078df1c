#include "core/model/model.h"

#include "core/error.h"
#include "core/model/memory_guard.h"
#include "core/tensor/safetensors.h"
#include "core/tokenizer/load.h"

namespace hs {
namespace fs = std::filesystem;

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
  m->tokenizer_ = load_tokenizer(dir);
  m->warnings_ = m->weights_->warnings();
  if (m->tokenizer_->vocab_size() > config.d_vocab)
    m->warnings_.push_back("the tokenizer has " + std::to_string(m->tokenizer_->vocab_size()) +
                           " tokens but the model only " + std::to_string(config.d_vocab) +
                           " (vocab_size); text that uses the extra tokens cannot run.");
  report(1.0, "ready");
  return m;
}

int32_t Model::bos_id() const {
  if (auto bos = tokenizer_->bos_token_id(); bos && *bos < config().d_vocab) return *bos;
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
