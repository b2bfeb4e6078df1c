// The hook points: every key of the activation cache's contract, in one table (hooks.cpp).
//
// A row says what a key is: its TransformerLens name, the short name the command line uses, its
// shape in the config's dimensions, the part of the architecture it needs, whether the cache
// stores it or derives it on request (and how), and whether an edit (intervention.h) may replace
// it, a head, a key/value head, a neuron or a whole row at a time. The cache's keys(), has() and
// get(), the interventions' names, parsing and checks, the forward pass's edits and the patching
// sweep all read this table; no other file lists the names.
//
// Adding a hook point: one enumerator and one row here (in forward order, the row's `hook` equal
// to its index: hooks.cpp checks it at compile time), its value in ActivationCache::get() (a
// stored field or a derivation), and, if it is editable, its application site in forward.cpp.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace hs {

struct ModelConfig;

// Every key of the contract, in the order a forward pass produces them.
enum class HookPoint : uint8_t {
  Embed,              // hook_embed
  PosEmbed,           // hook_pos_embed
  ResidPre,           // blocks.{l}.hook_resid_pre
  Ln1Scale,           // blocks.{l}.ln1.hook_scale
  Ln1Normalized,      // blocks.{l}.ln1.hook_normalized
  Q,                  // blocks.{l}.attn.hook_q
  K,                  // blocks.{l}.attn.hook_k
  V,                  // blocks.{l}.attn.hook_v
  QNormScale,         // blocks.{l}.attn.q_norm.hook_scale
  QNormNormalized,    // blocks.{l}.attn.q_norm.hook_normalized
  KNormScale,         // blocks.{l}.attn.k_norm.hook_scale
  KNormNormalized,    // blocks.{l}.attn.k_norm.hook_normalized
  RotQ,               // blocks.{l}.attn.hook_rot_q
  RotK,               // blocks.{l}.attn.hook_rot_k
  AttnScores,         // blocks.{l}.attn.hook_attn_scores
  Pattern,            // blocks.{l}.attn.hook_pattern
  Z,                  // blocks.{l}.attn.hook_z
  Result,             // blocks.{l}.attn.hook_result
  Ln1PostScale,       // blocks.{l}.ln1_post.hook_scale
  Ln1PostNormalized,  // blocks.{l}.ln1_post.hook_normalized
  AttnOut,            // blocks.{l}.hook_attn_out
  ResidMid,           // blocks.{l}.hook_resid_mid
  Ln2Scale,           // blocks.{l}.ln2.hook_scale
  Ln2Normalized,      // blocks.{l}.ln2.hook_normalized
  MlpPre,             // blocks.{l}.mlp.hook_pre
  MlpPreLinear,       // blocks.{l}.mlp.hook_pre_linear
  MlpPost,            // blocks.{l}.mlp.hook_post
  Ln2PostScale,       // blocks.{l}.ln2_post.hook_scale
  Ln2PostNormalized,  // blocks.{l}.ln2_post.hook_normalized
  MlpOut,             // blocks.{l}.hook_mlp_out
  ResidPost,          // blocks.{l}.hook_resid_post
  LnFinalScale,       // ln_final.hook_scale
  LnFinalNormalized,  // ln_final.hook_normalized
  Logits,             // logits
};

// The dimensions a shape is written in (TransformerLens's vocabulary).
enum class Dim : uint8_t { Pos, QueryPos, KeyPos, DModel, Head, KvHead, DHead, DMlp, DVocab, One };

// The part of the architecture a key needs.
enum class HookNeeds : uint8_t {
  Always,
  LearnedPositions,  // a position embedding table (not rotary)
  Rotary,            // rotated queries and keys
  NormScales,        // RMSNorm: the norms' scales and normalized inputs are keys
  GatedMlp,          // the up projection beside the gate
  QkNorm,            // a norm of each query and key head (Gemma 3, Qwen3)
  PostAttnNorm,      // a norm of the attention output (Gemma)
  PostMlpNorm,       // a norm of the MLP output (Gemma)
};

// What one edit replaces: nothing (not editable), a whole row, or one head's, key/value head's
// or neuron's columns of it (an edit may still name no unit and take the whole row).
enum class EditUnit : uint8_t { None, Row, Head, KvHead, Neuron };

struct HookInfo {
  HookPoint hook;
  bool per_layer;          // named blocks.{l}.<name>
  std::string_view name;   // TransformerLens's, without "blocks.{l}."
  std::string_view short_name;  // the command line's
  Dim shape[3];            // the first `rank` entries
  int rank;
  HookNeeds needs;
  bool stored;             // kept by a plain run; otherwise derived by get()
  std::string_view how;    // how it is made (derived: from what), one line
  EditUnit edit;
};

// The table, indexed by HookPoint.
std::span<const HookInfo> hook_table();
const HookInfo& hook_info(HookPoint hook);
inline constexpr int kHookCount = static_cast<int>(HookPoint::Logits) + 1;

// Whether the model has this key.
bool hook_exists(const ModelConfig& c, HookPoint hook);
// Whether a run's rows of this hook can be read (ActivationCache::rows): a key of the model, or a
// block norm's output ln1/ln2.hook_normalized on a LayerNorm model, which the cache derives on
// request though it is not yet one of its keys there (TransformerLens has it on every norm; what
// SAELens's transcoders read).
bool hook_readable(const ModelConfig& c, HookPoint hook);
// The key of `hook` at layer l ("blocks.3.attn.hook_z"; model-wide hooks ignore l).
std::string hook_key(HookPoint hook, int l);
// A key of the contract as a hook and its layer (-1 for model-wide hooks); nullopt when the key
// is not one (a layer out of range included). Does not check that the model has it.
struct HookKey {
  HookPoint hook;
  int layer;
};
std::optional<HookKey> parse_hook_key(const ModelConfig& c, std::string_view key);
// A hook by TransformerLens name without the block prefix ("attn.hook_z", "hook_embed") or by
// short name ("z", "embed"); nullopt for another word.
std::optional<HookPoint> find_hook(std::string_view name);

// The size of a dimension in this model (Pos, QueryPos, KeyPos: n_pos).
int64_t dim_size(const ModelConfig& c, Dim d, int64_t n_pos);
std::string_view dim_name(Dim d);
// The shape of the key for a run of n_pos tokens, as get() returns it.
std::vector<int64_t> hook_shape(const ModelConfig& c, HookPoint hook, int64_t n_pos);
// Floats per position of a per-position key ([pos, head, d_head]: n_heads * d_head); for
// attn.hook_pattern and hook_attn_scores, n_pos per query row of one head.
int64_t hook_row_width(const ModelConfig& c, HookPoint hook, int64_t n_pos);
// How many units an edit may name (heads, key/value heads, neurons; 0 for Row or None) and how
// many floats of a row one unit is (a whole row for Row).
int hook_unit_count(const ModelConfig& c, HookPoint hook);
int64_t hook_unit_width(const ModelConfig& c, HookPoint hook, int64_t n_pos);
std::string_view to_string(EditUnit u);  // "", "row", "head", "kv head", "neuron"

// The listing of `headscope-cli hooks [--model DIR]`: one entry per hook point (per-layer ones
// once, as blocks.{l}.<name>), with the model's sizes when a config is given (pos stays symbolic).
struct HookListing {
  std::string name;        // "blocks.{l}.attn.hook_z", "hook_embed"
  std::string short_name;  // "z"
  std::string dims;        // "[pos, head, d_head]"
  std::string shape;       // with a model: "[pos, 4, 8]"; otherwise dims
  std::string needs;       // "", "learned positions", "rotary", "RMSNorm", "gated MLP"
  bool exists = true;      // with a model: whether it has this key
  bool stored = false;
  std::string how;
  bool editable = false;
  std::string unit;        // "row", "head", "kv head", "neuron"; empty when not editable
};
std::vector<HookListing> hook_listing(const ModelConfig* c = nullptr);
nlohmann::json hook_listing_json(const ModelConfig* c = nullptr);
// The listing as a plain-text table, one hook per line.
std::string hook_listing_text(const ModelConfig* c = nullptr);

}  // namespace hs
