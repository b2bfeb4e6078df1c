#include "core/model/config.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"

namespace hs {
namespace {

using nlohmann::json;

// nlohmann's "[json.exception.parse_error.101] parse error at ..." without the bracketed id.
std::string json_reason(const std::exception& e) {
  std::string what = e.what();
  if (what.rfind("[json.exception.", 0) == 0)
    if (const size_t close = what.find("] "); close != std::string::npos) what.erase(0, close + 2);
  if (what.size() > 300) what = what.substr(0, 300) + "...";
  return what;
}

std::string brief(const json& v) { return v.is_structured() ? std::string(v.type_name()) : v.dump(); }

int read_dim(const json& j, const char* key, const std::string& who, bool required, int fallback = 0) {
  if (!j.contains(key) || j[key].is_null()) {
    if (required) throw Error(who + ": missing \"" + key + "\"; a GPT-2 config.json gives it.");
    return fallback;
  }
  const json& v = j[key];
  if (!v.is_number_integer())
    throw Error(who + ": \"" + key + "\" must be a positive integer, found " + brief(v) + ".");
  const int64_t x = v.get<int64_t>();
  if (x <= 0 || x > kMaxConfigDim)
    throw Error(who + ": \"" + key + "\" is " + std::to_string(x) + "; expected a positive integer up to " +
                std::to_string(kMaxConfigDim) + ".");
  return static_cast<int>(x);
}

std::optional<int32_t> read_token_id(const json& j, const char* key, const std::string& who) {
  if (!j.contains(key) || j[key].is_null()) return std::nullopt;
  const json& v = j[key];
  // Some configs list several ids; the first one is the primary.
  const json& id = (v.is_array() && !v.empty()) ? v[0] : v;
  if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > kMaxConfigDim * 64)
    throw Error(who + ": \"" + key + "\" must be a non-negative token id, found " + brief(v) + ".");
  return static_cast<int32_t>(id.get<int64_t>());
}

bool read_bool(const json& j, const char* key, bool fallback, const std::string& who) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_boolean()) throw Error(who + ": \"" + key + "\" must be true or false, found " + brief(j[key]) + ".");
  return j[key].get<bool>();
}

}  // namespace

int64_t ModelConfig::parameter_count() const {
  const int64_t d = d_model, m = d_mlp;
  const int64_t per_layer = 2 * d + d * 3 * d + 3 * d + d * d + d + 2 * d + d * m + m + m * d + d;
  return static_cast<int64_t>(d_vocab) * d + static_cast<int64_t>(n_ctx) * d + n_layers * per_layer + 2 * d;
}

ModelConfig parse_config(std::string_view json_text, const std::string& source) {
  json j;
  try {
    j = json::parse(json_text.begin(), json_text.end());
  } catch (const std::exception& e) {
    throw Error(source + ": not valid JSON (" + json_reason(e) + "). Restore the model's original config.json.");
  }
  if (!j.is_object()) throw Error(source + ": expected a JSON object of settings, found " + brief(j) + ".");

  ModelConfig c;
  if (j.contains("model_type")) {
    if (!j["model_type"].is_string()) throw Error(source + ": \"model_type\" must be a string.");
    c.model_type = j["model_type"].get<std::string>();
  } else if (j.contains("architectures") && j["architectures"].is_array() && !j["architectures"].empty() &&
             j["architectures"][0].is_string()) {
    c.model_type = j["architectures"][0].get<std::string>() == "GPT2LMHeadModel" ? "gpt2" : j["architectures"][0].get<std::string>();
  }
  if (c.model_type != "gpt2")
    throw Error(source + ": model_type is \"" + c.model_type +
                "\"; HeadScope reads GPT-2-family models (model_type \"gpt2\": gpt2, distilgpt2, gpt2-medium/large/xl).");

  c.d_model = read_dim(j, "n_embd", source, true);
  c.n_heads = read_dim(j, "n_head", source, true);
  c.n_layers = read_dim(j, "n_layer", source, true);
  c.n_ctx = read_dim(j, "n_positions", source, false, 0);
  if (c.n_ctx == 0) c.n_ctx = read_dim(j, "n_ctx", source, true);
  c.d_vocab = read_dim(j, "vocab_size", source, true);
  c.d_mlp = read_dim(j, "n_inner", source, false, 0);
  if (c.d_mlp == 0) {
    if (4LL * c.d_model > kMaxConfigDim)
      throw Error(source + ": n_embd " + std::to_string(c.d_model) + " makes the MLP (4 * n_embd) too large.");
    c.d_mlp = 4 * c.d_model;
  }
  if (c.d_model % c.n_heads != 0)
    throw Error(source + ": n_embd " + std::to_string(c.d_model) + " is not divisible by n_head " +
                std::to_string(c.n_heads) + "; every head must have the same size.");
  c.d_head = c.d_model / c.n_heads;
  if (c.n_layers > 1024) throw Error(source + ": n_layer is " + std::to_string(c.n_layers) + "; at most 1024 are accepted.");

  if (j.contains("layer_norm_epsilon") && !j["layer_norm_epsilon"].is_null()) {
    const json& e = j["layer_norm_epsilon"];
    // Positive after the conversion to float32 too: 1e-50 would become 0, and LayerNorm would
    // divide a constant row by sqrt(0) (found by tools/fuzz/fuzz_config).
    if (!e.is_number() || !(e.get<double>() > 0.0) || !(e.get<double>() < 1.0) ||
        !(static_cast<float>(e.get<double>()) > 0.0f))
      throw Error(source + ": \"layer_norm_epsilon\" must be a small positive number, found " + brief(e) + ".");
    c.layer_norm_eps = static_cast<float>(e.get<double>());
  }

  if (j.contains("activation_function") && !j["activation_function"].is_null()) {
    if (!j["activation_function"].is_string()) throw Error(source + ": \"activation_function\" must be a string.");
    c.activation_name = j["activation_function"].get<std::string>();
  }
  const std::string& a = c.activation_name;
  if (a == "gelu_new" || a == "gelu_pytorch_tanh" || a == "gelu_fast") c.activation = Activation::GeluNew;
  else if (a == "gelu") c.activation = Activation::GeluErf;
  else if (a == "relu") c.activation = Activation::Relu;
  else if (a == "silu" || a == "swish") c.activation = Activation::Silu;
  else
    throw Error(source + ": activation_function \"" + a +
                "\" is not supported; expected gelu_new (GPT-2), gelu_pytorch_tanh, gelu_fast, gelu, relu or silu.");

  c.scale_attn_weights = read_bool(j, "scale_attn_weights", true, source);
  c.scale_attn_by_inverse_layer_idx = read_bool(j, "scale_attn_by_inverse_layer_idx", false, source);
  if (read_bool(j, "add_cross_attention", false, source))
    throw Error(source + ": add_cross_attention is true; HeadScope reads decoder-only GPT-2 models.");
  c.bos_token_id = read_token_id(j, "bos_token_id", source);
  c.eos_token_id = read_token_id(j, "eos_token_id", source);
  return c;
}

ModelConfig load_config(const std::filesystem::path& config_json) {
  std::error_code ec;
  if (std::filesystem::is_directory(config_json, ec))
    throw Error(config_json.string() + ": is a folder, not a file. A Hugging Face model folder holds config.json as a file "
                "beside model.safetensors.");
  if (!std::filesystem::exists(config_json, ec))
    throw Error(config_json.string() + ": not found. A Hugging Face model folder needs a config.json beside model.safetensors.");
  // A pipe would block the read and a device such as /dev/zero would never end.
  if (!std::filesystem::is_regular_file(config_json, ec))
    throw Error(config_json.string() + ": is not a regular file (a device, pipe or socket); expected a JSON file.");
  std::ifstream in(config_json, std::ios::binary);
  if (!in)
    throw Error(config_json.string() + ": cannot open (" + std::strerror(errno) + "); check that it is readable.");
  std::ostringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  if (in.bad()) throw Error(config_json.string() + ": cannot read (" + std::strerror(errno) + ").");
  if (text.empty())
    throw Error(config_json.string() + ": is empty. Restore the model's original config.json.");
  if (text.size() > 16 * 1024 * 1024) throw Error(config_json.string() + ": is larger than 16 MB; not a config.json.");
  return parse_config(text, config_json.string());
}

}  // namespace hs
