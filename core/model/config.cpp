#include "core/model/config.h"

#include <cerrno>
#include <cmath>
#include <optional>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "core/model/config_json.h"

namespace hs {
namespace {

using nlohmann::json;

std::optional<int32_t> read_token_id(const json& j, const char* key, const std::string& who) {
  if (!j.contains(key) || j[key].is_null()) return std::nullopt;
  const json& v = j[key];
  // Some configs list several ids; the first one is the primary.
  const json& id = (v.is_array() && !v.empty()) ? v[0] : v;
  if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > kMaxConfigDim * 64)
    throw Error(who + ": \"" + key + "\" must be a non-negative token id, found " + json_brief(v) + ".");
  return static_cast<int32_t>(id.get<int64_t>());
}

// "GPT-2-family models (...)", or "A, B or C" with more families.
std::string families_read() {
  const auto& all = architecture_families();
  std::string out;
  for (size_t i = 0; i < all.size(); ++i) {
    if (i > 0) out += i + 1 == all.size() ? " or " : ", ";
    out += all[i]->description();
  }
  return out;
}

}  // namespace

std::string json_brief(const json& v) { return v.is_structured() ? std::string(v.type_name()) : v.dump(); }

bool ConfigJson::has(const char* key) const { return json_.contains(key) && !json_[key].is_null(); }

void ConfigJson::refuse(const std::string& what) const { throw Error(source_ + ": " + what); }

int ConfigJson::dim(const char* key) const {
  if (!has(key)) refuse("missing \"" + std::string(key) + "\"; a " + std::string(family_name_) + " config.json gives it.");
  return dim_or(key, 0);
}

int ConfigJson::dim_or(const char* key, int fallback) const {
  if (!has(key)) return fallback;
  const json& v = json_[key];
  if (!v.is_number_integer())
    refuse("\"" + std::string(key) + "\" must be a positive integer, found " + json_brief(v) + ".");
  const int64_t x = v.get<int64_t>();
  if (x <= 0 || x > kMaxConfigDim)
    refuse("\"" + std::string(key) + "\" is " + std::to_string(x) + "; expected a positive integer up to " +
           std::to_string(kMaxConfigDim) + ".");
  return static_cast<int>(x);
}

bool ConfigJson::flag(const char* key, bool fallback) const {
  if (!has(key)) return fallback;
  if (!json_[key].is_boolean())
    refuse("\"" + std::string(key) + "\" must be true or false, found " + json_brief(json_[key]) + ".");
  return json_[key].get<bool>();
}

float ConfigJson::epsilon(const char* key, float fallback) const {
  if (!has(key)) return fallback;
  const json& e = json_[key];
  // Positive after the conversion to float32 too: 1e-50 would become 0, and a norm would divide
  // a constant row by sqrt(0) (found by tools/fuzz/fuzz_config).
  if (!e.is_number() || !(e.get<double>() > 0.0) || !(e.get<double>() < 1.0) ||
      !(static_cast<float>(e.get<double>()) > 0.0f))
    refuse("\"" + std::string(key) + "\" must be a small positive number, found " + json_brief(e) + ".");
  return static_cast<float>(e.get<double>());
}

double ConfigJson::positive_number(const char* key, double fallback) const {
  if (!has(key)) return fallback;
  const json& v = json_[key];
  if (!v.is_number() || !std::isfinite(v.get<double>()) || !(v.get<double>() > 0.0) || v.get<double>() > 1e12)
    refuse("\"" + std::string(key) + "\" must be a positive number, found " + json_brief(v) + ".");
  return v.get<double>();
}

const json* ConfigJson::value(const char* key) const { return has(key) ? &json_[key] : nullptr; }

// Hugging Face's rope_scaling object: {"rope_type" (or "type"): ..., "factor": ..., ...}.
void ConfigJson::rope_scaling(RotaryParams& r) const {
  const nlohmann::json* rs = value("rope_scaling");
  if (!rs) return;
  if (!rs->is_object()) refuse("\"rope_scaling\" must be an object or null, found " + json_brief(*rs) + ".");
  rope_object(*rs, "rope_scaling", r);
}

// One rotation's object: its type and the type's numbers (rope_scaling's keys), and in
// transformers 5's rope_parameters also rope_theta.
void ConfigJson::rope_object(const nlohmann::json& rs, const std::string& where, RotaryParams& r) const {
  const ConfigJson& j = *this;
  std::string type;
  for (const char* key : {"rope_type", "type"})
    if (rs.contains(key) && rs[key].is_string()) {
      type = rs[key].get<std::string>();
      break;
    }
  auto number = [&](const char* key, std::optional<double> fallback) {
    if (!rs.contains(key) || rs[key].is_null()) {
      if (fallback) return *fallback;
      j.refuse(where + " of type \"" + type + "\" needs \"" + key + "\".");
    }
    const nlohmann::json& v = rs[key];
    if (!v.is_number() || !std::isfinite(v.get<double>()) || !(v.get<double>() > 0.0) || v.get<double>() > 1e12)
      j.refuse(where + " \"" + std::string(key) + "\" must be a positive number, found " + json_brief(v) + ".");
    return v.get<double>();
  };
  if (rs.contains("rope_theta")) r.base = number("rope_theta", std::nullopt);
  if (rs.contains("partial_rotary_factor") && number("partial_rotary_factor", 1.0) != 1.0)
    j.refuse(where + " gives a partial_rotary_factor, which HeadScope does not read there; this family rotates "
                     "every head dimension.");
  // rope_scaling names its type (an untyped one is refused below, as before); a rope_parameters
  // object may give only rope_theta.
  if (type == "default" || (type.empty() && where != "rope_scaling")) return;
  if (type == "linear") {
    r.scaling = RopeScaling::Linear;
    r.factor = number("factor", std::nullopt);
    return;
  }
  if (type == "llama3") {
    r.scaling = RopeScaling::Llama3;
    r.factor = number("factor", std::nullopt);
    r.low_freq_factor = number("low_freq_factor", std::nullopt);
    r.high_freq_factor = number("high_freq_factor", std::nullopt);
    r.original_context = number("original_max_position_embeddings", std::nullopt);
    if (!(r.high_freq_factor > r.low_freq_factor))
      j.refuse(where + " \"high_freq_factor\" must be larger than \"low_freq_factor\".");
    return;
  }
  j.refuse(where + " type \"" + type +
           "\" is not supported; HeadScope implements \"linear\" and \"llama3\" (or none). Positions would be "
           "encoded differently from the model's own.");
}

// transformers 5 writes the rotation as rope_parameters: one object ({"rope_type", "rope_theta",
// ...}), or one per attention type ({"full_attention": {...}, "sliding_attention": {...}}: Gemma 3,
// configuration_gemma3.py's convert_rope_params_to_dict). It replaces rope_theta and rope_scaling.
void ConfigJson::rope_parameters(RotaryParams& global, RotaryParams* local) const {
  const nlohmann::json* rp = value("rope_parameters");
  if (!rp) return;
  if (!rp->is_object()) refuse("\"rope_parameters\" must be an object or null, found " + json_brief(*rp) + ".");
  const bool per_type = rp->contains("full_attention") || rp->contains("sliding_attention");
  if (!per_type) return rope_object(*rp, "rope_parameters", global);
  for (const auto& [type, params] : rp->items()) {
    if (type != "full_attention" && type != "sliding_attention")
      refuse("rope_parameters names the attention type \"" + type +
             "\"; HeadScope reads \"full_attention\" and \"sliding_attention\".");
    if (!params.is_object())
      refuse("rope_parameters \"" + type + "\" must be an object, found " + json_brief(params) + ".");
  }
  if (rp->contains("full_attention")) rope_object((*rp)["full_attention"], "rope_parameters.full_attention", global);
  if (!rp->contains("sliding_attention")) return;
  RotaryParams sliding = local ? *local : global;
  rope_object((*rp)["sliding_attention"], "rope_parameters.sliding_attention", sliding);
  if (local) {
    *local = sliding;
    return;
  }
  // A family without a local rotation reads one set for every layer.
  if (sliding.base != global.base || sliding.scaling != global.scaling || sliding.factor != global.factor)
    refuse("rope_parameters rotates sliding-window layers differently from the others, which this family's model "
           "does not do; check that config.json belongs to this model.");
}

std::pair<Activation, std::string> ConfigJson::activation(const char* key, const char* fallback) const {
  std::string a = fallback;
  if (has(key)) {
    if (!json_[key].is_string()) refuse("\"" + std::string(key) + "\" must be a string.");
    a = json_[key].get<std::string>();
  }
  if (a == "gelu_new" || a == "gelu_pytorch_tanh" || a == "gelu_fast") return {Activation::GeluNew, a};
  if (a == "gelu") return {Activation::GeluErf, a};
  if (a == "relu") return {Activation::Relu, a};
  if (a == "silu" || a == "swish") return {Activation::Silu, a};
  refuse(std::string(key) + " \"" + a +
         "\" is not supported; expected gelu_new (GPT-2), gelu_pytorch_tanh, gelu_fast, gelu, relu or silu.");
}

ModelConfig parse_config(std::string_view json_text, const std::string& source) {
  json j;
  try {
    j = json::parse(json_text.begin(), json_text.end());
  } catch (const std::exception& e) {
    throw Error(source + ": not valid JSON (" + json_error_reason(e) + "). Restore the model's original config.json.");
  }
  if (!j.is_object()) throw Error(source + ": expected a JSON object of settings, found " + json_brief(j) + ".");

  // The family: by model_type, else by the class in architectures[0], else the default.
  ModelConfig c;
  const ArchitectureFamily* family = &default_family();
  if (j.contains("model_type")) {
    if (!j["model_type"].is_string()) throw Error(source + ": \"model_type\" must be a string.");
    c.model_type = j["model_type"].get<std::string>();
    family = find_family_by_model_type(c.model_type);
  } else if (j.contains("architectures") && j["architectures"].is_array() && !j["architectures"].empty() &&
             j["architectures"][0].is_string()) {
    c.model_type = j["architectures"][0].get<std::string>();
    family = find_family_by_class(c.model_type);
  }
  if (!family)
    throw Error(source + ": model_type is \"" + c.model_type + "\"; HeadScope reads " + families_read() + ".");
  if (c.model_type.empty() || !family->reads_model_type(c.model_type)) c.model_type = family->model_type();
  c.architecture.family = family;

  family->read_config(ConfigJson(j, source, family->name()), c);
  if (c.n_key_value_heads <= 0 || c.n_heads % c.n_key_value_heads != 0)
    throw Error(source + ": " + std::to_string(c.n_heads) + " heads cannot share " +
                std::to_string(c.n_key_value_heads) + " key/value heads evenly.");
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
