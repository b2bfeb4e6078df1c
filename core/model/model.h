// A loaded model folder: config, weights and tokenizer, immutable once loaded and shared between
// threads (the GUI's worker threads all read the same Model).
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/model/cache.h"
#include "core/model/config.h"
#include "core/model/forward.h"
#include "core/model/weights.h"
#include "core/tokenizer/tokenizer.h"

namespace hs {

// fraction in [0, 1] and a short description of the stage ("mapping weights").
using ProgressFn = std::function<void(double fraction, const std::string& stage)>;

class Model {
 public:
  // Loads a Hugging Face model folder of a family in the registry (architecture.h): config.json,
  // model.safetensors (or its shards and model.safetensors.index.json), vocab.json and merges.txt
  // (or tokenizer.json). Or a llama2.c model (llama2c.h): its checkpoint .bin, or a folder holding
  // it, with its tokenizer .bin (tokenizer.bin or tok*.bin) beside it.
  // A folder with only a pickle checkpoint (pytorch_model.bin) is refused with a message that
  // says how to convert it. Throws hs::Error; nothing is left half-loaded.
  static std::shared_ptr<const Model> load(const std::filesystem::path& dir, const ProgressFn& progress = {});

  const std::string& name() const { return name_; }  // the folder's name
  const std::filesystem::path& dir() const { return dir_; }
  // Which files this model was made of (fingerprint.h): the same for a copy of the same files, a
  // different one for any other weights or tokenizer. A result kept beyond its run carries it.
  const std::string& fingerprint() const { return fingerprint_; }
  const ModelConfig& config() const { return weights_->config(); }
  const std::shared_ptr<const Weights>& weights() const { return weights_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  // Warnings from loading (non-finite weights, vocabulary size mismatch), one sentence each.
  const std::vector<std::string>& warnings() const { return warnings_; }

  // The BOS id, as Hugging Face's tokenizer.bos_token_id (which TransformerLens prepends): the
  // bos_token of tokenizer_config.json or special_tokens_map.json when the vocabulary has it, else
  // <|endoftext|>, else config.json's bos_token_id. Throws when there is none.
  int32_t bos_id() const;
  // Tokenizes `text`, with BOS first when asked.
  std::vector<int32_t> encode(std::string_view text, bool prepend_bos) const;
  // `previous`: an earlier run of this model whose common token prefix is reused (see forward()).
  std::shared_ptr<ActivationCache> run(std::span<const int32_t> tokens, const RunOptions& options = {},
                                       std::shared_ptr<const ActivationCache> previous = nullptr) const;

 private:
  Model() = default;
  std::string name_;
  std::filesystem::path dir_;
  std::string fingerprint_;
  std::shared_ptr<const Weights> weights_;
  std::shared_ptr<const Tokenizer> tokenizer_;
  std::vector<std::string> warnings_;
};

}  // namespace hs
