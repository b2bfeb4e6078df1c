// Fuzz target: a llama2.c checkpoint .bin (llama2c_checkpoint_from_bytes, core/model/llama2c.h):
// its 7-int32 header, the file size the header implies, and the weights bound from it. Either it is
// refused with hs::Error, or its config has the header's sizes and a forward pass over the first
// tokens of the vocabulary runs on its weights (reading every one of them) to logits of
// [pos, d_vocab].
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "core/error.h"
#include "core/model/forward.h"
#include "core/model/llama2c.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  hs::Llama2cCheckpoint checkpoint;
  try {
    checkpoint = hs::llama2c_checkpoint_from_bytes(std::span<const uint8_t>(data, size), "fuzz.bin");
  } catch (const hs::Error&) {
    return 0;
  }
  int32_t h[7];
  std::memcpy(h, data, sizeof h);  // accepted, so at least the header is there
  const hs::ModelConfig& c = checkpoint.config;
  if (c.d_model != h[0] || c.d_mlp != h[1] || c.n_layers != h[2] || c.n_heads != h[3] || c.n_key_value_heads != h[4] ||
      c.d_vocab != std::abs(h[5]) || c.n_ctx != h[6] || c.d_head * c.n_heads != c.d_model)
    __builtin_trap();
  std::vector<int32_t> tokens;
  for (int32_t t = 0; t < std::min(c.n_ctx, 3); ++t) tokens.push_back(t % c.d_vocab);
  const auto cache = hs::forward(checkpoint.weights, tokens);
  if (cache->logits.rows() != static_cast<int64_t>(tokens.size()) || cache->logits.cols() != c.d_vocab)
    __builtin_trap();
  return 0;
}
