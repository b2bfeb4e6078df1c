#include "core/model/architecture_text.h"

#include <cmath>
#include <sstream>
#include <vector>

#include "core/model/architecture.h"
#include "core/model/config.h"

namespace hs {

namespace {

std::string number(double x) {
  if (x == static_cast<double>(static_cast<long long>(x)) && std::abs(x) < 1e15)
    return std::to_string(static_cast<long long>(x));  // 500000, not 5e+05
  std::ostringstream s;
  s << x;
  return s.str();
}

std::string join(const std::vector<std::string>& parts) {
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : ", ") + p;
  return out;
}

}  // namespace

std::string describe_architecture(const ModelConfig& c, bool tied_unembedding) {
  const Architecture& a = c.architecture;
  std::vector<std::string> parts;
  if (a.embedding_scaled) parts.push_back("embedding × sqrt(d_model)");
  parts.push_back(std::string(to_string(a.norm)) + (a.norm_bias ? "" : " without bias") +
                  (a.norm_weight_plus_one ? " (1 + w)" : ""));
  if (a.post_attn_norm && a.post_mlp_norm)
    parts.push_back("norms after attention and the MLP too");
  else if (a.post_attn_norm || a.post_mlp_norm)
    parts.push_back(a.post_attn_norm ? "a norm after attention too" : "a norm after the MLP too");
  if (a.qk_norm) parts.push_back("q/k norms");
  switch (a.positions) {
    case PositionKind::LearnedAbsolute: parts.push_back("learned absolute positions"); break;
    case PositionKind::None: parts.push_back("no position encoding"); break;
    case PositionKind::Rotary: {
      const RotaryParams& r = a.rotary;
      std::string rot = "rotary (θ " + number(r.base);
      if (r.dim > 0 && r.dim < c.d_head) rot += ", " + std::to_string(r.dim) + " of " + std::to_string(c.d_head) + " dims";
      if (r.scaling != RopeScaling::None) rot += ", " + std::string(to_string(r.scaling)) + " ×" + number(r.factor);
      if (a.local_rotary) rot += "; local layers θ " + number(a.rotary_local.base);
      parts.push_back(rot + ")");
      break;
    }
  }
  if (c.n_key_value_heads > 0 && c.n_key_value_heads < c.n_heads)
    parts.push_back("grouped-query attention (" + std::to_string(c.n_heads) + " query heads share " +
                    std::to_string(c.n_key_value_heads) + " key/value heads)");
  else
    parts.push_back(std::to_string(c.n_heads) + " heads");
  if (a.attn_scale > 0.0f) parts.push_back("scores × " + number(a.attn_scale));
  if (a.attn_softcap > 0.0f) parts.push_back("scores soft-capped at " + number(a.attn_softcap));
  // The windows: "sliding window 4096 on 13 of 26 layers".
  int sliding = 0, window = 0;
  for (int l = 0; l < c.n_layers; ++l)
    if (const int w = attention_window(c, l); w > 0) ++sliding, window = w;
  if (sliding > 0)
    parts.push_back("sliding window " + std::to_string(window) + " on " + std::to_string(sliding) + " of " +
                    std::to_string(c.n_layers) + " layers");
  if (!a.qkv_bias && a.attn_out_bias) parts.push_back("no q/k/v bias");
  if (a.qkv_bias && !a.attn_out_bias) parts.push_back("q/k/v bias");
  if (a.mlp == MlpKind::Gated)
    parts.push_back(c.activation_name == "silu" ? "SwiGLU MLP" : "gated MLP (" + c.activation_name + ")");
  else
    parts.push_back("MLP (" + c.activation_name + ")");
  if (a.parallel_blocks) parts.push_back("parallel attention and MLP");
  parts.push_back(tied_unembedding ? "tied unembedding" : "untied unembedding");
  if (a.final_softcap > 0.0f) parts.push_back("logits soft-capped at " + number(a.final_softcap));
  const std::string family = a.family ? std::string(a.family->name()) : std::string("GPT-2");
  return family + ": " + join(parts);
}

}  // namespace hs
