// The config files of SAE and transcoder folders, parsed on their own (no weights): SAELens's
// cfg.json and circuit-tracer's config.yaml. Separate from the loader so the fuzz target
// (tools/fuzz/fuzz_sae_config.cpp) reaches them with text alone.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/features/sae.h"

namespace hs {

// What a SAELens cfg.json says, after SAELens's own defaulting (handle_config_defaulting).
struct SaeLensConfig {
  std::string architecture;   // standard, jumprelu, topk, gated, transcoder, skip_transcoder, jumprelu_transcoder
  std::string source_format;  // "saelens v6" or "saelens legacy"
  std::string hook_in, hook_out;
  int layer = -1;
  int d_in = 0, d_sae = 0;
  int d_out = 0;              // transcoders; 0 when the file gives none (then b_dec's length)
  std::string normalize_activations;  // as SAELens 6 names it after conversion
  SaeNorm norm = SaeNorm::None;
  bool apply_b_dec_to_input = true;
  bool hook_z = false;
  bool rescale_acts_by_decoder_norm = false;
  int k = 0;                  // topk
  bool finetuning_scaling_factor = false;
  bool transcoder() const { return architecture.find("transcoder") != std::string::npos; }
};
// `source` names the file in messages. Throws hs::Error.
SaeLensConfig parse_saelens_config(std::string_view json_text, const std::string& source);

// What a circuit-tracer config.yaml says.
struct TranscoderSetConfig {
  std::string feature_input_hook, feature_output_hook;  // as written ("ln2.hook_normalized")
  std::string activation;     // "", "jumprelu", "relu" or "topk"
  int k = 0;                  // topk, when given
  std::vector<std::string> transcoders;  // the files, layer i at index i; empty: layer_{i}.safetensors
};
TranscoderSetConfig parse_transcoder_set_config(std::string_view yaml_text, const std::string& source);

// circuit-tracer's hook for block `layer` as a TransformerLens name: "blocks.{layer}.{hook}",
// with the hooks its ReplacementModel adds to each MLP read as HeadScope's equivalents
// (mlp.hook_in: ln2.hook_normalized; mlp.hook_out: hook_mlp_out, *before_post_norm set).
// Throws hs::Error (naming `source`) for a hook HeadScope does not know.
std::string transcoder_set_hook(std::string_view hook, int layer, const std::string& source, const char* field,
                                bool* before_post_norm);

// The block index of "blocks.{l}.<name>" (-1 for a model-wide hook); throws for a name that is
// not a hook of the activation cache's contract.
int sae_hook_layer(const std::string& hook, const std::string& source, const char* field);

}  // namespace hs
