// GPT-2 hyper-parameters, read from a Hugging Face `config.json` and validated.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace hs {

enum class Activation { GeluNew, GeluErf, Relu, Silu };

struct ModelConfig {
  std::string model_type = "gpt2";
  int n_layers = 0;
  int n_heads = 0;
  int d_model = 0;    // n_embd
  int d_head = 0;     // d_model / n_heads
  int d_mlp = 0;      // n_inner, or 4 * n_embd when null or absent
  int n_ctx = 0;      // n_positions
  int d_vocab = 0;    // vocab_size
  float layer_norm_eps = 1e-5f;
  Activation activation = Activation::GeluNew;
  std::string activation_name = "gelu_new";
  bool scale_attn_weights = true;                // scores / sqrt(d_head)
  bool scale_attn_by_inverse_layer_idx = false;  // scores additionally / (layer + 1)
  std::optional<int32_t> bos_token_id;
  std::optional<int32_t> eos_token_id;

  // Number of float parameters the weights hold (tied unembedding counted once).
  int64_t parameter_count() const;
};

// Limits that keep a hostile config from asking for absurd allocations before weights are seen.
inline constexpr int64_t kMaxConfigDim = 1 << 20;

ModelConfig parse_config(std::string_view json_text, const std::string& source);
ModelConfig load_config(const std::filesystem::path& config_json);

}  // namespace hs
