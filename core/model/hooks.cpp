#include "core/model/hooks.h"

#include <charconv>
#include <nlohmann/json.hpp>

#include "core/model/config.h"

namespace hs {
namespace {

using enum Dim;
using H = HookPoint;
using N = HookNeeds;
using U = EditUnit;

// clang-format off
constexpr HookInfo kHooks[] = {
  {H::Embed, false, "hook_embed", "embed", {Pos, DModel}, 2, N::Always, true,
   "W_E[token]", U::Row},
  {H::PosEmbed, false, "hook_pos_embed", "pos_embed", {Pos, DModel}, 2, N::LearnedPositions, true,
   "W_pos[pos]", U::Row},
  {H::ResidPre, true, "hook_resid_pre", "resid_pre", {Pos, DModel}, 2, N::Always, true,
   "embed + pos_embed, or the previous block's resid_post", U::Row},
  {H::Ln1Scale, true, "ln1.hook_scale", "ln1_scale", {Pos, One}, 2, N::NormScales, false,
   "sqrt(mean(resid_pre^2) + eps)", U::None},
  {H::Ln1Normalized, true, "ln1.hook_normalized", "ln1_normalized", {Pos, DModel}, 2, N::NormScales, false,
   "ln1(resid_pre), weight applied", U::None},
  {H::Q, true, "attn.hook_q", "q", {Pos, Head, DHead}, 3, N::Always, true,
   "ln1 @ W_Q + b_Q; with rotary derived from resid_pre (before rotation) unless edited", U::Head},
  {H::K, true, "attn.hook_k", "k", {Pos, KvHead, DHead}, 3, N::Always, true,
   "ln1 @ W_K + b_K; with rotary derived from resid_pre (before rotation) unless edited", U::KvHead},
  {H::V, true, "attn.hook_v", "v", {Pos, KvHead, DHead}, 3, N::Always, true,
   "ln1 @ W_V + b_V", U::KvHead},
  {H::QNormScale, true, "attn.q_norm.hook_scale", "q_norm_scale", {Pos, Head, One}, 3, N::QkNorm, false,
   "sqrt(mean(q_h^2) + eps) per query head", U::None},
  {H::QNormNormalized, true, "attn.q_norm.hook_normalized", "q_norm_normalized", {Pos, Head, DHead}, 3, N::QkNorm,
   false, "q_norm(q) per head, weight applied", U::None},
  {H::KNormScale, true, "attn.k_norm.hook_scale", "k_norm_scale", {Pos, KvHead, One}, 3, N::QkNorm, false,
   "sqrt(mean(k_h^2) + eps) per key head", U::None},
  {H::KNormNormalized, true, "attn.k_norm.hook_normalized", "k_norm_normalized", {Pos, KvHead, DHead}, 3, N::QkNorm,
   false, "k_norm(k) per head, weight applied", U::None},
  {H::RotQ, true, "attn.hook_rot_q", "rot_q", {Pos, Head, DHead}, 3, N::Rotary, true,
   "q (after q_norm, if any) rotated by position", U::None},
  {H::RotK, true, "attn.hook_rot_k", "rot_k", {Pos, KvHead, DHead}, 3, N::Rotary, true,
   "k (after k_norm, if any) rotated by position", U::None},
  {H::AttnScores, true, "attn.hook_attn_scores", "attn_scores", {Head, QueryPos, KeyPos}, 3, N::Always, false,
   "q . k * scale, soft-capped if the model caps, masked -inf (also outside a sliding window) "
   "(stored with store_scores)", U::None},
  {H::Pattern, true, "attn.hook_pattern", "pattern", {Head, QueryPos, KeyPos}, 3, N::Always, true,
   "softmax(attn_scores); lower triangle kept", U::Head},
  {H::Z, true, "attn.hook_z", "z", {Pos, Head, DHead}, 3, N::Always, true,
   "pattern @ v", U::Head},
  {H::Result, true, "attn.hook_result", "result", {Pos, Head, DModel}, 3, N::Always, false,
   "z_h @ W_O[h] (stored with store_results)", U::None},
  {H::Ln1PostScale, true, "ln1_post.hook_scale", "ln1_post_scale", {Pos, One}, 2, N::PostAttnNorm, false,
   "sqrt(mean((z @ W_O + b_O)^2) + eps)", U::None},
  {H::Ln1PostNormalized, true, "ln1_post.hook_normalized", "ln1_post_normalized", {Pos, DModel}, 2, N::PostAttnNorm,
   false, "ln1_post(z @ W_O + b_O), weight applied (= attn_out)", U::None},
  {H::AttnOut, true, "hook_attn_out", "attn_out", {Pos, DModel}, 2, N::Always, true,
   "z @ W_O + b_O (then ln1_post, if the model has it)", U::Row},
  {H::ResidMid, true, "hook_resid_mid", "resid_mid", {Pos, DModel}, 2, N::Always, false,
   "resid_pre + attn_out (stored when edited)", U::Row},
  {H::Ln2Scale, true, "ln2.hook_scale", "ln2_scale", {Pos, One}, 2, N::NormScales, false,
   "sqrt(mean(resid_mid^2) + eps) (parallel blocks: of resid_pre)", U::None},
  {H::Ln2Normalized, true, "ln2.hook_normalized", "ln2_normalized", {Pos, DModel}, 2, N::NormScales, false,
   "ln2(resid_mid), weight applied (parallel blocks: of resid_pre)", U::None},
  {H::MlpPre, true, "mlp.hook_pre", "mlp_pre", {Pos, DMlp}, 2, N::Always, false,
   "ln2 @ W_in + b_in (gated: the gate, ln2 @ W_gate) (stored when edited)", U::Neuron},
  {H::MlpPreLinear, true, "mlp.hook_pre_linear", "mlp_pre_linear", {Pos, DMlp}, 2, N::GatedMlp, false,
   "ln2 @ W_in + b_in, the up projection", U::None},
  {H::MlpPost, true, "mlp.hook_post", "mlp_post", {Pos, DMlp}, 2, N::Always, false,
   "act(mlp_pre) (gated: act(mlp_pre) * mlp_pre_linear) (stored when edited)", U::Neuron},
  {H::Ln2PostScale, true, "ln2_post.hook_scale", "ln2_post_scale", {Pos, One}, 2, N::PostMlpNorm, false,
   "sqrt(mean((mlp_post @ W_out + b_out)^2) + eps)", U::None},
  {H::Ln2PostNormalized, true, "ln2_post.hook_normalized", "ln2_post_normalized", {Pos, DModel}, 2, N::PostMlpNorm,
   false, "ln2_post(mlp_post @ W_out + b_out), weight applied (= mlp_out)", U::None},
  {H::MlpOut, true, "hook_mlp_out", "mlp_out", {Pos, DModel}, 2, N::Always, true,
   "mlp_post @ W_out + b_out (then ln2_post, if the model has it)", U::Row},
  {H::ResidPost, true, "hook_resid_post", "resid_post", {Pos, DModel}, 2, N::Always, false,
   "resid_mid + mlp_out (stored when edited)", U::Row},
  {H::LnFinalScale, false, "ln_final.hook_scale", "ln_final_scale", {Pos, One}, 2, N::NormScales, true,
   "sqrt(mean(resid^2) + eps) of the last resid_post", U::None},
  {H::LnFinalNormalized, false, "ln_final.hook_normalized", "ln_final_normalized", {Pos, DModel}, 2, N::Always, true,
   "ln_final(last resid_post), weight applied", U::None},
  {H::Logits, false, "logits", "logits", {Pos, DVocab}, 2, N::Always, true,
   "ln_final @ W_U (then the final soft-cap, if the model caps)", U::None},
};
// clang-format on

constexpr bool rows_in_order() {
  int i = 0;
  for (const HookInfo& h : kHooks)
    if (static_cast<int>(h.hook) != i++) return false;
  return i == kHookCount;
}
static_assert(rows_in_order(), "kHooks: one row per HookPoint, in the enum's order");

std::string_view needs_text(HookNeeds n) {
  switch (n) {
    case N::Always: return "";
    case N::LearnedPositions: return "learned positions";
    case N::Rotary: return "rotary";
    case N::NormScales: return "RMSNorm";
    case N::GatedMlp: return "gated MLP";
    case N::QkNorm: return "q/k norm";
    case N::PostAttnNorm: return "post-attention norm";
    case N::PostMlpNorm: return "post-MLP norm";
  }
  return "";
}

}  // namespace

std::span<const HookInfo> hook_table() { return kHooks; }

const HookInfo& hook_info(HookPoint hook) { return kHooks[static_cast<size_t>(hook)]; }

bool hook_exists(const ModelConfig& c, HookPoint hook) {
  switch (hook_info(hook).needs) {
    case N::Always: return true;
    case N::LearnedPositions: return c.architecture.positions == PositionKind::LearnedAbsolute;
    case N::Rotary: return c.architecture.positions == PositionKind::Rotary;
    case N::NormScales: return c.architecture.norm == NormKind::RMSNorm;
    case N::GatedMlp: return c.architecture.mlp == MlpKind::Gated;
    case N::QkNorm: return c.architecture.qk_norm;
    case N::PostAttnNorm: return c.architecture.post_attn_norm;
    case N::PostMlpNorm: return c.architecture.post_mlp_norm;
  }
  return false;
}

bool hook_readable(const ModelConfig& c, HookPoint hook) {
  return hook_exists(c, hook) || hook == H::Ln1Normalized || hook == H::Ln2Normalized;
}

std::string hook_key(HookPoint hook, int l) {
  const HookInfo& h = hook_info(hook);
  return h.per_layer ? "blocks." + std::to_string(l) + "." + std::string(h.name) : std::string(h.name);
}

std::optional<HookKey> parse_hook_key(const ModelConfig& c, std::string_view key) {
  const std::string_view prefix = "blocks.";
  if (key.substr(0, prefix.size()) != prefix) {
    for (const HookInfo& h : kHooks)
      if (!h.per_layer && h.name == key) return HookKey{h.hook, -1};
    return std::nullopt;
  }
  const std::string_view rest = key.substr(prefix.size());
  int l = -1;
  const auto [ptr, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), l);
  if (ec != std::errc() || ptr == rest.data() + rest.size() || *ptr != '.' || l < 0 || l >= c.n_layers)
    return std::nullopt;
  const std::string_view suffix(ptr + 1, static_cast<size_t>(rest.data() + rest.size() - ptr - 1));
  for (const HookInfo& h : kHooks)
    if (h.per_layer && h.name == suffix) return HookKey{h.hook, l};
  return std::nullopt;
}

std::optional<HookPoint> find_hook(std::string_view name) {
  for (const HookInfo& h : kHooks)
    if (h.name == name || h.short_name == name) return h.hook;
  return std::nullopt;
}

int64_t dim_size(const ModelConfig& c, Dim d, int64_t n_pos) {
  switch (d) {
    case Pos:
    case QueryPos:
    case KeyPos: return n_pos;
    case DModel: return c.d_model;
    case Head: return c.n_heads;
    case KvHead: return c.n_key_value_heads;
    case DHead: return c.d_head;
    case DMlp: return c.d_mlp;
    case DVocab: return c.d_vocab;
    case One: return 1;
  }
  return 0;
}

std::string_view dim_name(Dim d) {
  switch (d) {
    case Pos: return "pos";
    case QueryPos: return "query_pos";
    case KeyPos: return "key_pos";
    case DModel: return "d_model";
    case Head: return "head";
    case KvHead: return "kv_head";
    case DHead: return "d_head";
    case DMlp: return "d_mlp";
    case DVocab: return "d_vocab";
    case One: return "1";
  }
  return "?";
}

std::vector<int64_t> hook_shape(const ModelConfig& c, HookPoint hook, int64_t n_pos) {
  const HookInfo& h = hook_info(hook);
  std::vector<int64_t> out;
  for (int i = 0; i < h.rank; ++i) out.push_back(dim_size(c, h.shape[i], n_pos));
  return out;
}

int64_t hook_row_width(const ModelConfig& c, HookPoint hook, int64_t n_pos) {
  const HookInfo& h = hook_info(hook);
  int64_t w = 1;
  for (int i = h.shape[0] == Head ? 2 : 1; i < h.rank; ++i) w *= dim_size(c, h.shape[i], n_pos);
  return w;
}

int hook_unit_count(const ModelConfig& c, HookPoint hook) {
  switch (hook_info(hook).edit) {
    case U::Head: return c.n_heads;
    case U::KvHead: return c.n_key_value_heads;
    case U::Neuron: return c.d_mlp;
    case U::Row:
    case U::None: return 0;
  }
  return 0;
}

int64_t hook_unit_width(const ModelConfig& c, HookPoint hook, int64_t n_pos) {
  switch (hook_info(hook).edit) {
    case U::Head:
    case U::KvHead: return hook == HookPoint::Pattern ? n_pos : c.d_head;
    case U::Neuron: return 1;
    case U::Row:
    case U::None: return hook_row_width(c, hook, n_pos);
  }
  return 0;
}

std::string_view to_string(EditUnit u) {
  switch (u) {
    case U::None: return "";
    case U::Row: return "row";
    case U::Head: return "head";
    case U::KvHead: return "kv head";
    case U::Neuron: return "neuron";
  }
  return "";
}

std::vector<HookListing> hook_listing(const ModelConfig* c) {
  std::vector<HookListing> out;
  for (const HookInfo& h : kHooks) {
    HookListing e;
    e.name = h.per_layer ? "blocks.{l}." + std::string(h.name) : std::string(h.name);
    e.short_name = h.short_name;
    for (int i = 0; i < h.rank; ++i) {
      const std::string sep = i == 0 ? "[" : ", ";
      e.dims += sep + std::string(dim_name(h.shape[i]));
      const bool symbolic = !c || h.shape[i] == Pos || h.shape[i] == QueryPos || h.shape[i] == KeyPos;
      e.shape += sep + (symbolic ? std::string(dim_name(h.shape[i])) : std::to_string(dim_size(*c, h.shape[i], 0)));
    }
    e.dims += "]";
    e.shape += "]";
    e.needs = needs_text(h.needs);
    e.exists = !c || hook_exists(*c, h.hook);
    e.stored = h.stored;
    e.how = h.how;
    e.editable = h.edit != U::None;
    e.unit = to_string(h.edit);
    out.push_back(std::move(e));
  }
  return out;
}

nlohmann::json hook_listing_json(const ModelConfig* c) {
  nlohmann::json out = nlohmann::json::array();
  for (const HookListing& e : hook_listing(c)) {
    nlohmann::json j = {{"name", e.name},       {"short_name", e.short_name}, {"dims", e.dims},
                        {"shape", e.shape},     {"stored", e.stored},         {"how", e.how},
                        {"editable", e.editable}};
    if (!e.needs.empty()) j["needs"] = e.needs;
    if (c) j["exists"] = e.exists;
    if (e.editable) j["unit"] = e.unit;
    out.push_back(std::move(j));
  }
  return out;
}

std::string hook_listing_text(const ModelConfig* c) {
  std::string out;
  auto pad = [](std::string s, size_t n) { return s.size() < n ? s + std::string(n - s.size(), ' ') : s + " "; };
  for (const HookListing& e : hook_listing(c)) {
    if (!e.exists) continue;
    out += pad(e.name, 34) + pad(e.shape, 26) + pad(e.editable ? "edit per " + e.unit : "-", 18) +
           (e.stored ? "stored" : "derived") + (e.needs.empty() || c ? "" : " (" + e.needs + ")") + "\n";
  }
  return out;
}

}  // namespace hs
