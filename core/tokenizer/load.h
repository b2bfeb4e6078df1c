// Choosing and reading the tokenizer of a model folder. The one place that knows which files
// make which kind of tokenizer; callers get the interface (core/tokenizer/tokenizer.h).
#pragma once

#include <filesystem>
#include <memory>

#include "core/tokenizer/tokenizer.h"

namespace hs {

// Reads the tokenizer of `model_dir` from the first of these it holds:
//   vocab.json + merges.txt   GPT-2 byte-level BPE (ByteLevelBpeTokenizer)
//   tokenizer.json            a Hugging Face fast-tokenizer file; its BPE model (model.vocab,
//                             model.merges) is read as GPT-2 byte-level BPE
// then the tokenizer's own BOS (Tokenizer::bos_token_id) from the `bos_token` of
// tokenizer_config.json, else of special_tokens_map.json; a damaged or missing one of these is
// ignored. Throws hs::Error naming the file and what is wrong, or, when the folder has none of
// the files, what it should hold.
std::shared_ptr<const Tokenizer> load_tokenizer(const std::filesystem::path& model_dir);

}  // namespace hs
