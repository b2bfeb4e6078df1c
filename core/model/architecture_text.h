// One line that says which architecture a model is, for the status bar, `info` and figure
// subtitles: the family, then every option that changes what the views mean.
#pragma once

#include <string>

namespace hs {

struct ModelConfig;

// "GPT-2: LayerNorm, learned absolute positions, 12 heads, MLP (gelu_new), tied unembedding" or
// "Llama: RMSNorm, rotary (θ 10000, llama3 ×8), grouped-query attention (9 query heads share
// 3 key/value heads), SwiGLU MLP, tied unembedding". Parallel blocks, partial rotary and biases
// are named when present.
std::string describe_architecture(const ModelConfig& c, bool tied_unembedding);

}  // namespace hs
