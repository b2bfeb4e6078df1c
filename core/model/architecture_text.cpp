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
  parts.push_back(std::string(to_string(a.norm)) + (a.norm_bias ? "" : " without bias"));
  switch (a.positions) {
    case PositionKind::LearnedAbsolute: parts.push_back("learned absolute positions"); break;
    case PositionKind::None: parts.push_back("no position encoding"); break;
    case PositionKind::Rotary: {
      const RotaryParams& r = a.rotary;
      std::string rot = "rotary (θ " + number(r.base);
      if (r.dim > 0 && r.dim < c.d_head) rot += ", " + std::to_string(r.dim) + " of " + std::to_string(c.d_head) + " dims";
      if (r.scaling != RopeScaling::None) rot += ", " + std::string(to_string(r.scaling)) + " ×" + number(r.factor);
      parts.push_back(rot + ")");
      break;
    }
  }
  if (c.n_key_value_heads > 0 && c.n_key_value_heads < c.n_heads)
    parts.push_back("grouped-query attention (" + std::to_string(c.n_heads) + " query heads share " +
                    std::to_string(c.n_key_value_heads) + " key/value heads)");
  else
    parts.push_back(std::to_string(c.n_heads) + " heads");
  if (!a.qkv_bias && a.attn_out_bias) parts.push_back("no q/k/v bias");
  if (a.qkv_bias && !a.attn_out_bias) parts.push_back("q/k/v bias");
  if (a.mlp == MlpKind::Gated)
    parts.push_back(c.activation_name == "silu" ? "SwiGLU MLP" : "gated MLP (" + c.activation_name + ")");
  else
    parts.push_back("MLP (" + c.activation_name + ")");
  if (a.parallel_blocks) parts.push_back("parallel attention and MLP");
  parts.push_back(tied_unembedding ? "tied unembedding" : "untied unembedding");
  const std::string family = a.family ? std::string(a.family->name()) : std::string("GPT-2");
  return family + ": " + join(parts);
}

}  // namespace hs
