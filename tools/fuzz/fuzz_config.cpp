// Fuzz target: config.json. Any byte string is either refused with hs::Error or gives a config
// whose sizes satisfy the invariants the loader and the forward pass rely on.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/error.h"
#include "core/model/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const hs::ModelConfig c =
        hs::parse_config(std::string_view(reinterpret_cast<const char*>(data), size), "config.json");
    const bool ok = c.model_type == "gpt2" && c.n_layers > 0 && c.n_heads > 0 && c.d_model > 0 && c.d_head > 0 &&
                    c.d_mlp > 0 && c.n_ctx > 0 && c.d_vocab > 0 && c.d_head * c.n_heads == c.d_model &&
                    c.d_model <= hs::kMaxConfigDim && c.d_mlp <= hs::kMaxConfigDim && c.n_ctx <= hs::kMaxConfigDim &&
                    c.d_vocab <= hs::kMaxConfigDim && c.norm_eps > 0.0f && c.parameter_count() > 0;
    if (!ok) __builtin_trap();
  } catch (const hs::Error&) {
  }
  return 0;
}
