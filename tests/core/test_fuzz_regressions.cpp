// Inputs the fuzzers (tools/fuzz) found or rely on, kept as ordinary tests so they run in every
// build, not only in the clang fuzz build.
#include <catch2/catch.hpp>
#include <fstream>
#include <iterator>

#include "core/error.h"
#include "core/io/npz_reader.h"
#include "core/model/config.h"
#include "core/model/shard_index.h"
#include "core/model/weights.h"
#include "core/tensor/safetensors.h"
#include "test_support.h"
#define HEADSCOPE_FUZZ_SOURCE_DIR HEADSCOPE_SOURCE_DIR
#include "tools/fuzz/fuzz_common.h"

namespace fs = std::filesystem;

namespace {

std::vector<uint8_t> read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string load_outcome(const std::vector<uint8_t>& bytes) {
  try {
    const auto file = hs::SafetensorsFile::from_bytes(bytes, "seed");
    (void)hs::Weights::load(file, hs::fuzz::tiny_config());
    return "loaded";
  } catch (const hs::Error& e) {
    return e.what();
  }
}

}  // namespace

TEST_CASE("fuzz seeds: the model seeds pass every check of the loader", "[fuzz]") {
  // If the loader or the tiny config changes, regenerate with tools/fuzz/make_seeds.py: seeds
  // that fail the first check would leave the fuzzer exploring only the header parser.
  const fs::path dir = hs::test::source_dir() / "tools/fuzz/corpus/safetensors";
  for (const char* seed : {"f32_plain", "f32_prefixed_masks", "f16_lm_head", "bf16_prefixed", "f64_plain"}) {
    INFO(seed);
    CHECK(load_outcome(read_bytes(dir / seed)) == "loaded");
  }
  CHECK(load_outcome(read_bytes(dir / "ints")) != "loaded");
  CHECK(load_outcome(read_bytes(dir / "empty_header")) != "loaded");
}

TEST_CASE("fuzz finding: a layer_norm_epsilon that float32 rounds to zero is refused", "[fuzz]") {
  // tools/fuzz/fuzz_config: "layer_norm_epsilon": 1e-050 passed the double check (> 0) and became
  // 0.0f, so LayerNorm of a constant row divided by sqrt(0).
  const std::string config = R"({"model_type": "gpt2", "n_embd": 36, "n_head": 3, "n_layer": 2, "n_positions": 16,
                                  "vocab_size": 291, "layer_norm_epsilon": 1e-050})";
  CHECK_THROWS_WITH(hs::parse_config(config, "config.json"),
                    "config.json: \"layer_norm_epsilon\" must be a small positive number, found 1e-50.");
  // The smallest values float32 still holds (subnormal) remain accepted.
  const std::string tiny = R"({"model_type": "gpt2", "n_embd": 36, "n_head": 3, "n_layer": 2, "n_positions": 16,
                                "vocab_size": 291, "layer_norm_epsilon": 1e-40})";
  CHECK(hs::parse_config(tiny, "config.json").norm_eps > 0.0f);
}

TEST_CASE("fuzz_edits: an .npy of no elements reads as an empty array (it passed a null pointer to memcpy)",
          "[fuzz][npy]") {
  const std::vector<uint8_t> seed = read_bytes(hs::test::source_dir() / "tools/fuzz/corpus/edits/empty_npy");
  REQUIRE(seed.size() > 1);
  // The fuzzer's first byte chose the .npy branch; the file is the rest.
  const std::span<const uint8_t> npy(seed.data() + 1, seed.size() - 1);
  try {
    const hs::Tensor t = hs::read_npy(npy, "empty.npy");
    CHECK(t.data.empty());
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    CHECK(n == 0);
  } catch (const hs::Error& e) {
    SUCCEED(std::string("refused: ") + e.what());  // a refusal is as good as an empty array
  }
}

TEST_CASE("the shard index (fuzz_shard_index) names each shard once, and a NUL in a name is refused", "[fuzz]") {
  const std::string where = "m/model.safetensors.index.json";
  CHECK(hs::parse_shard_index(R"({"metadata": {}, "weight_map": {"b": "two.safetensors", "a": "one.safetensors",
                                   "c": "one.safetensors"}})", where) ==
        std::vector<std::string>{"one.safetensors", "two.safetensors"});
  // "\u0000" in JSON: the file system would have opened "model" (the name up to the NUL).
  CHECK_THROWS_WITH(hs::parse_shard_index(R"({"weight_map": {"a": "model\u0000.safetensors"}})", where),
                    Catch::StartsWith(where + ": names the shard \"model"));
  CHECK_THROWS_WITH(hs::parse_shard_index(R"({"weight_map": {}})", where), Catch::Contains("has no \"weight_map\""));
  CHECK_THROWS_WITH(hs::parse_shard_index("{", where), Catch::Contains("not valid JSON"));
}
