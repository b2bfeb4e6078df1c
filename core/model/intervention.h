// Interventions on the forward pass, as plain data: TransformerLens's forward hooks on hook_z,
// hook_resid_pre, hook_attn_out and hook_mlp_out, limited to the three edits interpretability
// work uses most — replace an activation by zeros (zero ablation), by its mean over this prompt's
// positions (mean ablation), or by the value another run had there (activation patching).
//
// The forward pass applies them where the hook sits, before anything downstream reads the
// activation, and the cache stores the edited value under the hook's name (as a cache hook added
// after the editing hook would see it in TransformerLens). Every other key follows from it, so an
// intervened run is a complete ActivationCache and every view and export works on it unchanged.
//
// A run without interventions is untouched: forward() looks the list up once per layer, never
// per element, so its bits and its speed are those of a plain run.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace hs {

class ActivationCache;
class Weights;

// Where an intervention edits the run.
enum class HookPoint : uint8_t {
  ResidPre,  // blocks.{l}.hook_resid_pre  [pos, d_model]: the residual stream entering block l
  Z,         // blocks.{l}.attn.hook_z     [pos, head, d_head]: one head's mix of values
  AttnOut,   // blocks.{l}.hook_attn_out   [pos, d_model]: the attention block's output, b_O included
  MlpOut,    // blocks.{l}.hook_mlp_out    [pos, d_model]: the MLP block's output, b_out included
};

enum class InterventionKind : uint8_t {
  Zero,   // zeros
  Mean,   // the activation's mean over every position of this run (always at every position)
  Patch,  // the value `source` had at the same hook, layer, head and position
};

struct Intervention {
  InterventionKind kind = InterventionKind::Zero;
  HookPoint hook = HookPoint::Z;
  int layer = 0;
  int head = -1;  // Z: the head whose d_head values are replaced; -1 for the other hooks
  int pos = -1;   // the position replaced; -1: every position
  // Patch: the run copied from (same weights, same number of tokens). Compared by identity.
  std::shared_ptr<const ActivationCache> source;
  bool operator==(const Intervention&) const = default;
};
using Interventions = std::vector<Intervention>;

Intervention zero_ablation(int layer, int head);  // hook_z of one head, every position
Intervention mean_ablation(int layer, int head);
// source's value at (layer, pos) of hook, or at (layer, head) of Z when hook == Z (pos -1: every
// position).
Intervention patch_from(std::shared_ptr<const ActivationCache> source, HookPoint hook, int layer, int head_or_pos,
                        int z_pos = -1);

// Throws hs::Error when an intervention does not fit the model or the run of n_pos tokens: a
// layer, head or position out of range, a head given for a hook that has none, a mean at one
// position, or a patch without a source, from other weights or from a run of another length.
void check_interventions(const Interventions& interventions, const Weights& weights, int n_pos);

// Whether the interventions leave a run's positions independent of the positions after them, so
// that a prompt extending an earlier run with the same interventions may reuse its prefix. Zero
// ablations do; a mean depends on every position, and a patch on its source run's length.
bool prefix_stable(const Interventions& interventions);

// "L3H2 zero-ablated", "L3H2 mean-ablated", "resid_pre L3 pos 5 patched", ...
std::string describe(const Intervention& intervention);
// "hook_z", "hook_resid_pre", ...; and the short names of the command line (resid_pre, attn_out,
// mlp_out, z). parse_hook_point throws hs::Error for another name.
std::string_view hook_name(HookPoint hook);
std::string_view hook_short_name(HookPoint hook);
HookPoint parse_hook_point(std::string_view name);

// Head ablations as the command line and the docs write them: "3.2,1.0:mean" — LAYER.HEAD with an
// optional :zero (the default) or :mean, separated by commas. Throws hs::Error naming the item
// that is not one; heads are checked against the model by check_interventions.
Interventions parse_head_ablations(std::string_view spec);

}  // namespace hs
