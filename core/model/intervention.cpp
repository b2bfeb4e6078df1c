#include "core/model/intervention.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <span>
#include <iterator>
#include <utility>

#include "core/error.h"
#include "core/io/npz_reader.h"
#include "core/model/cache.h"

namespace hs {

Intervention zero_at(HookPoint hook, int layer, int unit, int pos) {
  Intervention i;
  i.kind = InterventionKind::Zero;
  i.hook = hook;
  i.layer = layer;
  i.head = unit;
  i.pos = pos;
  return i;
}

Intervention mean_at(HookPoint hook, int layer, int unit) {
  Intervention i = zero_at(hook, layer, unit);
  i.kind = InterventionKind::Mean;
  return i;
}

Intervention patch_at(std::shared_ptr<const ActivationCache> source, HookPoint hook, int layer, int unit, int pos) {
  Intervention i = zero_at(hook, layer, unit, pos);
  i.kind = InterventionKind::Patch;
  i.source = std::move(source);
  return i;
}

Intervention steer_at(HookPoint hook, int layer, std::vector<float> vector, float scale, int unit, int pos) {
  Intervention i = zero_at(hook, layer, unit, pos);
  i.kind = InterventionKind::Add;
  i.vector = std::make_shared<const std::vector<float>>(std::move(vector));
  i.scale = scale;
  return i;
}

Intervention call_at(HookPoint hook, int layer, std::shared_ptr<const CallableEdit> call, int unit, int pos) {
  Intervention i = zero_at(hook, layer, unit, pos);
  i.kind = InterventionKind::Call;
  i.call = std::move(call);
  return i;
}

Intervention zero_ablation(int layer, int head) { return zero_at(HookPoint::Z, layer, head); }

Intervention mean_ablation(int layer, int head) { return mean_at(HookPoint::Z, layer, head); }

Intervention patch_from(std::shared_ptr<const ActivationCache> source, HookPoint hook, int layer, int head_or_pos,
                        int z_pos) {
  if (hook == HookPoint::Z) return patch_at(std::move(source), hook, layer, head_or_pos, z_pos);
  return patch_at(std::move(source), hook, layer, -1, head_or_pos);
}

std::string_view hook_name(HookPoint hook) { return hook_info(hook).name; }

std::string_view hook_short_name(HookPoint hook) { return hook_info(hook).short_name; }

HookPoint parse_hook_point(std::string_view name) {
  std::string names;
  const size_t n = std::size(kPatchSweepSites);
  for (size_t k = 0; k < n; ++k) {
    if (name == hook_short_name(kPatchSweepSites[k])) return kPatchSweepSites[k];
    names += (k == 0 ? "" : k + 1 == n ? " or " : ", ") + std::string(hook_short_name(kPatchSweepSites[k]));
  }
  throw Error("\"" + std::string(name) + "\" is not an activation to patch; use " + names + ".");
}

namespace {

bool model_wide(HookPoint hook) { return !hook_info(hook).per_layer; }

// "L3H2", "q L1H2", "k L1 kv head 0", "mlp_post L1 neuron 17", "resid_pre L3", "embed".
std::string what_is_edited(const Intervention& i) {
  const std::string head = "L" + std::to_string(i.layer) + "H" + std::to_string(i.head);
  if (i.hook == HookPoint::Z && i.head >= 0) return head;
  std::string what(hook_short_name(i.hook));
  if (model_wide(i.hook)) return what;
  if (i.head < 0) return what + " L" + std::to_string(i.layer);
  switch (hook_info(i.hook).edit) {
    case EditUnit::Head: return what + " " + head;
    case EditUnit::KvHead: return what + " L" + std::to_string(i.layer) + " kv head " + std::to_string(i.head);
    case EditUnit::Neuron: return what + " L" + std::to_string(i.layer) + " neuron " + std::to_string(i.head);
    default: return what + " L" + std::to_string(i.layer) + " unit " + std::to_string(i.head);
  }
}

std::string trimmed_number(float v) {
  std::string s = std::to_string(v);
  while (s.size() > 1 && s.back() == '0') s.pop_back();
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s;
}

}  // namespace

std::string describe(const Intervention& i) {
  const std::string where = i.pos >= 0 ? " at position " + std::to_string(i.pos) : "";
  switch (i.kind) {
    case InterventionKind::Zero:
    case InterventionKind::Mean:
      return what_is_edited(i) + where + (i.kind == InterventionKind::Zero ? " zero-ablated" : " mean-ablated");
    case InterventionKind::Patch:
      return (i.hook == HookPoint::Z && i.head >= 0 ? "z of " : "") + what_is_edited(i) + where + " patched";
    case InterventionKind::Add:
      return what_is_edited(i) + where + " steered (scale " + trimmed_number(i.scale) + ")";
    case InterventionKind::Call:
      return what_is_edited(i) + where + " edited by " + (i.call ? i.call->name : std::string("nothing"));
  }
  return "?";
}

void check_interventions(const Interventions& interventions, const Weights& weights, int n_pos) {
  const ModelConfig& c = weights.config();
  for (const Intervention& i : interventions) {
    const std::string what = describe(i);
    const HookInfo& info = hook_info(i.hook);
    if (info.edit == EditUnit::None)
      throw Error(what + ": " + hook_key(i.hook, i.layer) + " cannot be edited; " + std::string(info.name) +
                  " is " + (info.stored ? "made from" : "derived from") +
                  " other activations. Edit one of those (`headscope-cli hooks` lists the editable ones).");
    if (!hook_exists(c, i.hook))
      throw Error(what + ": this model has no " + std::string(info.name) + " (" + std::string(info.how) + ").");
    if (!model_wide(i.hook) && (i.layer < 0 || i.layer >= c.n_layers))
      throw Error(what + ": layer " + std::to_string(i.layer) + " does not exist; this model has " +
                  std::to_string(c.n_layers) + " layers (0-" + std::to_string(c.n_layers - 1) + ").");
    const int units = hook_unit_count(c, i.hook);
    if (units > 0 && (i.head < -1 || i.head >= units)) {
      const std::string unit(to_string(info.edit));
      const std::string per = info.edit == EditUnit::Neuron ? " neurons per MLP" : " " + unit + "s per layer";
      throw Error(what + ": " + unit + " " + std::to_string(i.head) + " does not exist; this model has " +
                  std::to_string(units) + per + " (0-" + std::to_string(units - 1) + ").");
    }
    if (units == 0 && i.head != -1)
      throw Error(what + ": " + std::string(info.name) + " is edited a whole row at a time; give unit -1.");
    if (i.pos < -1 || i.pos >= n_pos)
      throw Error(what + ": position " + std::to_string(i.pos) + " is outside the prompt of " + std::to_string(n_pos) +
                  " tokens.");
    if (i.kind == InterventionKind::Mean && i.pos != -1)
      throw Error(what + ": a mean ablation replaces every position by the mean over them; give position -1.");
    if (i.hook == HookPoint::Pattern && (i.kind == InterventionKind::Mean || i.kind == InterventionKind::Add))
      throw Error(what + ": attn.hook_pattern takes zero, patch or a callable edit; a mean or an added vector would "
                  "give weight to later positions.");
    if (i.kind == InterventionKind::Add) {
      const int64_t width = i.head >= 0 ? hook_unit_width(c, i.hook, n_pos) : hook_row_width(c, i.hook, n_pos);
      if (!i.vector || static_cast<int64_t>(i.vector->size()) != width)
        throw Error(what + ": the vector has " + std::to_string(i.vector ? i.vector->size() : 0) + " values but " +
                    std::string(info.name) + (i.head >= 0 ? " of one " + std::string(to_string(info.edit)) : "") +
                    " is " + std::to_string(width) + " wide; give a vector of " + std::to_string(width) + ".");
    }
    if (i.kind == InterventionKind::Call && (!i.call || !i.call->edit))
      throw Error(what + ": a callable edit needs its function.");
    if (i.kind == InterventionKind::Patch) {
      if (!i.source) throw Error(what + ": a patch needs the run to copy from.");
      if (i.source->weights().get() != &weights)
        throw Error(what + ": the run to copy from was made with another model.");
      if (i.source->n_pos() != n_pos)
        throw Error(what + ": the run to copy from has " + std::to_string(i.source->n_pos()) + " tokens and this run " +
                    std::to_string(n_pos) + "; patching copies position by position, so they must be equal.");
      if (i.source->n_layer() == 0 && !model_wide(i.hook))
        throw Error(what + ": the run to copy from kept only its logits.");
    }
  }
}

bool prefix_stable(const Interventions& interventions) {
  for (const Intervention& i : interventions) {
    const bool local = i.kind == InterventionKind::Zero || i.kind == InterventionKind::Add ||
                       (i.kind == InterventionKind::Call && i.call && i.call->position_local);
    if (!local) return false;
  }
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

namespace hs {
namespace {

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (true) {
    const size_t end = s.find(sep, start);
    out.push_back(s.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start));
    if (end == std::string_view::npos) return out;
    start = end + 1;
  }
}

bool parse_int(std::string_view s, int& v) {
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return !s.empty() && ec == std::errc() && p == s.data() + s.size() && v >= 0;
}

// HOOK[:LAYER[.UNIT]] as `fields` (the hook's field, then at most one more) into `i`; `fail`
// throws the caller's message with a reason.
template <class Fail>
void parse_site(std::span<const std::string_view> fields, Intervention& i, Fail&& fail) {
  std::string_view name = fields[0];
  std::optional<int> layer;
  if (name.starts_with("blocks.")) {
    const std::string_view rest = name.substr(7);
    const size_t dot = rest.find('.');
    int l = 0;
    if (dot == std::string_view::npos || !parse_int(rest.substr(0, dot), l))
      fail("\"" + std::string(name) + "\" is not blocks.LAYER.NAME");
    layer = l;
    name = rest.substr(dot + 1);
  }
  const std::optional<HookPoint> hook = find_hook(name);
  if (!hook) fail("\"" + std::string(name) + "\" is not a hook point (`headscope-cli hooks` lists them)");
  i.hook = *hook;
  const HookInfo& info = hook_info(*hook);
  if (!info.per_layer) {
    if (layer || fields.size() > 1) fail(std::string(info.name) + " belongs to no layer; give no LAYER");
    i.layer = 0;
    return;
  }
  std::string_view unit;
  if (fields.size() > 1) {
    std::string_view f = fields[1];
    if (!layer) {
      const size_t dot = f.find('.');
      int l = 0;
      if (!parse_int(f.substr(0, dot), l)) fail("\"" + std::string(f) + "\" is not LAYER or LAYER.UNIT");
      layer = l;
      unit = dot == std::string_view::npos ? std::string_view() : f.substr(dot + 1);
      if (dot != std::string_view::npos && unit.empty()) fail("\"" + std::string(f) + "\" has no UNIT after the dot");
    } else {
      unit = f;
    }
  }
  if (!layer) fail(std::string(info.name) + " is in every block; give its LAYER (" + std::string(info.name) + ":3)");
  i.layer = *layer;
  i.head = -1;
  if (!unit.empty()) {
    int u = 0;
    if (!parse_int(unit, u)) fail("\"" + std::string(unit) + "\" is not a head or neuron number");
    if (info.edit == EditUnit::Row || info.edit == EditUnit::None)
      fail(std::string(info.name) + " has no heads or neurons; give LAYER alone");
    i.head = u;
  }
}

// "KIND@POS" or "KIND" into the word and the position (-1 without one).
template <class Fail>
std::string_view parse_at(std::string_view field, int& pos, Fail&& fail) {
  pos = -1;
  const size_t at = field.find('@');
  if (at == std::string_view::npos) return field;
  if (!parse_int(field.substr(at + 1), pos)) fail("\"" + std::string(field.substr(at + 1)) + "\" is not a position");
  return field.substr(0, at);
}

}  // namespace

Interventions parse_edits(std::string_view spec) {
  Interventions out;
  for (std::string_view item : split(spec, ',')) {
    auto fail = [&](const std::string& why) {
      throw Error("--edit expects HOOK[:LAYER[.UNIT]]:zero|mean[@POS] items separated by commas, like "
                  "attn.hook_z:3.2:zero@5 or hook_resid_pre:2:mean; \"" + std::string(item) + "\" is not one: " +
                  why + ".");
    };
    const std::vector<std::string_view> fields = split(item, ':');
    if (fields.size() < 2 || fields.size() > 3) fail("it needs a hook and a kind, separated by ':'");
    Intervention i;
    parse_site(std::span(fields).first(fields.size() - 1), i, fail);
    const std::string_view kind = parse_at(fields.back(), i.pos, fail);
    if (kind == "zero") i.kind = InterventionKind::Zero;
    else if (kind == "mean") i.kind = InterventionKind::Mean;
    else fail("the kind \"" + std::string(kind) + "\" is neither zero nor mean");
    out.push_back(i);
  }
  return out;
}

Intervention parse_steer(std::string_view spec, const ModelConfig& config) {
  auto fail = [&](const std::string& why) {
    throw Error("--steer expects HOOK[:LAYER[.UNIT]]:VEC.npy:SCALE[@POS], like blocks.6.hook_resid_pre:vec.npy:4.0; \"" +
                std::string(spec) + "\" is not one: " + why + ".");
  };
  const std::vector<std::string_view> fields = split(spec, ':');
  if (fields.size() < 3 || fields.size() > 4) fail("it needs a hook, a .npy file and a scale, separated by ':'");
  Intervention i;
  i.kind = InterventionKind::Add;
  parse_site(std::span(fields).first(fields.size() - 2), i, fail);
  const std::string scale_text(parse_at(fields.back(), i.pos, fail));
  char* end = nullptr;
  i.scale = std::strtof(scale_text.c_str(), &end);
  if (scale_text.empty() || end != scale_text.c_str() + scale_text.size() || !std::isfinite(i.scale))
    fail("\"" + scale_text + "\" is not a number");
  const std::string path(fields[fields.size() - 2]);
  const HookInfo& info = hook_info(i.hook);
  if (info.edit == EditUnit::None)
    fail(hook_key(i.hook, i.layer) + " cannot be edited (`headscope-cli hooks` lists the editable hooks)");
  if (i.hook == HookPoint::Pattern) fail("attn.hook_pattern cannot be steered (it would give weight to later keys)");
  const Tensor t = read_npy_file(path);
  const int64_t width = i.head >= 0 ? hook_unit_width(config, i.hook, 0) : hook_row_width(config, i.hook, 0);
  const int64_t rank = static_cast<int64_t>(t.shape.size());
  const int64_t n = static_cast<int64_t>(t.data.size());
  if (n != width || rank == 0 || t.shape.back() != width)
    throw Error(path + ": holds " + std::to_string(n) + " values (shape " + shape_string(t.shape) + ") but " +
                hook_key(i.hook, i.layer) + (i.head >= 0 ? " of one " + std::string(to_string(info.edit)) : "") +
                " is " + std::to_string(width) + " wide; save a vector of " + std::to_string(width) +
                " float32 values (numpy.save(path, v.astype('float32'))).");
  i.vector = std::make_shared<const std::vector<float>>(t.data);
  return i;
}

}  // namespace hs
