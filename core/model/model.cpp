#include "core/model/model.h"

#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/model/fingerprint.h"
#include "core/model/llama2c.h"
#include "core/model/memory_guard.h"
#include "core/model/shard_index.h"
#include "core/tensor/safetensors.h"
#include "core/tokenizer/load.h"
#include "core/tokenizer/llama2c_tokenizer.h"

namespace hs {
namespace fs = std::filesystem;
namespace {

// The shard files model.safetensors.index.json names (shard_index.h), each of which must be a file
// beside the index.
std::vector<fs::path> shard_paths(const fs::path& index_path) {
  const std::string where = index_path.string();
  std::error_code ec;
  if (!fs::is_regular_file(index_path, ec))
    throw Error(where + ": is not a regular file; expected the JSON index of a sharded checkpoint.");
  if (fs::file_size(index_path, ec) > 64 * 1024 * 1024) throw Error(where + ": is larger than 64 MB; not an index.");
  std::ifstream in(index_path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  std::vector<fs::path> out;
  for (const std::string& name : parse_shard_index(text.str(), where)) {
    const fs::path p = index_path.parent_path() / name;
    if (!fs::exists(p, ec))
      throw Error(index_path.parent_path().string() + ": the shard " + name +
                  " named in model.safetensors.index.json is missing. Download every shard of the checkpoint.");
    out.push_back(p);
  }
  return out;
}

}  // namespace

std::shared_ptr<const Model> Model::load(const fs::path& dir, const ProgressFn& progress) {
  auto report = [&](double f, const std::string& stage) {
    if (progress) progress(f, stage);
  };
  std::error_code ec;
  if (const std::optional<Llama2cFiles> files = find_llama2c_files(dir)) {
    std::shared_ptr<Model> m(new Model());
    m->dir_ = dir;
    m->name_ = files->checkpoint.stem().string();
    report(0.05, "reading " + files->checkpoint.filename().string());
    Llama2cCheckpoint checkpoint = load_llama2c_checkpoint(files->checkpoint);
    m->weights_ = std::move(checkpoint.weights);
    report(0.85, "reading " + files->tokenizer.filename().string());
    m->tokenizer_ = load_llama2c_tokenizer(files->tokenizer, checkpoint.config.d_vocab);
    m->warnings_ = m->weights_->warnings();
    m->fingerprint_ = files_fingerprint({files->checkpoint, files->tokenizer});
    report(1.0, "ready");
    return m;
  }
  if (!fs::exists(dir, ec))
    throw Error(dir.string() +
                ": no such folder. Choose a Hugging Face model folder (config.json, the weights in safetensors and the "
                "tokenizer's files).");
  if (!fs::is_directory(dir, ec))
    throw Error(dir.string() + ": is a file, not a folder. Choose the folder that holds config.json and model.safetensors.");

  const fs::path weights_path = dir / "model.safetensors", index_path = dir / "model.safetensors.index.json";
  const bool sharded = !fs::exists(weights_path, ec) && fs::exists(index_path, ec);
  if (!fs::exists(weights_path, ec) && !sharded) {
    for (const char* pickle : {"pytorch_model.bin", "model.pt", "model.bin", "pytorch_model.bin.index.json"})
      if (fs::exists(dir / pickle, ec))
        throw Error(dir.string() + ": has only a pickle checkpoint (" + pickle +
                    "), which can run arbitrary code when loaded, so HeadScope does not open it. Convert it once, "
                    "in a Python you trust: `from transformers import AutoModelForCausalLM; "
                    "AutoModelForCausalLM.from_pretrained(DIR).save_pretrained(DIR, safe_serialization=True)`, "
                    "which writes model.safetensors.");
    throw Error(dir.string() +
                ": no model.safetensors. A Hugging Face model folder holds config.json, model.safetensors (or its "
                "shards with model.safetensors.index.json) and the tokenizer's files (vocab.json and merges.txt, or "
                "tokenizer.json).");
  }

  std::shared_ptr<Model> m(new Model());
  m->dir_ = dir;
  m->name_ = fs::absolute(dir, ec).lexically_normal().filename().string();
  if (m->name_.empty()) m->name_ = fs::absolute(dir, ec).lexically_normal().parent_path().filename().string();

  report(0.02, "reading config.json");
  const ModelConfig config = load_config(dir / "config.json");
  std::vector<fs::path> weight_files = {dir / "config.json"};
  if (sharded) {
    report(0.05, "mapping the shards of model.safetensors");
    std::vector<std::shared_ptr<const SafetensorsFile>> shards;
    std::vector<fs::path> shard_files = shard_paths(index_path);
    for (const fs::path& p : shard_files) shards.push_back(SafetensorsFile::open(p));
    weight_files.push_back(index_path);
    weight_files.insert(weight_files.end(), shard_files.begin(), shard_files.end());
    std::vector<const SafetensorsFile*> views;
    for (const auto& f : shards) views.push_back(f.get());
    check_load_memory(views, config, m->name_);
    report(0.15, "checking and converting weights");
    m->weights_ = Weights::load(std::move(shards), config, index_path.string());
  } else {
    report(0.05, "mapping model.safetensors");
    weight_files.push_back(weights_path);
    auto file = SafetensorsFile::open(weights_path);
    check_load_memory(*file, config, m->name_);
    report(0.15, "checking and converting weights");
    m->weights_ = Weights::load(file, config);
  }
  report(0.85, "reading the tokenizer");
  m->tokenizer_ = load_tokenizer(dir);
  m->warnings_ = m->weights_->warnings();
  // The tokenizer's files too: a result made from text depends on how the text was tokenized.
  for (const char* name : {"tokenizer.json", "vocab.json", "merges.txt", "tokenizer_config.json", "special_tokens_map.json"})
    if (fs::is_regular_file(dir / name, ec)) weight_files.push_back(dir / name);
  m->fingerprint_ = files_fingerprint(weight_files);
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
