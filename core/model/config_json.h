// config.json as a family's entry reads it (ArchitectureFamily::read_config): typed reads that
// refuse a bad value with a message naming the file and the key.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>

#include "core/model/architecture.h"

namespace hs {

class ConfigJson {
 public:
  ConfigJson(const nlohmann::json& json, std::string source, std::string_view family_name)
      : json_(json), source_(std::move(source)), family_name_(family_name) {}

  const std::string& source() const { return source_; }
  // Present and not null.
  bool has(const char* key) const;
  // Present, null or not (a null soft-cap means none, where an absent one means the default).
  bool present(const char* key) const { return json_.contains(key); }
  // A positive integer up to kMaxConfigDim; refused when absent or null.
  int dim(const char* key) const;
  // The same, or `fallback` when absent or null.
  int dim_or(const char* key, int fallback) const;
  bool flag(const char* key, bool fallback) const;
  // A small positive number that stays positive as a float (a norm's epsilon).
  float epsilon(const char* key, float fallback) const;
  // A finite number greater than zero, or `fallback` when absent or null.
  double positive_number(const char* key, double fallback) const;
  // The value of `key` (nullptr when absent or null), for options nested in objects.
  const nlohmann::json* value(const char* key) const;
  // Hugging Face's rope_scaling object (absent or null: none) into r's scaling: "linear" (factor)
  // or "llama3" (factor, low_freq_factor, high_freq_factor, original_max_position_embeddings);
  // any other type is refused by name.
  void rope_scaling(RotaryParams& r) const;
  // transformers 5's rope_parameters (absent or null: none), read after rope_theta and
  // rope_scaling, which it replaces: one object for every layer, or one per attention type
  // (full_attention into `global`, sliding_attention into `local`; a family without a local
  // rotation passes nullptr and a different sliding rotation is refused).
  void rope_parameters(RotaryParams& global, RotaryParams* local) const;
  // An activation function by its Hugging Face name, and that name.
  std::pair<Activation, std::string> activation(const char* key, const char* fallback) const;
  // Throws hs::Error "<source>: <what>".
  [[noreturn]] void refuse(const std::string& what) const;

 private:
  void rope_object(const nlohmann::json& object, const std::string& where, RotaryParams& r) const;
  const nlohmann::json& json_;
  std::string source_;
  std::string_view family_name_;
};

// nlohmann's value as a message shows it: the text of a scalar, the type of an object or array.
std::string json_brief(const nlohmann::json& v);

}  // namespace hs
