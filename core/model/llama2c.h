// llama2.c checkpoints (Karpathy's run.c format, as ../shared/models/stories260K): a Llama model
// in one .bin file beside its tokenizer .bin.
//
// The file: 7 little-endian int32 (dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size,
// seq_len; a negative vocab_size means the classifier is not the token embedding), then float32
// weights in run.c's order: token_embedding [vocab, dim], rms_att [layer, dim], wq [layer, dim,
// dim], wk and wv [layer, kv_dim, dim], wo [layer, dim, dim], rms_ffn [layer, dim], w1 (gate)
// [layer, hidden, dim], w2 (down) [layer, dim, hidden], w3 (up) [layer, hidden, dim], rms_final
// [dim], two unused RoPE tables of seq_len * head_size / 2 floats each, then wcls [vocab, dim]
// when unshared. Matrices are [out, in] as nn.Linear; RMSNorm eps is 1e-5, rope theta 10000.
//
// The checkpoint is read as the Llama family reads a Hugging Face folder, through the same
// description, binder and forward pass: its tensors get Llama's names. One difference is
// converted on load: run.c rotates interleaved pairs (2i, 2i+1) of each head, Hugging Face pairs
// (i, i + head_size/2), so each head's rows of wq and wk are permuted (row 2i to i, row 2i+1 to
// i + head_size/2). Scores are unchanged (q and k are permuted alike); hook_q, hook_k and their
// rotated forms list each head's dimensions in the rotate-half order.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "core/model/config.h"
#include "core/model/weights.h"

namespace hs {

struct Llama2cCheckpoint {
  ModelConfig config;
  std::shared_ptr<const Weights> weights;
};

// Reads and checks a checkpoint (header values, exact file size); throws hs::Error naming the
// file and what is wrong.
Llama2cCheckpoint load_llama2c_checkpoint(const std::filesystem::path& bin);
// The same from the file's bytes; `name` stands for the file in messages.
Llama2cCheckpoint llama2c_checkpoint_from_bytes(std::span<const uint8_t> bytes, const std::string& name);

// The files of a llama2.c model given as `path`: the checkpoint .bin itself (its tokenizer is
// `tokenizer.bin` or `tok*.bin` beside it), or a folder holding one checkpoint .bin and one
// tokenizer .bin. nullopt when `path` is neither (a Hugging Face folder, say); throws hs::Error
// when it is one but a file is missing or ambiguous.
struct Llama2cFiles {
  std::filesystem::path checkpoint;
  std::filesystem::path tokenizer;
};
std::optional<Llama2cFiles> find_llama2c_files(const std::filesystem::path& path);

}  // namespace hs
