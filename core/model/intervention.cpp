#include "core/model/intervention.h"

#include <charconv>
#include <utility>

#include "core/error.h"
#include "core/model/cache.h"

namespace hs {

Intervention zero_ablation(int layer, int head) { return {InterventionKind::Zero, HookPoint::Z, layer, head, -1, nullptr}; }

Intervention mean_ablation(int layer, int head) { return {InterventionKind::Mean, HookPoint::Z, layer, head, -1, nullptr}; }

Intervention patch_from(std::shared_ptr<const ActivationCache> source, HookPoint hook, int layer, int head_or_pos,
                        int z_pos) {
  Intervention i;
  i.kind = InterventionKind::Patch;
  i.hook = hook;
  i.layer = layer;
  if (hook == HookPoint::Z) {
    i.head = head_or_pos;
    i.pos = z_pos;
  } else {
    i.pos = head_or_pos;
  }
  i.source = std::move(source);
  return i;
}

std::string_view hook_name(HookPoint hook) {
  switch (hook) {
    case HookPoint::ResidPre: return "hook_resid_pre";
    case HookPoint::Z: return "attn.hook_z";
    case HookPoint::AttnOut: return "hook_attn_out";
    case HookPoint::MlpOut: return "hook_mlp_out";
  }
  return "?";
}

std::string_view hook_short_name(HookPoint hook) {
  switch (hook) {
    case HookPoint::ResidPre: return "resid_pre";
    case HookPoint::Z: return "z";
    case HookPoint::AttnOut: return "attn_out";
    case HookPoint::MlpOut: return "mlp_out";
  }
  return "?";
}

HookPoint parse_hook_point(std::string_view name) {
  for (HookPoint h : {HookPoint::ResidPre, HookPoint::AttnOut, HookPoint::MlpOut, HookPoint::Z})
    if (name == hook_short_name(h)) return h;
  throw Error("\"" + std::string(name) + "\" is not an activation to patch; use resid_pre, attn_out, mlp_out or z.");
}

std::string describe(const Intervention& i) {
  const std::string head = "L" + std::to_string(i.layer) + "H" + std::to_string(i.head);
  switch (i.kind) {
    case InterventionKind::Zero:
    case InterventionKind::Mean: {
      const std::string what = i.hook == HookPoint::Z ? head : std::string(hook_short_name(i.hook)) + " L" + std::to_string(i.layer);
      const std::string where = i.pos >= 0 ? " at position " + std::to_string(i.pos) : "";
      return what + where + (i.kind == InterventionKind::Zero ? " zero-ablated" : " mean-ablated");
    }
    case InterventionKind::Patch: {
      const std::string what = i.hook == HookPoint::Z ? "z of " + head : std::string(hook_short_name(i.hook)) + " L" + std::to_string(i.layer);
      return what + (i.pos >= 0 ? " at position " + std::to_string(i.pos) : "") + " patched";
    }
  }
  return "?";
}

void check_interventions(const Interventions& interventions, const Weights& weights, int n_pos) {
  const ModelConfig& c = weights.config();
  for (const Intervention& i : interventions) {
    const std::string what = describe(i);
    if (i.layer < 0 || i.layer >= c.n_layers)
      throw Error(what + ": layer " + std::to_string(i.layer) + " does not exist; this model has " +
                  std::to_string(c.n_layers) + " layers (0-" + std::to_string(c.n_layers - 1) + ").");
    if (i.hook == HookPoint::Z && (i.head < 0 || i.head >= c.n_heads))
      throw Error(what + ": head " + std::to_string(i.head) + " does not exist; this model has " +
                  std::to_string(c.n_heads) + " heads per layer (0-" + std::to_string(c.n_heads - 1) + ").");
    if (i.hook != HookPoint::Z && i.head != -1)
      throw Error(what + ": only hook_z has heads; give head -1 for " + std::string(hook_name(i.hook)) + ".");
    if (i.pos < -1 || i.pos >= n_pos)
      throw Error(what + ": position " + std::to_string(i.pos) + " is outside the prompt of " + std::to_string(n_pos) +
                  " tokens.");
    if (i.kind == InterventionKind::Mean && i.pos != -1)
      throw Error(what + ": a mean ablation replaces every position by the mean over them; give position -1.");
    if (i.kind == InterventionKind::Patch) {
      if (!i.source) throw Error(what + ": a patch needs the run to copy from.");
      if (i.source->weights().get() != &weights)
        throw Error(what + ": the run to copy from was made with another model.");
      if (i.source->n_pos() != n_pos)
        throw Error(what + ": the run to copy from has " + std::to_string(i.source->n_pos()) + " tokens and this run " +
                    std::to_string(n_pos) + "; patching copies position by position, so they must be equal.");
      if (i.source->n_layer() == 0) throw Error(what + ": the run to copy from kept only its logits.");
    }
  }
}

bool prefix_stable(const Interventions& interventions) {
  for (const Intervention& i : interventions)
    if (i.kind != InterventionKind::Zero) return false;
  return true;
}

Interventions parse_head_ablations(std::string_view spec) {
  Interventions out;
  auto refuse = [](std::string_view item) -> Error {
    return Error("--ablate expects LAYER.HEAD[:zero|:mean] items separated by commas, like 3.2,1.0:mean; \"" +
                 std::string(item) + "\" is not one.");
  };
  auto number = [&](std::string_view s, std::string_view item) {
    int v = 0;
    const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (s.empty() || ec != std::errc() || p != s.data() + s.size() || v < 0) throw refuse(item);
    return v;
  };
  size_t start = 0;
  while (start <= spec.size()) {
    size_t end = spec.find(',', start);
    if (end == std::string_view::npos) end = spec.size();
    const std::string_view item = spec.substr(start, end - start);
    std::string_view head = item, kind = "zero";
    if (const size_t colon = item.find(':'); colon != std::string_view::npos) {
      head = item.substr(0, colon);
      kind = item.substr(colon + 1);
    }
    const size_t dot = head.find('.');
    if (dot == std::string_view::npos || (kind != "zero" && kind != "mean")) throw refuse(item);
    const int layer = number(head.substr(0, dot), item), h = number(head.substr(dot + 1), item);
    const Intervention i = kind == "zero" ? zero_ablation(layer, h) : mean_ablation(layer, h);
    bool duplicate = false;
    for (const Intervention& o : out) duplicate |= o.layer == i.layer && o.head == i.head;
    if (duplicate)
      throw Error("--ablate names head " + std::to_string(layer) + "." + std::to_string(h) +
                  " twice; give each head once.");
    out.push_back(i);
    start = end + 1;
  }
  return out;
}

}  // namespace hs
