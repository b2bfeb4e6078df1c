// The architecture description: what a model computes beyond its sizes, and how its file names
// and lays out its tensors. Config parsing, weights binding, the memory guard, the forward pass,
// the reference forward (tests/core) and the analyses read it, so none of them names a family's
// tensors or shapes.
//
// Two parts:
// - Architecture (one per model, inside ModelConfig): typed options (norm, positions, MLP, QKV
//   layout, biases, block order, unembedding tie) that the family's entry fills from config.json.
// - ArchitectureFamily (one per family, in core/model/arch/): the config.json keys, the map from
//   tensor roles to file names, the layouts, and the buffers a checkpoint may carry. GPT-2 is
//   the first entry. Shapes and the parameter count are generic over roles (architecture.cpp).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace hs {

struct ModelConfig;
class ConfigJson;
class ArchitectureFamily;

enum class NormKind : uint8_t {
  LayerNorm,  // (x - mean) / sqrt(var + eps) * w (+ b)
  RMSNorm,    // x / sqrt(mean(x^2) + eps) * w (+ b)
};
enum class PositionKind : uint8_t {
  LearnedAbsolute,  // a position embedding table added to the token embedding
  Rotary,           // queries and keys rotated by position (Architecture::rotary)
  None,             // no position information besides the causal mask
};
enum class MlpKind : uint8_t {
  Plain,  // W_out act(W_in x + b_in) + b_out
  Gated,  // W_out (act(W_gate x) * W_in x)
};
enum class Activation : uint8_t { GeluNew, GeluErf, Relu, Silu };
// How the file holds the query, key and value projections.
enum class QkvLayout : uint8_t {
  FusedBlocks,   // one [d_model, (n_heads + 2 n_kv) d_head] matrix: Q | K | V column blocks
  FusedPerHead,  // one matrix whose outputs are grouped per head: q_h, k_h, v_h (GPT-NeoX); its
                 // family's output_order() gives them in FusedBlocks order as the model opens
  Separate,      // three matrices
};
enum class UnembeddingTie : uint8_t {
  Tied,               // the unembedding is the token embedding
  Untied,             // the file holds its own unembedding
  TiedUnlessPresent,  // the file decides: its own unembedding when it has one
};
// How a matrix of logical shape [in, out] (y = x @ W) is stored in the file.
enum class Layout : uint8_t {
  InOut,  // [in, out], as GPT-2's Conv1D
  OutIn,  // [out, in], as torch.nn.Linear
};

// How a checkpoint stretches its rotary frequencies past the context it was trained on
// (Hugging Face's rope_scaling).
enum class RopeScaling : uint8_t {
  None,
  Linear,  // every frequency divided by `factor` (positions interpolated)
  Llama3,  // Llama 3.1: low frequencies divided by `factor`, high ones kept, a smooth ramp between
};

struct RotaryParams {
  int dim = 0;            // leading dimensions of each head that are rotated (partial rotary < d_head)
  double base = 10000.0;  // theta
  RopeScaling scaling = RopeScaling::None;
  double factor = 1.0;                 // Linear and Llama3
  double low_freq_factor = 1.0;        // Llama3
  double high_freq_factor = 4.0;       // Llama3
  double original_context = 8192.0;    // Llama3: original_max_position_embeddings
};

// The inverse frequency of each rotated pair i < dim / 2 (theta^(-2i/dim)), with the scaling
// applied: the angle of pair i at position p is p * inv_freq[i]. Hugging Face's rotate-half
// layout pairs dimension i with i + dim/2.
std::vector<double> rotary_inv_freq(const RotaryParams& r);

// Defaults are the original GPT-2 block, the one HeadScope's forward pass implemented first.
struct Architecture {
  const ArchitectureFamily* family = nullptr;  // names and layouts; set by parse_config
  NormKind norm = NormKind::LayerNorm;
  bool norm_bias = true;  // every norm (the two of each block and the final one) has a bias
  PositionKind positions = PositionKind::LearnedAbsolute;
  RotaryParams rotary;    // when positions == Rotary
  MlpKind mlp = MlpKind::Plain;
  QkvLayout qkv = QkvLayout::FusedBlocks;
  bool qkv_bias = true;       // b_Q, b_K, b_V
  bool attn_out_bias = true;  // b_O
  bool mlp_bias = true;       // b_in (and b_gate), b_out
  bool parallel_blocks = false;  // attention and MLP both read resid_pre (GPT-J, GPT-NeoX)
  UnembeddingTie unembedding = UnembeddingTie::TiedUnlessPresent;

  // Gemma 2, Gemma 3 and Qwen3 (their entries in core/model/arch/). Each default is what the
  // families above compute, so an option that is off changes nothing.
  // The token row is multiplied by float32(sqrt(d_model)) as it enters the stream (hook_embed is
  // the scaled row). Hugging Face computes the factor in the hidden dtype, so a BF16 run there
  // rounds it (sqrt(1152) = 33.94 becomes 34.0); HeadScope computes in float32.
  bool embedding_scaled = false;
  // Every norm multiplies by (1 + w), w as stored (Gemma's RMSNorm). The binder folds the 1 into
  // an owned float32 copy (1.0f + w, the float Hugging Face's `1.0 + weight.float()` gives), so
  // kernels and analyses see the weight that is applied.
  bool norm_weight_plus_one = false;
  // A norm of the attention output (of the MLP output) before it joins the residual stream
  // (TransformerLens's ln1_post and ln2_post; Gemma's post_attention_layernorm and
  // post_feedforward_layernorm). hook_attn_out and hook_mlp_out are after it.
  bool post_attn_norm = false;
  bool post_mlp_norm = false;
  // An RMSNorm over head_dim of each query and key head, before the rotation (Gemma 3, Qwen3).
  bool qk_norm = false;
  // The factor of q.k when positive (Gemma: query_pre_attn_scalar^-1/2); 0: 1/sqrt(d_head) with
  // ModelConfig's scaling flags.
  float attn_scale = 0.0f;
  // Soft-capping cap * tanh(x / cap) when positive: of the attention scores, after the scale and
  // before the mask (Gemma 2), and of the logits (Gemma 2, some Gemma 3).
  float attn_softcap = 0.0f;
  float final_softcap = 0.0f;
  // Per layer, how many keys a query reads on a sliding-window layer: keys k with q - W < k <= q.
  // 0 (or an empty list) means every earlier key.
  std::vector<int> window;
  // Sliding-window layers rotate with rotary_local instead of rotary (Gemma 3's
  // rope_local_base_freq, without scaling).
  bool local_rotary = false;
  RotaryParams rotary_local;
};

// Layer l's window (0: the layer reads every earlier key).
int attention_window(const ModelConfig& c, int l);
// The first key query q reads under a window (0 for a global layer): keys first_key .. q.
inline int first_key(int window, int q) { return window > 0 && q >= window ? q - window + 1 : 0; }
// Whether some layer's window is shorter than n_pos tokens, so that it masks keys of such a run.
bool window_matters(const ModelConfig& c, int n_pos);
// The rotation layer l applies (rotary, or rotary_local on a Gemma 3 sliding layer).
const RotaryParams& rotary_params(const ModelConfig& c, int l);

// What a tensor is for, whatever its family calls it. Per-layer roles exist once per layer.
enum class TensorRole : uint8_t {
  TokenEmbedding,     // W_E   [d_vocab, d_model] (a table: one row per token)
  PositionEmbedding,  // W_pos [n_ctx, d_model] (learned absolute positions only)
  Norm1Weight,        // [d_model]
  Norm1Bias,          // [d_model]
  QkvWeight,          // [d_model, (n_heads + 2 n_kv) d_head]
  QkvBias,            // [(n_heads + 2 n_kv) d_head]
  QWeight,            // [d_model, n_heads d_head]   (QkvLayout::Separate)
  QBias,              // [n_heads d_head]
  KWeight,            // [d_model, n_kv d_head]
  KBias,              // [n_kv d_head]
  VWeight,            // [d_model, n_kv d_head]
  VBias,              // [n_kv d_head]
  AttnOutWeight,      // W_O   [n_heads d_head, d_model]
  AttnOutBias,        // b_O   [d_model]
  Norm2Weight,        // [d_model]
  Norm2Bias,          // [d_model]
  MlpInWeight,        // W_in  [d_model, d_mlp]
  MlpInBias,          // b_in  [d_mlp]
  MlpGateWeight,      // W_gate [d_model, d_mlp] (MlpKind::Gated)
  MlpGateBias,        // b_gate [d_mlp]
  MlpOutWeight,       // W_out [d_mlp, d_model]
  MlpOutBias,         // b_out [d_model]
  FinalNormWeight,    // [d_model]
  FinalNormBias,      // [d_model]
  Unembedding,        // W_U   [d_model, d_vocab] (logical; nn.Linear stores [d_vocab, d_model])
  QNormWeight,        // [d_head], shared by every query head (Architecture::qk_norm)
  KNormWeight,        // [d_head], shared by every key head
  PostAttnNormWeight, // [d_model] (Architecture::post_attn_norm)
  PostMlpNormWeight,  // [d_model] (Architecture::post_mlp_norm)
};
// Whether the role is a norm's weight (of the (1 + w) fold: Architecture::norm_weight_plus_one).
bool is_norm_weight(TensorRole role);

bool is_per_layer(TensorRole role);
// Whether the forward pass multiplies by this tensor, so that Weights packs it (packed_gemm.h).
// The unembedding is packed too; when tied, that is the token embedding's copy.
bool is_packed_matrix(TensorRole role);

// One tensor a model's file holds (or, when optional, may hold), as the binder looks it up.
struct TensorSpec {
  TensorRole role;
  int layer = -1;                // -1 for model-wide roles
  std::string name;              // the file's name without the family's base prefix
  std::vector<int64_t> shape;    // as stored in the file (the family's layout applied)
  bool prefixable = true;        // may carry the family's base prefix ("transformer.")
  bool optional = false;         // absent means tied (the unembedding under TiedUnlessPresent)
};

// Whether the model has tensors of this role (per-layer roles: in every layer).
bool has_role(const ModelConfig& c, TensorRole role);
// The role's shape as [in, out] for matrices ([rows, d_model] for the embedding tables).
std::vector<int64_t> logical_shape(const ModelConfig& c, TensorRole role);
// Every tensor of the model, in the order a forward pass uses them: embeddings, then each layer's
// tensors, then the final norm and the unembedding.
std::vector<TensorSpec> tensor_specs(const ModelConfig& c);
// Floats of every role the model has, a tied unembedding counted once (as the token embedding).
int64_t parameter_count(const ModelConfig& c);

// Throws hs::Error naming the first option of the description that HeadScope's weights binding
// or forward pass does not implement (rotary embeddings over an odd number of dimensions or more
// than d_head, an unembedding stored [d_model, d_vocab], a family's output order for a matrix
// other than the fused QKV, a QKV grouped per head without one). Weights::load and forward() call
// it, so a description is refused before anything is computed with it.
void require_implemented(const ModelConfig& c);

// The registry. A family is found by config.json's model_type ("gpt2") or, when a config has
// none, by its architectures[0] ("GPT2LMHeadModel").
const std::vector<const ArchitectureFamily*>& architecture_families();
const ArchitectureFamily* find_family_by_model_type(std::string_view model_type);
const ArchitectureFamily* find_family_by_class(std::string_view hf_architecture);
// The family of a config.json that names neither (configs written before transformers added
// model_type were all GPT-2's).
const ArchitectureFamily& default_family();
// The families as a person names them, from the registry, for help texts and the Open dialog:
// "GPT-2, Llama, Qwen2, Qwen3, Pythia, Gemma 2 or Gemma 3" (each family's user_name(), joined in registry order).
std::string supported_families_text();

// Names for `headscope-cli info` and messages: "LayerNorm", "learned absolute", ...
std::string_view to_string(NormKind k);
std::string_view to_string(PositionKind k);
std::string_view to_string(MlpKind k);
std::string_view to_string(QkvLayout k);
std::string_view to_string(RopeScaling k);  // "none", "linear", "llama3"

// One family's entry. Everything family-specific lives in its implementation (core/model/arch/).
class ArchitectureFamily {
 public:
  virtual ~ArchitectureFamily() = default;
  // In messages: "a GPT-2 config.json gives it", "not a GPT-2 checkpoint".
  virtual std::string_view name() const = 0;
  // What a user calls the models of this family, in lists of what HeadScope opens: "Pythia" for
  // GPT-NeoX, otherwise name().
  virtual std::string_view user_name() const { return name(); }
  // The canonical model_type ("gpt2"), given to configs that name the family another way.
  virtual std::string_view model_type() const = 0;
  virtual bool reads_model_type(std::string_view model_type) const = 0;
  virtual bool reads_class(std::string_view hf_architecture) const = 0;
  // What HeadScope reads of this family, for the message that refuses an unknown model_type.
  virtual std::string_view description() const = 0;
  // Reads the family's config.json keys into `c`: sizes, norm epsilon, activation, attention
  // scaling and c.architecture's options (whose family is already set).
  virtual void read_config(const ConfigJson& json, ModelConfig& c) const = 0;
  // The file's name of `role` (of `layer` for per-layer roles), without base_prefix().
  virtual std::string tensor_name(TensorRole role, int layer) const = 0;
  // Hugging Face saves the base model's tensors with or without this prefix ("transformer.");
  // the unembedding head lies outside the base model and never carries it.
  virtual std::string_view base_prefix() const = 0;
  virtual Layout layout(TensorRole role) const = 0;
  // A weight layout transform: the order of a matrix's outputs when the file's differs from
  // HeadScope's (the [in, out] shapes of TensorRole). Output j of the matrix of `role` as
  // HeadScope holds it (column j, and element j of its bias) is output order(j) of the file's
  // tensor. Empty (the default): the file's order is HeadScope's. The binder (weights.cpp)
  // applies it to the fused QKV as it packs W_qkv, reading a 16-bit file in place; for any other
  // role require_implemented refuses it.
  using OutputOrder = std::function<int64_t(int64_t)>;
  virtual OutputOrder output_order(const ModelConfig& c, TensorRole role) const {
    (void)c;
    (void)role;
    return {};
  }
  // Tensors a checkpoint may carry that are not weights (saved buffers); binding ignores them.
  virtual bool is_ignorable(std::string_view tensor_name) const = 0;
  // The end of the message that refuses an unexpected tensor: what the checkpoint should hold.
  virtual std::string_view unexpected_tensor_hint() const = 0;
};

}  // namespace hs
