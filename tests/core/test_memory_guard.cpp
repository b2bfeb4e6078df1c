// The memory guard: its estimates against what runs really store, its reading of the system's
// available memory, and its refusals (with the available figure injected, never the machine's).
#include <catch2/catch.hpp>
#include <algorithm>
#include <cstdlib>
#include <vector>

#include "core/error.h"
#include "core/model/memory_guard.h"
#include "core/model/model.h"
#include "core/session/session.h"
#include "core/tensor/safetensors.h"
#include "test_support.h"

namespace {

// Sets the available-memory figure for one test and restores the system's afterwards.
struct AvailableMemory {
  explicit AvailableMemory(uint64_t bytes) { hs::set_available_memory_override(bytes); }
  ~AvailableMemory() { hs::set_available_memory_override(std::nullopt); }
};

const char* kGpt2XlConfig = R"({"model_type": "gpt2", "n_embd": 1600, "n_head": 25, "n_layer": 48,
                               "n_positions": 1024, "vocab_size": 50257, "n_inner": null})";

}  // namespace

TEST_CASE("memory guard: sizes read as people write them", "[memory]") {
  CHECK(hs::format_bytes(0) == "0 KB");
  CHECK(hs::format_bytes(999) == "1 KB");
  CHECK(hs::format_bytes(148'000) == "148 KB");
  CHECK(hs::format_bytes(12'345'678) == "12 MB");
  CHECK(hs::format_bytes(999'999'999) == "1000 MB");
  CHECK(hs::format_bytes(9'100'000'000) == "9.1 GB");
}

TEST_CASE("memory guard: the cache estimate covers what a run stores", "[memory]") {
  for (const char* fixture : {"f32_prefixed", "f16_plain", "bf16_prefixed", "full_context"}) {
    const auto model = hs::Model::load(hs::test::fixture_model(fixture));
    const hs::ModelConfig& c = model->config();
    for (int n : {1, 2, 7, c.n_ctx}) {
      for (int variant = 0; variant < 4; ++variant) {
        hs::RunOptions o;
        o.store_scores = variant & 1;
        o.store_results = variant & 2;
        const auto cache = model->run(std::vector<int32_t>(static_cast<size_t>(n), 1), o);
        const uint64_t estimate = hs::estimate_cache_bytes(c, n, o);
        INFO(fixture << " at " << n << " tokens, options " << variant << ": stored " << cache->stored_bytes()
                     << ", estimate " << estimate);
        // At least what is stored; at most twice it (the rest is the transient buffers).
        CHECK(estimate >= cache->stored_bytes());
        CHECK(estimate <= 2 * cache->stored_bytes());
      }
      hs::RunOptions logits_only;
      logits_only.logits_only = true;
      const auto cache = model->run(std::vector<int32_t>(static_cast<size_t>(n), 1), logits_only);
      CHECK(hs::estimate_cache_bytes(c, n, logits_only) >= cache->stored_bytes());
      CHECK(hs::estimate_cache_bytes(c, n, logits_only) < hs::estimate_cache_bytes(c, n, {}));
    }
  }
}

TEST_CASE("memory guard: loading counts the packed copies and the weights converted to float32", "[memory]") {
  // The forward pass's packed copy of every matrix (Weights::packed): per layer c_attn, c_proj,
  // c_fc and the MLP's c_proj, and the unembedding.
  auto packed_elements = [](const hs::ModelConfig& c) {
    const uint64_t D = static_cast<uint64_t>(c.d_model), M = static_cast<uint64_t>(c.d_mlp);
    return static_cast<uint64_t>(c.n_layers) * (D * 3 * D + D * D + D * M + M * D) + static_cast<uint64_t>(c.d_vocab) * D;
  };
  // F32 weights are used in place from the memory map: only the packed copies are new memory.
  const auto f32 = hs::SafetensorsFile::open(hs::test::fixture_model("f32_prefixed") / "model.safetensors");
  const auto f32_model = hs::Model::load(hs::test::fixture_model("f32_prefixed"));
  CHECK(f32_model->weights()->owned_bytes() == 0);
  CHECK(hs::estimate_load_bytes(*f32, f32_model->config()) == 4 * packed_elements(f32_model->config()));
  // The packed copies hold at least the matrices' bytes (their last panel is padded).
  CHECK(f32_model->weights()->packed_bytes() >= hs::estimate_load_bytes(*f32, f32_model->config()));
  // F16 and BF16 matrices are packed from the file in 16 bits, never converted: 2 bytes per
  // element. What is not packed (vectors, wpe, an untied embedding) becomes float32 copies of 4
  // bytes per element (mask buffers are ignored), and stays converted.
  for (const char* fixture : {"f16_plain", "bf16_prefixed"}) {
    const auto f = hs::SafetensorsFile::open(hs::test::fixture_model(fixture) / "model.safetensors");
    uint64_t elements = 0;
    for (const auto& t : f->tensors())
      if (t.name.find(".attn.bias") == std::string::npos && t.name.find(".attn.masked_bias") == std::string::npos)
        elements += static_cast<uint64_t>(t.numel());
    const auto model = hs::Model::load(hs::test::fixture_model(fixture));
    const hs::ModelConfig& c = model->config();
    CHECK(model->weights()->owned_bytes() == 4 * (elements - packed_elements(c)));
    CHECK(hs::estimate_load_bytes(*f, c) == 4 * (elements - packed_elements(c)) + 2 * packed_elements(c));
    // The packed copies are 16-bit: at least the matrices' bytes, and less than float32 panels.
    CHECK(model->weights()->packed_bytes() >= 2 * packed_elements(c));
    CHECK(model->weights()->packed_bytes() < 4 * packed_elements(c));
  }
}

TEST_CASE("memory guard: a 16-bit model's matrices are kept once, and read in place on demand", "[memory]") {
  for (const char* fixture : {"f16_plain", "bf16_prefixed"}) {
    const auto f = hs::SafetensorsFile::open(hs::test::fixture_model(fixture) / "model.safetensors");
    const auto model = hs::Model::load(hs::test::fixture_model(fixture));
    const auto& w = *model->weights();
    const hs::ModelConfig& c = model->config();
    const size_t before = w.owned_bytes();
    // A view reading W_O in place gets the file's values, rebuilt from the packed copy...
    const auto find = [&](const std::string& name) {
      const hs::TensorInfo* t = f->find(name);
      return t ? t : f->find("transformer." + name);
    };
    const std::vector<float> proj = f->to_f32(*find("h.1.attn.c_proj.weight"));
    const float* rows = w.W_O_all(1).data();
    CHECK(std::equal(proj.begin(), proj.end(), rows));
    CHECK(w.W_O(1, 0)(0, 0) == proj[0]);
    // ...which then costs its bytes, once, and only for that matrix.
    CHECK(w.owned_bytes() == before + proj.size() * sizeof(float));
    CHECK(w.W_O_all(1).data() == rows);
    CHECK(w.owned_bytes() == before + proj.size() * sizeof(float));
    // The unembedding's rows (lm_head, or the embedding when tied) read back the same way, one
    // row without the rest.
    const hs::TensorInfo* lm_head = f->find("lm_head.weight");
    CHECK(w.tied_unembedding() == (lm_head == nullptr));
    const std::vector<float> unembed = f->to_f32(lm_head ? *lm_head : *find("wte.weight"));
    std::vector<float> row(static_cast<size_t>(c.d_model));
    w.unembed_row(3, row.data());
    CHECK(std::equal(row.begin(), row.end(), unembed.begin() + 3 * c.d_model));
    CHECK(w.owned_bytes() == before + proj.size() * sizeof(float));
    CHECK(std::equal(unembed.begin(), unembed.end(), w.unembed_rows()));
    // So does the embedding (kept converted when lm_head is separate).
    const std::vector<float> wte = f->to_f32(*find("wte.weight"));
    CHECK(std::equal(wte.begin(), wte.end(), w.W_E()));
  }
}

TEST_CASE("memory guard: refuses a load that does not fit, with numbers and advice", "[memory]") {
  const auto dir = hs::test::fixture_model("f16_plain");
  {
    AvailableMemory limit(80'000);
    try {
      (void)hs::Model::load(dir);
      FAIL("loaded with 80 KB available");
    } catch (const hs::Error& e) {
      CHECK(std::string(e.what()) ==
            "loading f16_plain needs about 92 KB for its weights laid out for the forward pass but only 80 KB is "
            "available; close other programs, or choose a smaller model.");
    }
  }
  {
    // 16-bit matrices are packed in 16 bits: the F16 model fits where its F32 twin (136 KB) does not.
    AvailableMemory limit(100'000);
    CHECK_NOTHROW(hs::Model::load(dir));
    CHECK_THROWS_AS(hs::Model::load(hs::test::fixture_model("f32_prefixed")), hs::Error);
  }
  AvailableMemory plenty(1'000'000'000);
  CHECK_NOTHROW(hs::Model::load(dir));
}

TEST_CASE("memory guard: refuses a run that does not fit, before running", "[memory]") {
  const auto model = hs::Model::load(hs::test::fixture_model("f32_prefixed"));
  const std::vector<int32_t> tokens = model->encode("The cat sat on the mat.", true);
  const uint64_t needed = hs::estimate_cache_bytes(model->config(), static_cast<int64_t>(tokens.size()), {});
  {
    AvailableMemory limit(needed - 1);
    const std::string message = "running " + std::to_string(tokens.size()) + " tokens through f32_prefixed needs about " +
                                hs::format_bytes(needed) + " for the activation cache but only " +
                                hs::format_bytes(needed - 1) + " is available; use fewer tokens or close other programs.";
    CHECK_THROWS_WITH(hs::run_text(model, "The cat sat on the mat."), message);
    CHECK_THROWS_WITH(hs::run_tokens(model, tokens), message);
    // Too long is still refused as too long: the context limit comes first.
    std::vector<int32_t> too_many(static_cast<size_t>(model->config().n_ctx) + 1, 1);
    CHECK_THROWS_WITH(hs::run_tokens(model, too_many), Catch::Contains("context"));
  }
  AvailableMemory exactly(needed);
  CHECK_NOTHROW(hs::run_tokens(model, tokens));
}

TEST_CASE("memory guard: GPT-2 XL at its full context", "[memory]") {
  const hs::ModelConfig xl = hs::parse_config(kGpt2XlConfig, "gpt2-xl/config.json");
  AvailableMemory limit(3'200'000'000);
  CHECK_THROWS_WITH(hs::check_run_memory(xl, 1024, {}, "gpt2-xl"),
                    "running 1024 tokens through gpt2-xl needs about 5.2 GB for the activation cache but only 3.2 GB is "
                    "available; use fewer tokens or close other programs.");
  CHECK_NOTHROW(hs::check_run_memory(xl, 64, {}, "gpt2-xl"));
}

TEST_CASE("memory guard: reads the system's figure, or the environment's", "[memory]") {
  hs::set_available_memory_override(std::nullopt);
  ::unsetenv("HEADSCOPE_AVAILABLE_MEMORY");
  const auto system = hs::available_memory();
  REQUIRE(system.has_value());  // /proc/meminfo has MemAvailable on every Linux since 3.14
  CHECK(*system > 0);
  ::setenv("HEADSCOPE_AVAILABLE_MEMORY", "3.2G", 1);
  CHECK(hs::available_memory() == uint64_t{3'200'000'000});
  ::setenv("HEADSCOPE_AVAILABLE_MEMORY", "100K", 1);
  CHECK(hs::available_memory() == uint64_t{100'000});
  ::setenv("HEADSCOPE_AVAILABLE_MEMORY", "12345", 1);
  CHECK(hs::available_memory() == uint64_t{12'345});
  ::setenv("HEADSCOPE_AVAILABLE_MEMORY", "lots", 1);  // not a figure: ignored
  CHECK(hs::available_memory().has_value());
  CHECK(hs::available_memory() != uint64_t{0});
  ::unsetenv("HEADSCOPE_AVAILABLE_MEMORY");
}

TEST_CASE("memory guard: absurd configs saturate instead of wrapping around", "[memory]") {
  // parse_config accepts every size up to 2^20 and 1024 layers; 64-bit products of those wrap.
  const hs::ModelConfig huge = hs::parse_config(
      R"({"model_type": "gpt2", "n_embd": 1048576, "n_head": 1048576, "n_layer": 1024, "n_positions": 1048576,
          "vocab_size": 1048576, "n_inner": 1048576})",
      "config.json");
  CHECK(hs::estimate_cache_bytes(huge, 1 << 20, {}) == std::numeric_limits<uint64_t>::max());
  AvailableMemory limit(uint64_t{1} << 40);
  CHECK_THROWS_WITH(hs::check_run_memory(huge, 1 << 20, {}, "huge"), Catch::Contains("but only 1099.5 GB is available"));
}

TEST_CASE("memory guard: 16-bit q, k and v are joined from the file without a float32 copy", "[memory]") {
  // Llama's separate q/k/v (F16; BF16 with biases and head_dim) and GPT-NeoX's per-head fused
  // matrix (F16) are packed as one 16-bit W_qkv straight from the file's rows. The per-head views
  // rebuilt from it hold the file's values, at the places the joined layout puts them.
  struct Fixture {
    const char* name;
    const char* prefix;  // the file's names of layer 0
  };
  for (const Fixture& fx : {Fixture{"llama_gqa", "model.layers.0."}, Fixture{"llama_tied_headdim", "layers.0."},
                            Fixture{"neox_parallel", "gpt_neox.layers.0."}}) {
    INFO(fx.name);
    const auto f = hs::SafetensorsFile::open(hs::test::fixture_model(fx.name) / "model.safetensors");
    const auto model = hs::Model::load(hs::test::fixture_model(fx.name));
    const auto& w = *model->weights();
    const hs::ModelConfig& c = model->config();
    CHECK(w.packed(0).W_qkv.type() != hs::PanelType::F32);
    CHECK(w.packed_unembed().type() != hs::PanelType::F32);
    const int D = c.d_model, dh = c.d_head, H = c.n_heads;
    // The file's value of part (0 q, 1 k, 2 v) for head h's output i and input d.
    auto file_value = [&](int part, int h, int i, int d) -> float {
      if (const hs::TensorInfo* fused = f->find(std::string(fx.prefix) + "attention.query_key_value.weight")) {
        const std::vector<float> rows = f->to_f32(*fused);  // head h's rows: q_h, k_h, v_h
        return rows[static_cast<size_t>((h * 3 * dh + part * dh + i) * D + d)];
      }
      const char* names[3] = {"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"};
      const std::vector<float> rows = f->to_f32(*f->find(std::string(fx.prefix) + names[part]));
      return rows[static_cast<size_t>((h * dh + i) * D + d)];
    };
    for (int d : {0, D - 1})
      for (int i : {0, dh - 1}) {
        CHECK(w.W_Q(0, H - 1)(d, i) == file_value(0, H - 1, i, d));
        CHECK(w.W_K(0, c.n_key_value_heads - 1)(d, i) == file_value(1, c.n_key_value_heads - 1, i, d));
        CHECK(w.W_V(0, 0)(d, i) == file_value(2, 0, i, d));
      }
  }
}
