// headscope-cli info: the model's architecture and sizes as JSON.
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "app/cli/commands.h"
#include "app/cli/common.h"
#include "core/model/architecture_text.h"

namespace hs::cli {
namespace {

using nlohmann::json;

int info(const Args& a) {
  const auto m = load_model(a);
  const hs::ModelConfig& c = m->config();
  json j = {{"name", m->name()},
            {"path", std::filesystem::absolute(m->dir()).lexically_normal().string()},
            {"model_type", c.model_type},
            {"n_layer", c.n_layers},
            {"n_head", c.n_heads},
            {"d_model", c.d_model},
            {"d_head", c.d_head},
            {"d_mlp", c.d_mlp},
            {"n_ctx", c.n_ctx},
            {"d_vocab", c.d_vocab},
            {"tokenizer", m->tokenizer().kind()},
            {"tokenizer_vocab_size", m->tokenizer().vocab_size()},
            {"activation_function", c.activation_name},
            {"layer_norm_epsilon", c.norm_eps},
            {"scale_attn_by_inverse_layer_idx", c.scale_attn_by_inverse_layer_idx},
            {"tied_unembedding", m->weights()->tied_unembedding()},
            {"parameters", c.parameter_count()},
            {"warnings", m->warnings()}};
  const hs::Architecture& arch = c.architecture;
  j["n_key_value_heads"] = c.n_key_value_heads;
  j["architecture"] = {{"family", arch.family ? std::string(arch.family->name()) : std::string()},
                       {"norm", hs::to_string(arch.norm)},
                       {"norm_bias", arch.norm_bias},
                       {"positions", hs::to_string(arch.positions)},
                       {"mlp", hs::to_string(arch.mlp)},
                       {"qkv", hs::to_string(arch.qkv)},
                       {"qkv_bias", arch.qkv_bias},
                       {"attn_out_bias", arch.attn_out_bias},
                       {"mlp_bias", arch.mlp_bias},
                       {"parallel_blocks", arch.parallel_blocks},
                       {"tied_unembedding", m->weights()->tied_unembedding()}};
  j["architecture"]["summary"] = hs::describe_architecture(c, m->weights()->tied_unembedding());
  if (arch.positions == hs::PositionKind::Rotary) {
    const hs::RotaryParams& r = arch.rotary;
    j["architecture"]["rotary"] = {{"dim", r.dim}, {"base", r.base}, {"scaling", hs::to_string(r.scaling)}};
    if (r.scaling != hs::RopeScaling::None) j["architecture"]["rotary"]["factor"] = r.factor;
    if (r.scaling == hs::RopeScaling::Llama3) {
      j["architecture"]["rotary"]["low_freq_factor"] = r.low_freq_factor;
      j["architecture"]["rotary"]["high_freq_factor"] = r.high_freq_factor;
      j["architecture"]["rotary"]["original_max_position_embeddings"] = r.original_context;
    }
  }
  // Gemma 2, Gemma 3 and Qwen3's options, each with the value that leaves a family unchanged when
  // it is off (Architecture's defaults), so every model prints the same keys.
  json& aj = j["architecture"];
  aj["embedding_scaled"] = arch.embedding_scaled;
  aj["norm_weight_plus_one"] = arch.norm_weight_plus_one;
  aj["post_attn_norm"] = arch.post_attn_norm;
  aj["post_mlp_norm"] = arch.post_mlp_norm;
  aj["qk_norm"] = arch.qk_norm;
  aj["attn_scale"] = arch.attn_scale > 0.0f ? json(arch.attn_scale) : json(nullptr);  // null: 1/sqrt(d_head)
  aj["attn_softcap"] = arch.attn_softcap > 0.0f ? json(arch.attn_softcap) : json(nullptr);
  aj["final_softcap"] = arch.final_softcap > 0.0f ? json(arch.final_softcap) : json(nullptr);
  // Per layer, the keys a query reads (null: every earlier key, a global layer).
  json windows = json::array();
  for (int l = 0; l < c.n_layers; ++l) {
    const int w = hs::attention_window(c, l);
    windows.push_back(w > 0 ? json(w) : json(nullptr));
  }
  aj["window"] = std::move(windows);
  if (arch.local_rotary) {
    const hs::RotaryParams& r = arch.rotary_local;
    aj["rotary_local"] = {{"dim", r.dim}, {"base", r.base}, {"scaling", hs::to_string(r.scaling)}};
  }
  if (c.bos_token_id) j["bos_token_id"] = *c.bos_token_id;
  if (c.eos_token_id) j["eos_token_id"] = *c.eos_token_id;
  std::cout << j.dump(2) << "\n";
  return 0;
}

}  // namespace

const CommandSpec& info_command() {
  static const CommandSpec c{
      .name = "info",
      .summary = "the model's architecture and sizes, as JSON",
      .synopsis = {"[--model DIR]"},
      .help = R"(Usage: headscope-cli info [--model DIR]

Prints the model's architecture and sizes as JSON: n_layer, n_head, n_key_value_heads, d_model,
d_head, d_mlp, n_ctx, d_vocab, the activation function, the parameter count, any load warnings,
and "architecture": the family and its options (norm, positions, MLP, QKV layout, biases,
parallel blocks, tied unembedding).
)",
      .options = {model_option()},
      .run = info,
  };
  return c;
}

}  // namespace hs::cli
