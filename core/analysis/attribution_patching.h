// Attribution patching (AtP): the linear estimate of every cell of an activation-patching sweep
// (patching.h) from one forward pass on the clean prompt and one forward + backward pass on the
// corrupted prompt (Nanda 2023; Kramár et al. 2024, "AtP*", arXiv 2403.00745):
//   raw[node] = m_corrupt + (a_clean - a_corrupt) . dM/da     (dM/da on the corrupted run)
//   normalized = (raw - m_corrupt) / (m_clean - m_corrupt)
// with M = logit(answer) - logit(wrong) at the last position, the exact sweep's metric (as
// atp_gradients takes it; attribution_patching estimates any metric its gradient was taken for,
// which the tests use: a dot product where the estimate is exact). The dot product runs over the
// node's part of the activation:
//   resid_pre, attn_out, mlp_out  [layer][pos]      d_model at one position
//   z                             [layer][head]     every position and d_head of one head
//   z_pos                         [layer][head][pos] d_head of one head at one position (rows of
//                                                   raw are layer * n_heads + head)
//   mlp_post                      [layer][neuron]   one neuron at every position
// AtpMethod::AtPQK is AtP*'s QK fix: for z and z_pos the attention pattern of the patched head is
// recomputed exactly with the clean queries (and, separately, the clean keys), and only its change
// is taken linearly; the other sites are plain AtP. tools/reference/hsref.py's atp() is the
// definition the tests hold this to; docs/attribution.md says where the estimate fails.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/model/backward.h"
#include "core/model/cache.h"
#include "core/tensor/eigen.h"

namespace hs {

enum class PatchMethod : uint8_t { Exact, AtP, AtPQK };
std::string_view to_string(PatchMethod m);                        // "exact", "atp", "atp_qk"
std::optional<PatchMethod> parse_patch_method(std::string_view name);

// The nodes an estimate is made for: the exact sweep's four sites and two finer ones.
enum class AtpSite : uint8_t { ResidPre, AttnOut, MlpOut, Z, ZPos, MlpPost };
inline constexpr AtpSite kAtpSites[] = {AtpSite::ResidPre, AtpSite::AttnOut, AtpSite::MlpOut,
                                        AtpSite::Z,        AtpSite::ZPos,    AtpSite::MlpPost};
std::string_view to_string(AtpSite s);  // "resid_pre", "attn_out", "mlp_out", "z", "z_pos", "mlp_post"
std::optional<AtpSite> parse_atp_site(std::string_view name);
HookPoint atp_site_hook(AtpSite s);     // z_pos: Z; mlp_post: MlpPost
// The exact sweep's site of the same nodes (nullopt for z_pos and mlp_post, which it does not sweep).
std::optional<HookPoint> exact_sweep_site(AtpSite s);

struct AtpResult {
  AtpSite what = AtpSite::ResidPre;
  PatchMethod method = PatchMethod::AtP;
  float metric_clean = 0.0f, metric_corrupt = 0.0f;
  RowMatrixXf raw;         // the layout above
  RowMatrixXf normalized;  // (raw - metric_corrupt) / (metric_clean - metric_corrupt)
};

// The hooks whose gradients on the corrupted run the estimates of `sites` read (GradOptions::keep).
std::vector<HookPoint> atp_gradient_hooks(std::span<const AtpSite> sites, PatchMethod method);

// The gradient of logit(answer) - logit(wrong) at the last position on the corrupted run, keeping
// what `sites` need: one backward pass serves every site.
GradientCache atp_gradients(const ActivationCache& corrupt, int32_t answer, int32_t wrong,
                            std::span<const AtpSite> sites, PatchMethod method, int threads = 0);

// The estimate of one site from the two runs (full caches of one model, the same length, no
// interventions: the exact sweep's rules and messages) and the corrupted run's gradient
// (atp_gradients, or any GradientCache of that run and metric keeping the site's hooks). Throws
// hs::Error as patching_sweep does, and when the gradient is of another run or metric.
AtpResult attribution_patching(const ActivationCache& clean, const ActivationCache& corrupt,
                               const GradientCache& corrupt_grad, AtpSite what, PatchMethod method = PatchMethod::AtP);

}  // namespace hs
