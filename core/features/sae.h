// Sparse autoencoders (SAEs) and transcoders: reading them from the folders SAELens and
// circuit-tracer write, checking that one fits a model, and running their encoders and decoders.
//
// Formats read (load_sae_folder):
//   SAELens        cfg.json + sae_weights.safetensors, v6 configs (metadata.hook_name) and pre-6.0
//                  ones (converted as sae_lens/loading/pretrained_sae_loaders.py,
//                  handle_pre_6_0_config, does); architectures standard, jumprelu, topk, gated,
//                  transcoder, skip_transcoder, jumprelu_transcoder.
//   circuit-tracer a transcoder set: config.yaml (model_kind: transcoder_set) beside
//                  layer_{i}.safetensors, or a `transcoders:` list of files in the folder.
//   Gemma Scope    params.npz (a JumpReLU SAE or transcoder), its hook from the folder names
//                  (as SAELens's gemma_2 loaders read it from the repository and folder names), or
//                  from a cfg.json beside it.
//
// The arithmetic follows the Python code it was written from, cited where it is subtle; the
// float64 twin is tools/reference/saeref.py, and tests/fixtures/sae holds its outputs.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "core/tensor/eigen.h"

namespace hs {

struct ModelConfig;

// What the encoder does to its pre-activations.
enum class SaeActivation : uint8_t {
  Relu,      // relu(pre)
  JumpRelu,  // pre * (pre > threshold), after a ReLU when relu_after (SAELens), without (circuit-tracer)
  TopK,      // the k largest pre-activations kept, the rest 0; then a ReLU when relu_after (SAELens)
  Gated,     // (pre + b_gate > 0) * relu(pre * exp(r_mag) + b_mag)   (SAELens GatedSAE.encode)
};

// SAELens's normalize_activations, as it acts at inference.
enum class SaeNorm : uint8_t {
  None,                 // "none", and "expected_average_only_in": its factor is folded into the
                        // weights when SAELens saves an SAE, so it does nothing at run time
  ConstantNormRescale,  // x * sqrt(d_in) / |x| in, divided back out
  LayerNorm,            // (x - mean) / (unbiased std + 1e-5) in, * std + mean out
};

struct Sae {                 // one encoder/decoder (an SAE, or one layer of a transcoder set)
  std::string name;          // the folder's name, or "layer_3" of a set
  std::string architecture;  // as the file says: SAELens's architecture ("jumprelu_transcoder"),
                             // circuit-tracer's activation ("jumprelu", "relu", "topk")
  std::string source_format; // "saelens v6", "saelens legacy", "circuit-tracer", "gemma-scope npz"
  std::string hook_in, hook_out;  // TransformerLens names; hook_out == hook_in for an SAE
  int layer = -1;                 // the block of hook_in (-1 for hook_embed)
  int d_in = 0, d_sae = 0, d_out = 0;

  SaeActivation activation = SaeActivation::Relu;
  bool relu_after = true;  // JumpReLU and TopK: SAELens applies a ReLU, circuit-tracer does not
  int k = 0;               // TopK
  SaeNorm norm = SaeNorm::None;
  bool norm_out = true;    // the decoder undoes the norm (SAELens SAEs; SAELens transcoders do not)
  bool apply_b_dec_to_input = false;  // sae_in = norm(x) - b_dec before encoding
  bool rescale_acts_by_decoder_norm = false;  // TopK: pre * |W_dec[i]| before top-k, acts / |W_dec[i]| in decode
  bool hook_z = false;     // reads attn.hook_z flattened to [pos, n_heads * d_head]
  // circuit-tracer's "mlp.hook_out" is the MLP's output before a post-MLP norm; it is
  // blocks.L.hook_mlp_out only on models without one (check_sae_fits refuses the others).
  bool hook_out_before_post_norm = false;

  // Weights, float32 (converted from F16/BF16/F64 files), in SAELens's orientation whatever the
  // file's: x @ W_enc.
  RowMatrixXf W_enc;        // [d_in, d_sae]
  RowMatrixXf W_dec;        // [d_sae, d_out]
  RowVectorXf b_enc;        // [d_sae]   (gated: empty)
  RowVectorXf b_dec;        // [d_out]
  RowVectorXf threshold;    // [d_sae]   JumpReLU
  RowVectorXf b_gate, r_mag, b_mag;  // [d_sae] gated
  RowMatrixXf W_skip;       // [d_out, d_in] skip transcoders (x @ W_skip^T); empty when none
  RowVectorXf W_dec_norm;   // [d_sae]   |W_dec[i]|, for rescale_acts_by_decoder_norm

  bool is_transcoder() const { return hook_out != hook_in; }
};

struct SaeSet {
  std::filesystem::path folder;
  std::vector<Sae> saes;  // one for an SAE folder; one per layer, in layer order, for a transcoder set
};

// Reads an SAE or transcoder folder (formats above). Throws hs::Error naming the file, the field
// or tensor, and what to do, for anything it cannot honour: an unknown architecture or
// normalisation, a missing or misshapen tensor, a non-unit legacy scaling_factor, a NaN, ...
SaeSet load_sae_folder(const std::filesystem::path& dir);

// Throws hs::Error naming the mismatch unless the SAE's input hook exists in this model with
// width d_in (hook_z: n_heads * d_head) and its output hook with width d_out.
void check_sae_fits(const Sae& sae, const ModelConfig& config);

struct SaeRun {
  RowMatrixXf sae_in;        // [pos, d_in]  the hook's rows as read, before any normalisation
  RowMatrixXf feature_acts;  // [pos, d_sae] inactive latents exactly 0
  RowMatrixXf sae_out;       // [pos, d_out] the decoder's output (a transcoder's: its prediction of hook_out)
};
// x: the input hook's rows [pos, d_in], before any normalisation. Every position is encoded.
SaeRun run_sae(const Sae& sae, const RowMatrixXf& x);

// The latents alone, [pos, d_sae].
RowMatrixXf sae_encode(const Sae& sae, const RowMatrixXf& x);
// The decoder's output [pos, d_out] for (edited) latents [pos, d_sae], with the normalisation of
// x's rows (layer_norm's mean and std, constant_norm_rescale's factor) and the skip term x @ W_skip^T.
RowMatrixXf sae_decode(const Sae& sae, const RowMatrixXf& feature_acts, const RowMatrixXf& x);

// The pieces of the decoder that splicing, steering and attribution need:
// the decoder row of one latent [d_out] as stored (Neuronpedia's steering vector);
RowVectorXf sae_decoder_row(const Sae& sae, int latent);
// per position, the factor the output normalisation multiplies the decoded rows by [pos]
// (1 without one; layer_norm: the std; constant_norm_rescale: |x| / sqrt(d_in));
VectorXf sae_output_scale(const Sae& sae, const RowMatrixXf& x);
// g @ (d (acts @ W_dec) / d acts)^T, [pos, d_sae] for g [pos, d_out]: g @ W_dec^T, divided by
// |W_dec[i]| under rescale_acts_by_decoder_norm.
RowMatrixXf sae_decoder_times(const Sae& sae, const RowMatrixXf& g);

// The slow, obviously correct encoder the fast one is tested against: one latent at a time,
// float64 sums, the top k by a full sort.
RowMatrixXf sae_encode_naive(const Sae& sae, const RowMatrixXf& x);

}  // namespace hs
