// Fuzz target: config.json. Any byte string is either refused with hs::Error or gives a config
// whose sizes satisfy the invariants the loader and the forward pass rely on.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/error.h"
#include "core/model/architecture.h"
#include "core/model/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const hs::ModelConfig c =
        hs::parse_config(std::string_view(reinterpret_cast<const char*>(data), size), "config.json");
    // Invariants of every family (the seeds hold one config of each): heads share key/value heads
    // evenly, a rotation covers an even number of at most d_head dimensions, the windows name
    // every layer, the scale and caps are finite and not negative.
    const hs::Architecture& a = c.architecture;
    const int64_t q_width = int64_t{c.d_head} * c.n_heads;
    bool windows_ok = a.window.empty() || a.window.size() == static_cast<size_t>(c.n_layers);
    for (int w : a.window) windows_ok = windows_ok && w >= 0;
    const bool rotary_ok = a.positions != hs::PositionKind::Rotary ||
                           (a.rotary.dim > 0 && a.rotary.dim <= c.d_head && a.rotary.base > 0.0);
    const bool ok = a.family != nullptr && !c.model_type.empty() && c.n_layers > 0 && c.n_heads > 0 &&
                    c.n_key_value_heads > 0 && c.n_heads % c.n_key_value_heads == 0 && c.d_model > 0 &&
                    c.d_head > 0 && c.d_mlp > 0 && c.n_ctx > 0 && c.d_vocab > 0 &&
                    (a.positions != hs::PositionKind::LearnedAbsolute || q_width == c.d_model) &&
                    q_width <= hs::kMaxConfigDim && c.d_model <= hs::kMaxConfigDim && c.d_mlp <= hs::kMaxConfigDim &&
                    c.n_ctx <= hs::kMaxConfigDim && c.d_vocab <= hs::kMaxConfigDim && c.norm_eps > 0.0f &&
                    c.parameter_count() > 0 && windows_ok && rotary_ok && std::isfinite(a.attn_scale) &&
                    a.attn_scale >= 0.0f && std::isfinite(a.attn_softcap) && a.attn_softcap >= 0.0f &&
                    std::isfinite(a.final_softcap) && a.final_softcap >= 0.0f;
    if (!ok) __builtin_trap();
  } catch (const hs::Error&) {
  }
  return 0;
}
