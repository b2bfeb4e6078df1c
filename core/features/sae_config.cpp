#include "core/features/sae_config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/model/config.h"
#include "core/model/hooks.h"

namespace hs {
namespace {

using nlohmann::json;

// Latents per SAE: 2^24 is 16M, far above any published SAE (Gemma Scope's widest is 1M).
constexpr int64_t kMaxLatents = int64_t{1} << 24;

const char* kArchitectures =
    "standard, jumprelu, topk, gated, transcoder, skip_transcoder or jumprelu_transcoder";

std::string type_name(const json& v) { return v.type_name(); }

// A positive integer up to `max`; `fallback` when absent or null (refused when fallback < 0).
int json_int(const json& j, const char* key, const std::string& source, int64_t max, int fallback = -1) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (fallback >= 0) return fallback;
    throw Error(source + ": \"" + key + "\" is missing; a SAELens cfg.json gives it (a positive integer).");
  }
  if (!it->is_number_integer() || it->get<int64_t>() < 1 || it->get<int64_t>() > max)
    throw Error(source + ": \"" + key + "\" must be an integer from 1 to " + std::to_string(max) + ", found " +
                it->dump() + ".");
  return static_cast<int>(it->get<int64_t>());
}

bool json_bool(const json& j, const char* key, const std::string& source, bool fallback) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_boolean())
    throw Error(source + ": \"" + key + "\" must be true or false, found " + type_name(*it) + ".");
  return it->get<bool>();
}

// A string, or "" when absent or null.
std::string json_string(const json& j, const char* key, const std::string& source) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return "";
  if (!it->is_string()) throw Error(source + ": \"" + key + "\" must be a string, found " + type_name(*it) + ".");
  return it->get<std::string>();
}

// The major version of "6.0.0-rc.0" (0 when it does not start with a number).
int major_version(const std::string& v) {
  int major = 0;
  const auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), major);
  return ec == std::errc() ? major : 0;
}

// TransformerLens names that HeadScope's table spells differently: the MLP's input and output
// hooks circuit-tracer's ReplacementMLP adds (mlp.hook_in, mlp.hook_out), and hook_mlp_in
// (TransformerLens's copy of resid_mid, the input of ln2).
std::string canonical_hook(const std::string& rest, bool* before_post_norm) {
  if (rest == "mlp.hook_in") return "ln2.hook_normalized";
  if (rest == "hook_mlp_in") return "hook_resid_mid";
  if (rest == "mlp.hook_out") {
    if (before_post_norm) *before_post_norm = true;
    return "hook_mlp_out";
  }
  return rest;
}

std::string canonical_full_hook(const std::string& hook, bool* before_post_norm) {
  const std::string prefix = "blocks.";
  if (hook.compare(0, prefix.size(), prefix) != 0) return hook;
  const size_t dot = hook.find('.', prefix.size());
  if (dot == std::string::npos) return hook;
  return hook.substr(0, dot + 1) + canonical_hook(hook.substr(dot + 1), before_post_norm);
}

}  // namespace

int sae_hook_layer(const std::string& hook, const std::string& source, const char* field) {
  const auto unknown = [&] {
    return Error(source + ": " + field + " \"" + hook +
                 "\" is not a TransformerLens hook HeadScope knows (`headscope-cli hooks` lists them, e.g. "
                 "blocks.2.hook_resid_pre).");
  };
  const std::string prefix = "blocks.";
  if (hook.compare(0, prefix.size(), prefix) != 0) {
    const std::optional<HookPoint> h = find_hook(hook);
    if (!h || hook_info(*h).per_layer || hook_info(*h).name != hook) throw unknown();
    return -1;
  }
  const size_t dot = hook.find('.', prefix.size());
  if (dot == std::string::npos) throw unknown();
  int layer = -1;
  const char* first = hook.data() + prefix.size();
  const auto [ptr, ec] = std::from_chars(first, hook.data() + dot, layer);
  if (ec != std::errc() || ptr != hook.data() + dot || dot == prefix.size() || layer < 0 || layer >= kMaxLayers)
    throw unknown();
  const std::string rest = hook.substr(dot + 1);
  const std::optional<HookPoint> h = find_hook(rest);
  if (!h || !hook_info(*h).per_layer || hook_info(*h).name != rest) throw unknown();
  return layer;
}

SaeLensConfig parse_saelens_config(std::string_view json_text, const std::string& source) {
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::exception& e) {
    throw Error(source + ": not valid JSON (" + json_error_reason(e) + "). Restore the SAE's original cfg.json.");
  }
  if (!j.is_object()) throw Error(source + ": must hold a JSON object, found " + type_name(j) + ".");
  const json* metadata = nullptr;
  if (const auto it = j.find("metadata"); it != j.end() && !it->is_null()) {
    if (!it->is_object()) throw Error(source + ": \"metadata\" must be an object, found " + type_name(*it) + ".");
    metadata = &*it;
  }
  SaeLensConfig c;
  // sae_lens/loading/pretrained_sae_loaders.py, handle_config_defaulting: a config without a
  // sae_lens_version, or one before 6.0.0-rc.0, goes through handle_pre_6_0_config.
  std::string version = json_string(j, "sae_lens_version", source);
  if (version.empty() && metadata) version = json_string(*metadata, "sae_lens_version", source + " metadata");
  const bool v6 = !version.empty() && major_version(version) >= 6;
  c.source_format = v6 ? "saelens v6" : "saelens legacy";

  c.architecture = json_string(j, "architecture", source);
  if (!v6) {
    // handle_pre_6_0_config: hook_point -> hook_name, activation_fn_str -> activation_fn,
    // architecture "standard" unless given, activation_fn "topk" with activation_fn_kwargs.k
    // makes a topk SAE.
    if (c.architecture.empty()) c.architecture = "standard";
    std::string act = json_string(j, "activation_fn", source);
    if (act.empty()) act = json_string(j, "activation_fn_str", source);
    if (act.empty()) act = "relu";
    const json* kwargs = nullptr;
    if (const auto it = j.find("activation_fn_kwargs"); it != j.end() && !it->is_null()) {
      if (!it->is_object())
        throw Error(source + ": \"activation_fn_kwargs\" must be an object, found " + type_name(*it) + ".");
      kwargs = &*it;
    }
    if (act == "topk" && kwargs && kwargs->contains("k") && !(*kwargs)["k"].is_null()) {
      c.architecture = "topk";
      c.k = json_int(*kwargs, "k", source + " activation_fn_kwargs", kMaxLatents);
    } else if (act != "relu") {
      // SAELens 6 drops activation_fn and runs such an SAE with a ReLU, silently.
      throw Error(source + ": \"activation_fn\" is \"" + act +
                  "\"; HeadScope runs SAEs with \"relu\" (or \"topk\" with activation_fn_kwargs.k), as SAELens 6 "
                  "does, and will not run this one with another activation than it was trained with.");
    }
  }
  if (c.architecture.empty())
    throw Error(source + ": \"architecture\" is missing; SAELens 6 writes one (" + std::string(kArchitectures) + ").");
  static const char* known[] = {"standard", "jumprelu", "topk", "gated", "transcoder", "skip_transcoder",
                                "jumprelu_transcoder"};
  if (std::find(std::begin(known), std::end(known), c.architecture) == std::end(known)) {
    std::string hint;
    if (c.architecture == "batchtopk" || c.architecture == "matryoshka_batchtopk")
      hint = " (a training checkpoint: SAELens saves BatchTopK SAEs for inference as jumprelu, "
             "with save_inference_model)";
    throw Error(source + ": \"architecture\" is \"" + c.architecture + "\"" + hint + "; HeadScope reads " +
                kArchitectures + ".");
  }

  // The hook: v6 keeps it in metadata; pre-6.0 configs at the top level (hook_name or hook_point).
  const char* hook_field = "metadata.hook_name";
  if (metadata) c.hook_in = json_string(*metadata, "hook_name", source);
  if (c.hook_in.empty()) {
    hook_field = "hook_name";
    c.hook_in = json_string(j, "hook_name", source);
  }
  if (c.hook_in.empty() && !v6) {
    hook_field = "hook_point";
    c.hook_in = json_string(j, "hook_point", source);
  }
  if (c.hook_in.empty())
    throw Error(source + ": names no hook (metadata.hook_name, or hook_name in a pre-6.0 config); add the "
                "TransformerLens hook the SAE was trained on, e.g. \"blocks.2.hook_resid_pre\".");
  const std::string original_in = c.hook_in;
  c.hook_in = canonical_full_hook(c.hook_in, nullptr);
  c.layer = sae_hook_layer(c.hook_in, source, hook_field);
  const auto head_index = [&](const char* key) {
    const json* holders[] = {metadata, &j};
    for (const json* h : holders)
      if (h && h->contains(key) && !(*h)[key].is_null())
        throw Error(source + ": \"" + key + "\" is " + (*h)[key].dump() +
                    ": this SAE reads one attention head, which HeadScope does not run; it reads whole hooks.");
  };
  head_index("hook_head_index");

  c.d_in = json_int(j, "d_in", source, kMaxConfigDim);
  c.d_sae = json_int(j, "d_sae", source, kMaxLatents);
  if (c.transcoder()) {
    c.d_out = json_int(j, "d_out", source, kMaxConfigDim, 0);
    std::string out;
    if (metadata) out = json_string(*metadata, "hook_name_out", source);
    if (out.empty()) out = json_string(j, "hook_name_out", source);
    if (out.empty())
      throw Error(source + ": a " + c.architecture + " names its output hook in metadata.hook_name_out; it has none. "
                  "Add it, e.g. \"blocks.0.hook_mlp_out\".");
    c.hook_out = canonical_full_hook(out, nullptr);
    sae_hook_layer(c.hook_out, source, "metadata.hook_name_out");
    head_index("hook_head_index_out");
  } else {
    c.hook_out = c.hook_in;
  }

  // SAEConfig.apply_b_dec_to_input defaults to True; TranscoderConfig refuses True, and saves
  // False, so a transcoder config without the key is read as False here.
  c.apply_b_dec_to_input = json_bool(j, "apply_b_dec_to_input", source, !c.transcoder());
  if (c.transcoder() && c.apply_b_dec_to_input)
    throw Error(source + ": \"apply_b_dec_to_input\" is true, which SAELens refuses for transcoders (b_dec has the "
                "output's width); set it to false.");

  // normalize_activations: pre-6.0 booleans become "none" / "expected_average_only_in".
  if (const auto it = j.find("normalize_activations"); it == j.end() || it->is_null()) {
    c.normalize_activations = "none";
  } else if (it->is_boolean() && !v6) {
    c.normalize_activations = it->get<bool>() ? "expected_average_only_in" : "none";
  } else if (it->is_string()) {
    c.normalize_activations = it->get<std::string>();
  } else {
    throw Error(source + ": \"normalize_activations\" must be a string, found " + it->dump() + ".");
  }
  if (c.normalize_activations == "none" || c.normalize_activations == "expected_average_only_in")
    c.norm = SaeNorm::None;
  else if (c.normalize_activations == "constant_norm_rescale")
    c.norm = SaeNorm::ConstantNormRescale;
  else if (c.normalize_activations == "layer_norm")
    c.norm = SaeNorm::LayerNorm;
  else
    throw Error(source + ": \"normalize_activations\" is \"" + c.normalize_activations +
                "\"; SAELens knows none, expected_average_only_in, constant_norm_rescale and layer_norm.");

  std::string reshape = json_string(j, "reshape_activations", source);
  if (reshape.empty() && !v6) reshape = original_in.find("hook_z") != std::string::npos ? "hook_z" : "none";
  if (reshape.empty() || reshape == "none") {
    c.hook_z = false;
  } else if (reshape == "hook_z") {
    // SAE.turn_on_forward_pass_hook_z_reshaping: only for hooks ending in _z.
    if (c.hook_in.size() < 2 || c.hook_in.compare(c.hook_in.size() - 2, 2, "_z") != 0)
      throw Error(source + ": \"reshape_activations\" is \"hook_z\" but the hook is " + c.hook_in +
                  "; SAELens reshapes only attn.hook_z.");
    c.hook_z = true;
  } else {
    throw Error(source + ": \"reshape_activations\" is \"" + reshape + "\"; SAELens knows none and hook_z.");
  }

  if (c.architecture == "topk") {
    if (c.k == 0) c.k = json_int(j, "k", source, kMaxLatents, 100);  // TopKSAEConfig.k = 100
    if (c.k > c.d_sae)
      throw Error(source + ": \"k\" is " + std::to_string(c.k) + ", more than the " + std::to_string(c.d_sae) +
                  " latents (d_sae).");
    c.rescale_acts_by_decoder_norm = json_bool(j, "rescale_acts_by_decoder_norm", source, false);
  }
  c.finetuning_scaling_factor = json_bool(j, "finetuning_scaling_factor", source, false);
  return c;
}

TranscoderSetConfig parse_transcoder_set_config(std::string_view yaml_text, const std::string& source) {
  TranscoderSetConfig c;
  try {
    const YAML::Node root = YAML::Load(std::string(yaml_text));
    if (!root.IsMap())
      throw Error(source + ": must be a YAML mapping (model_kind, feature_input_hook, feature_output_hook, ...).");
    const auto scalar = [&](const char* key) -> std::string {
      const YAML::Node n = root[key];
      if (!n.IsDefined() || n.IsNull()) return "";
      if (!n.IsScalar()) throw Error(source + ": \"" + key + "\" must be a single value.");
      return n.Scalar();
    };
    const std::string kind = scalar("model_kind");
    if (kind == "cross_layer_transcoder")
      throw Error(source + ": model_kind is cross_layer_transcoder; HeadScope reads per-layer transcoder sets "
                  "(model_kind: transcoder_set).");
    if (!kind.empty() && kind != "transcoder_set")
      throw Error(source + ": model_kind is \"" + kind + "\"; HeadScope reads transcoder_set.");
    c.feature_input_hook = scalar("feature_input_hook");
    c.feature_output_hook = scalar("feature_output_hook");
    if (c.feature_input_hook.empty() || c.feature_output_hook.empty())
      throw Error(source + ": feature_input_hook and feature_output_hook are required (e.g. ln2.hook_normalized "
                  "and hook_mlp_out).");
    c.activation = scalar("activation");
    if (!c.activation.empty() && c.activation != "jumprelu" && c.activation != "relu" && c.activation != "topk")
      throw Error(source + ": activation is \"" + c.activation + "\"; circuit-tracer's are jumprelu, relu and topk.");
    const std::string k = scalar("k");
    if (!k.empty()) {
      int v = 0;
      const auto [ptr, ec] = std::from_chars(k.data(), k.data() + k.size(), v);
      if (ec != std::errc() || ptr != k.data() + k.size() || v < 1 || v > kMaxLatents)
        throw Error(source + ": k must be an integer from 1 to " + std::to_string(kMaxLatents) + ", found \"" + k +
                    "\".");
      c.k = v;
    }
    if (c.activation == "topk" && c.k == 0)
      throw Error(source + ": activation is topk but k is missing; add k (the number of latents kept).");
    const YAML::Node list = root["transcoders"];
    if (list.IsDefined() && !list.IsNull()) {
      if (!list.IsSequence()) throw Error(source + ": transcoders must be a list of files, one per layer.");
      if (list.size() == 0) throw Error(source + ": transcoders is an empty list.");
      if (list.size() > static_cast<size_t>(kMaxLayers))
        throw Error(source + ": transcoders lists " + std::to_string(list.size()) + " files, more than " +
                    std::to_string(kMaxLayers) + " layers.");
      // circuit-tracer: a list of paths (layer i at index i); its first releases: a list of
      // {id, layer, filepath}, sorted by layer.
      std::vector<std::pair<int, std::string>> entries;
      for (size_t i = 0; i < list.size(); ++i) {
        const YAML::Node e = list[i];
        if (e.IsScalar()) {
          entries.emplace_back(static_cast<int>(i), e.Scalar());
        } else if (e.IsMap() && e["filepath"].IsScalar() && e["layer"].IsScalar()) {
          int layer = -1;
          const std::string& l = e["layer"].Scalar();
          const auto [ptr, ec] = std::from_chars(l.data(), l.data() + l.size(), layer);
          if (ec != std::errc() || ptr != l.data() + l.size() || layer < 0 || layer >= kMaxLayers)
            throw Error(source + ": transcoders[" + std::to_string(i) + "].layer is \"" + l +
                        "\", not a layer number.");
          entries.emplace_back(layer, e["filepath"].Scalar());
        } else {
          throw Error(source + ": transcoders[" + std::to_string(i) +
                      "] is neither a file name nor a mapping with layer and filepath.");
        }
      }
      std::sort(entries.begin(), entries.end());
      for (size_t i = 0; i < entries.size(); ++i) {
        if (entries[i].first != static_cast<int>(i))
          throw Error(source + ": transcoders must cover layers 0 to " + std::to_string(entries.size() - 1) +
                      " once each (circuit-tracer's rule); layer " + std::to_string(i) +
                      (entries[i].first < static_cast<int>(i) ? " appears twice." : " is missing."));
        c.transcoders.push_back(entries[i].second);
      }
    }
  } catch (const YAML::Exception& e) {
    throw Error(source + ": not valid YAML (" + std::string(e.what()).substr(0, 300) +
                "). Restore the transcoder set's original config.yaml.");
  }
  return c;
}

std::string transcoder_set_hook(std::string_view hook, int layer, const std::string& source, const char* field,
                                bool* before_post_norm) {
  const std::string name = "blocks." + std::to_string(layer) + "." + canonical_hook(std::string(hook), before_post_norm);
  sae_hook_layer(name, source, field);
  return name;
}

}  // namespace hs
