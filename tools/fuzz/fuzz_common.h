// Shared pieces of the libFuzzer targets: the fixed tiny config the loader target checks
// weights against, and where the repository's fixtures are.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

#include "core/model/config.h"

namespace hs::fuzz {

// The config every fuzzed safetensors file is loaded against. The seeds in
// corpus/safetensors/ (written by make_seeds.py) hold weights of exactly these sizes, so the
// fuzzer starts from files that pass every check and mutates from there.
inline constexpr std::string_view kTinyConfigJson =
    R"({"model_type": "gpt2", "n_embd": 4, "n_head": 2, "n_layer": 1, "n_positions": 4,
        "vocab_size": 8, "n_inner": 8, "activation_function": "gelu_new"})";

inline const ModelConfig& tiny_config() {
  static const ModelConfig c = parse_config(kTinyConfigJson, "fuzz config");
  return c;
}

// The repository root: $HEADSCOPE_SOURCE_DIR when set, else the one compiled in.
inline std::filesystem::path source_dir() {
  if (const char* env = std::getenv("HEADSCOPE_SOURCE_DIR"); env && *env) return env;
  return HEADSCOPE_FUZZ_SOURCE_DIR;
}

// A small real model folder for the targets that need one.
inline std::filesystem::path fixture_model(const std::string& name) {
  return source_dir() / "tests/fixtures/models" / name;
}

}  // namespace hs::fuzz
