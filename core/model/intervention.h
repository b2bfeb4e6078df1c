// Interventions on the forward pass, as plain data: TransformerLens's forward hooks at any
// editable hook point of hooks.h's table (hook_embed, hook_pos_embed, hook_resid_pre/mid/post,
// attn.hook_q/k/v, attn.hook_pattern, attn.hook_z, hook_attn_out, mlp.hook_pre, mlp.hook_post,
// hook_mlp_out). An edit replaces an activation by zeros (zero ablation), by its mean over this
// prompt's positions (mean ablation), by the value another run had there (activation patching),
// adds a vector times a scale (steering), or calls a function on the rows (for code: what an
// SAE splice uses). It takes a whole row, or one unit of it: a head (hook_q, hook_pattern,
// hook_z), a key/value head (hook_k, hook_v) or a neuron (mlp.hook_pre, mlp.hook_post); at one
// position or all of them.
//
// The forward pass applies them where the hook sits, before anything downstream reads the
// activation, and the cache stores the edited value under the hook's name (as a cache hook added
// after the editing hook would see it in TransformerLens). Every other key follows from it, so an
// intervened run is a complete ActivationCache and every view and export works on it unchanged.
// A key the cache derives on request (hook_q/hook_k before rotation, mlp.hook_pre/post,
// hook_resid_mid/post) is stored by a run that edits it, since the derivation would miss the edit.
//
// A run without interventions is untouched: forward() looks the list up once per layer, never
// per element, so its bits and its speed are those of a plain run.
//
// attn.hook_pattern: the edited pattern is what multiplies v. Only zero, patch and a callable
// edit it (a mean or an added vector would give weight to later keys); entries above the
// diagonal are set back to zero after a callable edit, since a query may not read later positions
// and the cache keeps the lower triangle. Its rows are query positions, its columns key positions.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/model/hooks.h"
#include "core/tensor/eigen.h"

namespace hs {

class ActivationCache;
class Weights;
struct ModelConfig;

enum class InterventionKind : uint8_t {
  Zero,   // zeros
  Mean,   // the activation's mean over every position of this run (always at every position)
  Patch,  // the value `source` had at the same hook, layer, unit and position
  Add,    // + scale * vector: steering
  Call,   // a function of the rows (`call`)
};

// A callable edit: `edit(rows, first_pos)` changes, in place, the edited unit's columns of the
// rows of positions first_pos .. first_pos + rows.rows() - 1 ([rows, unit width]; for
// attn.hook_pattern one head's [query rows, key_pos]). `position_local`: each row's new value
// depends on that row alone, so that a prompt extending an earlier run may reuse its prefix.
struct CallableEdit {
  std::function<void(Eigen::Ref<RowMatrixXf> rows, Eigen::Index first_pos)> edit;
  bool position_local = false;
  std::string name = "a callable edit";  // in describe()
};

struct Intervention {
  InterventionKind kind = InterventionKind::Zero;
  HookPoint hook = HookPoint::Z;
  int layer = 0;  // ignored for hook_embed and hook_pos_embed
  // The unit edited (hooks.h's EditUnit): a head for hook_q, hook_pattern and hook_z, a key/value
  // head for hook_k and hook_v, a neuron for mlp.hook_pre and mlp.hook_post; -1: the whole row
  // (every head, every neuron).
  int head = -1;
  int pos = -1;  // the position replaced; -1: every position
  // Patch: the run copied from (same weights, same number of tokens). Compared by identity.
  std::shared_ptr<const ActivationCache> source;
  // Add: the vector, as wide as the unit (or the row), and its scale. Compared by identity.
  std::shared_ptr<const std::vector<float>> vector;
  float scale = 1.0f;
  // Call: the function. Compared by identity.
  std::shared_ptr<const CallableEdit> call;
  bool operator==(const Intervention&) const = default;
};
using Interventions = std::vector<Intervention>;

Intervention zero_ablation(int layer, int head);  // hook_z of one head, every position
Intervention mean_ablation(int layer, int head);
// source's value at (layer, pos) of hook, or at (layer, head) of Z when hook == Z (pos -1: every
// position).
Intervention patch_from(std::shared_ptr<const ActivationCache> source, HookPoint hook, int layer, int head_or_pos,
                        int z_pos = -1);

// Any edit at a hook (unit -1: the whole row).
Intervention zero_at(HookPoint hook, int layer, int unit = -1, int pos = -1);
Intervention mean_at(HookPoint hook, int layer, int unit = -1);
Intervention patch_at(std::shared_ptr<const ActivationCache> source, HookPoint hook, int layer, int unit = -1,
                      int pos = -1);
Intervention steer_at(HookPoint hook, int layer, std::vector<float> vector, float scale, int unit = -1, int pos = -1);
Intervention call_at(HookPoint hook, int layer, std::shared_ptr<const CallableEdit> call, int unit = -1,
                     int pos = -1);

// Throws hs::Error when an intervention does not fit the model or the run of n_pos tokens: a
// hook that cannot be edited or that this model does not have, a layer, unit or position out of
// range, a unit given for a hook that has none, a mean at one position, a mean or a vector at
// attn.hook_pattern, a vector of the wrong width, a callable without a function, or a patch
// without a source, from other weights or from a run of another length.
void check_interventions(const Interventions& interventions, const Weights& weights, int n_pos);

// Whether the interventions leave a run's positions independent of the positions after them, so
// that a prompt extending an earlier run with the same interventions may reuse its prefix. Zero
// ablations and added vectors do, and callables that say they are position-local; a mean
// depends on every position, and a patch on its source run's length.
bool prefix_stable(const Interventions& interventions);

// "L3H2 zero-ablated", "L3H2 mean-ablated", "resid_pre L3 pos 5 patched", ...
std::string describe(const Intervention& intervention);
// "attn.hook_z", "hook_resid_pre", ... (hooks.h's name) and the short names of the command line
// (resid_pre, attn_out, mlp_out, z, ...).
std::string_view hook_name(HookPoint hook);
std::string_view hook_short_name(HookPoint hook);
// The hooks whose patching the batched sweep (core/analysis/patching.h) implements, and one of
// them by short name; parse_hook_point throws hs::Error for another name.
inline constexpr HookPoint kPatchSweepSites[] = {HookPoint::ResidPre, HookPoint::AttnOut, HookPoint::MlpOut,
                                                 HookPoint::Z};
HookPoint parse_hook_point(std::string_view name);

// Head ablations as the command line and the docs write them: "3.2,1.0:mean" — LAYER.HEAD with an
// optional :zero (the default) or :mean, separated by commas. Throws hs::Error naming the item
// that is not one; heads are checked against the model by check_interventions.
Interventions parse_head_ablations(std::string_view spec);

// Edits as the command line writes them (--edit), comma-separated items of
//   HOOK[:LAYER[.UNIT]]:zero|mean[@POS]
// HOOK is a hook's name (attn.hook_z, hook_resid_pre, hook_embed) or its short name (z,
// resid_pre, embed); blocks.L.NAME gives the layer in the name, and then the LAYER field is the
// unit alone. LAYER is absent for hook_embed and hook_pos_embed; UNIT is a head, a key/value head
// or a neuron (hooks.h). Examples:
//   attn.hook_z:3.2:zero@5      head 2 of layer 3 at position 5
//   blocks.3.attn.hook_z:2:zero the same head at every position
//   mlp.hook_post:1.17:zero     neuron 17 of layer 1
//   hook_resid_pre:2:mean       the whole residual stream entering layer 2
//   embed:zero@0                the token embedding of the first position
// Throws hs::Error naming the item that is not one; ranges are checked against the model by
// check_interventions.
Interventions parse_edits(std::string_view spec);
// A steering vector as the command line writes it (--steer):
//   HOOK[:LAYER[.UNIT]]:VEC.npy:SCALE[@POS]     e.g. blocks.6.hook_resid_pre:vec.npy:4.0
// VEC.npy holds a float32 vector (numpy.save) as wide as the unit, or as the row without one.
// `config` gives that width: a file of another width is refused, naming both.
Intervention parse_steer(std::string_view spec, const ModelConfig& config);

}  // namespace hs
