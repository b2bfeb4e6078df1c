// Fuzz target: the config files of SAE folders. Every input is read both as a SAELens cfg.json
// and as a circuit-tracer config.yaml; each parser refuses it with hs::Error or gives a config
// that satisfies what the loader relies on (hooks of the contract, sizes in range). Nothing else
// may escape: yaml-cpp's and nlohmann's exceptions must come out as hs::Error.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/error.h"
#include "core/features/sae_config.h"
#include "core/model/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const hs::SaeLensConfig c = hs::parse_saelens_config(text, "cfg.json");
    const bool ok = c.d_in > 0 && c.d_in <= hs::kMaxConfigDim && c.d_sae > 0 && c.d_out >= 0 &&
                    (c.architecture != "topk" || (c.k > 0 && c.k <= c.d_sae)) &&
                    (!c.transcoder() || !c.apply_b_dec_to_input) && !c.hook_in.empty() && !c.hook_out.empty() &&
                    (c.transcoder() || c.hook_out == c.hook_in) &&
                    hs::sae_hook_layer(c.hook_in, "fuzz", "hook") == c.layer;
    hs::sae_hook_layer(c.hook_out, "fuzz", "hook_out");  // a refusal here would be a missed check
    if (!ok) __builtin_trap();
  } catch (const hs::Error&) {
  }
  try {
    const hs::TranscoderSetConfig c = hs::parse_transcoder_set_config(text, "config.yaml");
    const bool ok = !c.feature_input_hook.empty() && !c.feature_output_hook.empty() &&
                    (c.activation != "topk" || c.k > 0) && c.transcoders.size() <= hs::kMaxLayers;
    if (!ok) __builtin_trap();
    bool before = false;
    hs::transcoder_set_hook(c.feature_input_hook, 0, "fuzz", "feature_input_hook", nullptr);
    hs::transcoder_set_hook(c.feature_output_hook, 1, "fuzz", "feature_output_hook", &before);
  } catch (const hs::Error&) {
  }
  return 0;
}
