#include "core/model/architecture.h"

#include <cmath>

#include "core/error.h"
#include "core/model/arch/families.h"
#include "core/model/config.h"
#include "core/tensor/tensor.h"

namespace hs {
namespace {

constexpr TensorRole kModelRolesBefore[] = {TensorRole::TokenEmbedding, TensorRole::PositionEmbedding};
constexpr TensorRole kLayerRoles[] = {
    TensorRole::Norm1Weight, TensorRole::Norm1Bias,     TensorRole::QkvWeight,     TensorRole::QkvBias,
    TensorRole::QWeight,     TensorRole::QBias,         TensorRole::KWeight,       TensorRole::KBias,
    TensorRole::VWeight,     TensorRole::VBias,         TensorRole::QNormWeight,   TensorRole::KNormWeight,
    TensorRole::AttnOutWeight, TensorRole::AttnOutBias, TensorRole::PostAttnNormWeight,
    TensorRole::Norm2Weight, TensorRole::Norm2Bias,     TensorRole::MlpInWeight,   TensorRole::MlpInBias,
    TensorRole::MlpGateWeight, TensorRole::MlpGateBias, TensorRole::MlpOutWeight,  TensorRole::MlpOutBias,
    TensorRole::PostMlpNormWeight,
};
constexpr TensorRole kModelRolesAfter[] = {TensorRole::FinalNormWeight, TensorRole::FinalNormBias,
                                           TensorRole::Unembedding};

bool is_matrix(TensorRole r) {
  switch (r) {
    case TensorRole::QkvWeight:
    case TensorRole::QWeight:
    case TensorRole::KWeight:
    case TensorRole::VWeight:
    case TensorRole::AttnOutWeight:
    case TensorRole::MlpInWeight:
    case TensorRole::MlpGateWeight:
    case TensorRole::MlpOutWeight:
    case TensorRole::Unembedding:
      return true;
    default:
      return false;
  }
}

[[noreturn]] void not_implemented(const ModelConfig& c, const std::string& option) {
  const std::string family = c.architecture.family ? std::string(c.architecture.family->name()) + " " : "";
  throw Error("this " + family + "model's architecture asks for " + option +
              ", which HeadScope's forward pass does not implement yet.");
}

}  // namespace

bool is_per_layer(TensorRole r) {
  switch (r) {
    case TensorRole::TokenEmbedding:
    case TensorRole::PositionEmbedding:
    case TensorRole::FinalNormWeight:
    case TensorRole::FinalNormBias:
    case TensorRole::Unembedding:
      return false;
    default:
      return true;
  }
}

bool is_packed_matrix(TensorRole r) { return is_matrix(r); }

bool has_role(const ModelConfig& c, TensorRole r) {
  const Architecture& a = c.architecture;
  const bool fused = a.qkv != QkvLayout::Separate;
  switch (r) {
    case TensorRole::TokenEmbedding:
    case TensorRole::Norm1Weight:
    case TensorRole::AttnOutWeight:
    case TensorRole::Norm2Weight:
    case TensorRole::MlpInWeight:
    case TensorRole::MlpOutWeight:
    case TensorRole::FinalNormWeight:
      return true;
    case TensorRole::PositionEmbedding:
      return a.positions == PositionKind::LearnedAbsolute;
    case TensorRole::Norm1Bias:
    case TensorRole::Norm2Bias:
    case TensorRole::FinalNormBias:
      return a.norm_bias;
    case TensorRole::QkvWeight:
      return fused;
    case TensorRole::QkvBias:
      return fused && a.qkv_bias;
    case TensorRole::QWeight:
    case TensorRole::KWeight:
    case TensorRole::VWeight:
      return !fused;
    case TensorRole::QBias:
    case TensorRole::KBias:
    case TensorRole::VBias:
      return !fused && a.qkv_bias;
    case TensorRole::AttnOutBias:
      return a.attn_out_bias;
    case TensorRole::MlpInBias:
    case TensorRole::MlpOutBias:
      return a.mlp_bias;
    case TensorRole::MlpGateWeight:
      return a.mlp == MlpKind::Gated;
    case TensorRole::MlpGateBias:
      return a.mlp == MlpKind::Gated && a.mlp_bias;
    case TensorRole::Unembedding:
      return a.unembedding != UnembeddingTie::Tied;
    case TensorRole::QNormWeight:
    case TensorRole::KNormWeight:
      return a.qk_norm;
    case TensorRole::PostAttnNormWeight:
      return a.post_attn_norm;
    case TensorRole::PostMlpNormWeight:
      return a.post_mlp_norm;
  }
  return false;
}

bool is_norm_weight(TensorRole r) {
  switch (r) {
    case TensorRole::Norm1Weight:
    case TensorRole::Norm2Weight:
    case TensorRole::FinalNormWeight:
    case TensorRole::QNormWeight:
    case TensorRole::KNormWeight:
    case TensorRole::PostAttnNormWeight:
    case TensorRole::PostMlpNormWeight:
      return true;
    default:
      return false;
  }
}

int attention_window(const ModelConfig& c, int l) {
  const std::vector<int>& w = c.architecture.window;
  return l >= 0 && static_cast<size_t>(l) < w.size() ? w[static_cast<size_t>(l)] : 0;
}

bool window_matters(const ModelConfig& c, int n_pos) {
  for (int l = 0; l < c.n_layers; ++l)
    if (const int w = attention_window(c, l); w > 0 && w < n_pos) return true;
  return false;
}

const RotaryParams& rotary_params(const ModelConfig& c, int l) {
  const Architecture& a = c.architecture;
  return a.local_rotary && attention_window(c, l) > 0 ? a.rotary_local : a.rotary;
}

std::vector<int64_t> logical_shape(const ModelConfig& c, TensorRole r) {
  const int64_t D = c.d_model, M = c.d_mlp, V = c.d_vocab, C = c.n_ctx;
  const int64_t q = int64_t{c.n_heads} * c.d_head, kv = int64_t{c.n_key_value_heads} * c.d_head;
  switch (r) {
    case TensorRole::TokenEmbedding: return {V, D};
    case TensorRole::PositionEmbedding: return {C, D};
    case TensorRole::Norm1Weight:
    case TensorRole::Norm1Bias:
    case TensorRole::Norm2Weight:
    case TensorRole::Norm2Bias:
    case TensorRole::FinalNormWeight:
    case TensorRole::FinalNormBias:
    case TensorRole::AttnOutBias:
    case TensorRole::MlpOutBias:
    case TensorRole::PostAttnNormWeight:
    case TensorRole::PostMlpNormWeight:
      return {D};
    case TensorRole::QNormWeight:
    case TensorRole::KNormWeight:
      return {c.d_head};
    case TensorRole::QkvWeight: return {D, q + 2 * kv};
    case TensorRole::QkvBias: return {q + 2 * kv};
    case TensorRole::QWeight: return {D, q};
    case TensorRole::QBias: return {q};
    case TensorRole::KWeight:
    case TensorRole::VWeight:
      return {D, kv};
    case TensorRole::KBias:
    case TensorRole::VBias:
      return {kv};
    case TensorRole::AttnOutWeight: return {q, D};
    case TensorRole::MlpInWeight:
    case TensorRole::MlpGateWeight:
      return {D, M};
    case TensorRole::MlpInBias:
    case TensorRole::MlpGateBias:
      return {M};
    case TensorRole::MlpOutWeight: return {M, D};
    case TensorRole::Unembedding: return {D, V};
  }
  return {};
}

std::vector<TensorSpec> tensor_specs(const ModelConfig& c) {
  if (!c.architecture.family) throw Error("the model's config names no architecture family; parse it with parse_config.");
  const ArchitectureFamily& f = *c.architecture.family;
  std::vector<TensorSpec> specs;
  auto add = [&](TensorRole r, int layer) {
    if (!has_role(c, r)) return;
    TensorSpec s{r, layer, f.tensor_name(r, layer), logical_shape(c, r)};
    if (is_matrix(r) && f.layout(r) == Layout::OutIn) std::swap(s.shape[0], s.shape[1]);
    s.prefixable = r != TensorRole::Unembedding;
    s.optional = r == TensorRole::Unembedding && c.architecture.unembedding == UnembeddingTie::TiedUnlessPresent;
    specs.push_back(std::move(s));
  };
  for (TensorRole r : kModelRolesBefore) add(r, -1);
  for (int l = 0; l < c.n_layers; ++l)
    for (TensorRole r : kLayerRoles) add(r, l);
  for (TensorRole r : kModelRolesAfter) add(r, -1);
  return specs;
}

int64_t parameter_count(const ModelConfig& c) {
  int64_t model = 0, layer = 0;
  for (TensorRole r : kModelRolesBefore)
    if (has_role(c, r)) model += Tensor::count(logical_shape(c, r));
  for (TensorRole r : kLayerRoles)
    if (has_role(c, r)) layer += Tensor::count(logical_shape(c, r));
  for (TensorRole r : kModelRolesAfter)
    if (has_role(c, r) && !(r == TensorRole::Unembedding && c.architecture.unembedding != UnembeddingTie::Untied))
      model += Tensor::count(logical_shape(c, r));
  return model + c.n_layers * layer;
}

void require_implemented(const ModelConfig& c) {
  const Architecture& a = c.architecture;
  if (a.positions == PositionKind::Rotary &&
      (a.rotary.dim <= 0 || a.rotary.dim > c.d_head || a.rotary.dim % 2 != 0))
    not_implemented(c, "rotary embeddings over " + std::to_string(a.rotary.dim) + " of " + std::to_string(c.d_head) +
                           " head dimensions (an even number up to d_head is needed)");
  for (const RotaryParams* r : {&a.rotary, &a.rotary_local}) {
    if (a.positions != PositionKind::Rotary || (r == &a.rotary_local && !a.local_rotary)) continue;
    if (r->dim != a.rotary.dim) not_implemented(c, "local and global rotations over different dimensions");
  }
  if (a.qk_norm && a.norm != NormKind::RMSNorm) not_implemented(c, "a query/key norm that is not an RMSNorm");
  if ((a.post_attn_norm || a.post_mlp_norm) && a.parallel_blocks)
    not_implemented(c, "norms after attention and the MLP in parallel blocks");
  if (!a.window.empty() && a.window.size() != static_cast<size_t>(c.n_layers))
    not_implemented(c, "a list of sliding windows that does not give one per layer");
  if (a.family && a.family->layout(TensorRole::Unembedding) != Layout::OutIn)
    not_implemented(c, "an unembedding stored [d_model, d_vocab]");
  if (a.family) {
    // The binder reorders the outputs of the fused QKV only (architecture.h, output_order).
    auto reorders = [&](TensorRole r) { return static_cast<bool>(a.family->output_order(c, r)); };
    auto only_qkv = [&](TensorRole r) {
      if (r != TensorRole::QkvWeight && reorders(r))
        not_implemented(c, "its own order of the outputs of a tensor other than the fused QKV");
    };
    for (TensorRole r : kModelRolesBefore) only_qkv(r);
    for (TensorRole r : kLayerRoles) only_qkv(r);
    for (TensorRole r : kModelRolesAfter) only_qkv(r);
    if (a.qkv == QkvLayout::FusedPerHead && !reorders(TensorRole::QkvWeight))
      not_implemented(c, "a QKV grouped per head without the order of its outputs");
  }
}

std::vector<double> rotary_inv_freq(const RotaryParams& r) {
  const int half = r.dim / 2;
  std::vector<double> inv(static_cast<size_t>(half));
  for (int i = 0; i < half; ++i) {
    double f = 1.0 / std::pow(r.base, 2.0 * i / r.dim);
    switch (r.scaling) {
      case RopeScaling::None:
        break;
      case RopeScaling::Linear:
        f /= r.factor;
        break;
      case RopeScaling::Llama3: {
        // transformers' _compute_llama3_parameters: wavelengths longer than the original context
        // divided by low_freq_factor are slowed by `factor`, shorter than it over high_freq_factor
        // kept, and the band between interpolated.
        const double low_wavelen = r.original_context / r.low_freq_factor;
        const double high_wavelen = r.original_context / r.high_freq_factor;
        const double wavelen = 2.0 * M_PI / f;
        if (wavelen > low_wavelen) {
          f /= r.factor;
        } else if (wavelen >= high_wavelen) {
          const double smooth =
              (r.original_context / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
          f = (1.0 - smooth) * f / r.factor + smooth * f;
        }
        break;
      }
    }
    inv[static_cast<size_t>(i)] = f;
  }
  return inv;
}

const std::vector<const ArchitectureFamily*>& architecture_families() {
  static const std::vector<const ArchitectureFamily*> all = arch::registry();
  return all;
}

const ArchitectureFamily* find_family_by_model_type(std::string_view model_type) {
  for (const ArchitectureFamily* f : architecture_families())
    if (f->reads_model_type(model_type)) return f;
  return nullptr;
}

const ArchitectureFamily* find_family_by_class(std::string_view hf_architecture) {
  for (const ArchitectureFamily* f : architecture_families())
    if (f->reads_class(hf_architecture)) return f;
  return nullptr;
}

const ArchitectureFamily& default_family() { return arch::gpt2(); }

std::string supported_families_text() {
  const auto& all = architecture_families();
  std::string out;
  for (size_t i = 0; i < all.size(); ++i) {
    if (i > 0) out += i + 1 == all.size() ? " or " : ", ";
    out += all[i]->user_name();
  }
  return out;
}

std::string_view to_string(NormKind k) { return k == NormKind::LayerNorm ? "LayerNorm" : "RMSNorm"; }

std::string_view to_string(PositionKind k) {
  switch (k) {
    case PositionKind::LearnedAbsolute: return "learned absolute";
    case PositionKind::Rotary: return "rotary";
    case PositionKind::None: return "none";
  }
  return "";
}

std::string_view to_string(MlpKind k) { return k == MlpKind::Plain ? "plain" : "gated"; }

std::string_view to_string(RopeScaling k) {
  switch (k) {
    case RopeScaling::None: return "none";
    case RopeScaling::Linear: return "linear";
    case RopeScaling::Llama3: return "llama3";
  }
  return "";
}

std::string_view to_string(QkvLayout k) {
  switch (k) {
    case QkvLayout::FusedBlocks: return "fused [Q|K|V]";
    case QkvLayout::FusedPerHead: return "fused per head";
    case QkvLayout::Separate: return "separate";
  }
  return "";
}

}  // namespace hs
