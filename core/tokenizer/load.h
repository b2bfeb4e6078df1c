// Choosing and reading the tokenizer of a model folder. The one place that knows which files
// make which kind of tokenizer; callers get the interface (core/tokenizer/tokenizer.h).
#pragma once

#include <filesystem>
#include <memory>

#include "core/tokenizer/tokenizer.h"

namespace hs {

// Reads the tokenizer of `model_dir` from the first of these it holds:
//   vocab.json + merges.txt   GPT-2 byte-level BPE (ByteLevelBpeTokenizer)
//   tokenizer.json            a Hugging Face fast-tokenizer file with a BPE model (HfTokenizer:
//                             byte-level as GPT-2, Pythia, Llama 3, Qwen2; SentencePiece-style as
//                             Llama 2). One holding only its BPE model is read as vocab.json +
//                             merges.txt would be.
// then the tokenizer's own BOS (Tokenizer::bos_token_id) from the `bos_token` of
// tokenizer_config.json, else of special_tokens_map.json, and Tokenizer::adds_bos from
// `add_bos_token` of tokenizer_config.json; these win over tokenizer.json's post_processor, and a
// damaged or missing one of these files is ignored. Throws hs::Error naming the file and what is
// wrong (for tokenizer.json also a model, normalizer, pre-tokenizer or decoder HeadScope does not
// read), or, when the folder has none of the files, what it should hold. llama2.c's tokenizer
// .bin is read by load_llama2c_tokenizer (core/tokenizer/llama2c_tokenizer.h).
std::shared_ptr<const Tokenizer> load_tokenizer(const std::filesystem::path& model_dir);

}  // namespace hs
