// The forward pass against the independent float64 PyTorch reference (tests/fixtures), against
// the in-project slow reference, and against the identities the views display.
#include <catch2/catch.hpp>

#include <omp.h>

#include <nlohmann/json.hpp>
#include <fstream>
#include <functional>
#include <regex>

#include "core/analysis/concat_sum.h"
#include "core/analysis/dla.h"
#include "core/analysis/residual.h"
#include "core/analysis/top_k.h"
#include "core/model/architecture_text.h"
#include "core/model/forward.h"
#include "core/model/memory_guard.h"
#include "core/model/model.h"
#include "core/session/session.h"
#include "core/tensor/safetensors.h"
#include "forward_reference.h"
#include "test_support.h"

using namespace hs;
namespace fs = std::filesystem;

namespace {

// Tolerance: 1e-4 relative to each key's largest reference magnitude (see tests/fixtures/README.md).
constexpr double kRelTol = 1e-4;

std::vector<int32_t> reference_tokens(const SafetensorsFile& ref) {
  std::vector<int32_t> ids;
  for (float f : ref.to_f32(*ref.find("tokens"))) ids.push_back(static_cast<int32_t>(f));
  return ids;
}

}  // namespace

TEST_CASE("every cache key matches the float64 PyTorch reference", "[forward][fixtures]") {
  const char* names[] = {"f32_prefixed", "f16_plain", "bf16_prefixed", "full_context"};
  for (const char* name : names) {
    DYNAMIC_SECTION(name) {
      const auto dir = test::fixture_model(name);
      const auto model = Model::load(dir);
      const auto ref = SafetensorsFile::open(dir / "reference.safetensors");
      const std::vector<int32_t> tokens = reference_tokens(*ref);
      const auto cache = model->run(tokens);
      int compared = 0;
      for (const std::string& key : cache->keys()) {
        const TensorInfo* t = ref->find(key);
        INFO(name << " " << key);
        REQUIRE(t != nullptr);
        const Tensor ours = cache->get(key);
        CHECK(ours.shape == t->shape);
        const test::Comparison c = test::compare(ref->to_f32(*t), ours.data);
        INFO("max |diff| " << c.max_abs << ", relative " << c.relative);
        CHECK(c.masks_agree);
        CHECK(c.relative <= kRelTol);
        ++compared;
      }
      CHECK(compared == static_cast<int>(cache->keys().size()));
      if (std::string(name) == "full_context") CHECK(cache->n_pos() == model->config().n_ctx);
    }
  }
}

TEST_CASE("the fast forward pass equals the slow reference loops", "[forward]") {
  const auto model = Model::load(test::fixture_model("bf16_prefixed"));
  const std::vector<int32_t> tokens = {290, 5, 77, 260, 13, 99, 281, 0, 1, 2};
  const auto fast = model->run(tokens);
  const auto slow = test::forward_reference(model->weights(), tokens);
  for (const std::string& key : fast->keys()) {
    INFO(key);
    const test::Comparison c = test::compare(slow->get(key).data, fast->get(key).data);
    CHECK(c.masks_agree);
    CHECK(c.relative <= 1e-5);
  }
}

TEST_CASE("stored and derived hook_result / hook_attn_scores are identical", "[forward][cache]") {
  const auto model = Model::load(test::fixture_model("f32_prefixed"));
  const std::vector<int32_t> tokens = {290, 51, 257, 273, 270, 267};
  RunOptions stored;
  stored.store_results = true;
  stored.store_scores = true;
  const auto a = model->run(tokens);
  const auto b = model->run(tokens, stored);
  for (int l = 0; l < model->config().n_layers; ++l)
    for (const char* k : {"attn.hook_result", "attn.hook_attn_scores"}) {
      const std::string key = "blocks." + std::to_string(l) + "." + k;
      INFO(key);
      CHECK(a->get(key).data == b->get(key).data);
    }
}

TEST_CASE("attention patterns are causal distributions", "[forward][identities]") {
  const auto model = Model::load(test::fixture_model("full_context"));
  std::vector<int32_t> tokens(16);
  for (int i = 0; i < 16; ++i) tokens[static_cast<size_t>(i)] = (i * 37 + 5) % 291;
  const auto cache = model->run(tokens);
  for (int l = 0; l < cache->n_layer(); ++l)
    for (int h = 0; h < model->config().n_heads; ++h) {
      const auto p = cache->head_pattern(l, h);
      for (int q = 0; q < cache->n_pos(); ++q) {
        CHECK(p.row(q).sum() == Approx(1.0).margin(1e-5));
        for (int k = 0; k < cache->n_pos(); ++k) {
          if (k > q) CHECK(p(q, k) == 0.0f);
          else CHECK(p(q, k) >= 0.0f);
        }
      }
      const RowMatrixXf s = cache->head_scores(l, h);
      CHECK(std::isinf(s(0, 1)));
      CHECK(s(0, 1) < 0);
    }
}

TEST_CASE("concatenate-then-project equals project-then-sum", "[forward][identities]") {
  const auto model = Model::load(test::fixture_model("f16_plain"));
  const std::vector<int32_t> tokens = {54, 257, 264, 220, 266, 258, 220, 257, 77, 30, 288};
  const auto cache = model->run(tokens);
  for (int l = 0; l < cache->n_layer(); ++l) {
    const ConcatVsSum cs = concat_vs_sum(*cache, l);
    const float scale = cs.via_concat.cwiseAbs().maxCoeff();
    INFO("layer " << l << " max |concat - sum| " << cs.max_abs_diff);
    CHECK(cs.max_abs_diff <= 1e-6f * scale + 1e-7f);
    CHECK(cs.max_abs_vs_cache == 0.0f);  // the view's concat path is the forward pass's
    CHECK(static_cast<int>(cs.head_results.size()) == model->config().n_heads);
    CHECK(cs.z_concat.cols() == model->config().n_heads * model->config().d_head);
    CHECK(cs.W_O.rows() == cs.z_concat.cols());
  }
}

TEST_CASE("the residual stream is the sum of its parts", "[analysis][identities]") {
  for (const char* name : {"f32_prefixed", "bf16_prefixed"}) {
    const auto model = Model::load(test::fixture_model(name));
    const std::vector<int32_t> tokens = {290, 51, 257, 273, 270, 267, 270, 220};
    const auto cache = model->run(tokens);
    const ModelConfig& c = model->config();
    for (int pos = 0; pos < cache->n_pos(); ++pos) {
      const ResidualDecomposition d = decompose_residual(*cache, pos);
      REQUIRE(d.labels.size() == static_cast<size_t>(2 + c.n_layers * (c.n_heads + 2)));
      CHECK(d.labels[0] == "embed");
      CHECK(d.labels[2] == "L0H0");
      const float scale = d.residual.cwiseAbs().maxCoeff();
      INFO(name << " pos " << pos << " error " << d.max_abs_error);
      CHECK(d.max_abs_error <= 1e-5f * scale);
      // Head parts equal the cache's hook_result rows.
      const Tensor result = cache->get("blocks.1.attn.hook_result");
      for (int h = 0; h < c.n_heads; ++h)
        for (int i = 0; i < c.d_model; ++i)
          CHECK(d.components(2 + (c.n_heads + 2) + h, i) ==
                Approx(result.data[static_cast<size_t>((pos * c.n_heads + h) * c.d_model + i)]).margin(1e-5));
      // Write norms are the norms of those parts.
      const RowMatrixXf norms = head_write_norms(*cache, pos);
      CHECK(norms(0, 1) == Approx(d.norms[3]).epsilon(1e-5));
    }
  }
}

TEST_CASE("direct logit attribution adds up to the logit", "[analysis][identities]") {
  const auto model = Model::load(test::fixture_model("f16_plain"));
  const std::vector<int32_t> tokens = {54, 257, 264, 220, 266, 258, 220};
  const auto cache = model->run(tokens);
  for (int pos = 0; pos < cache->n_pos(); ++pos) {
    const auto top = top_predictions(*cache, pos, 3);
    REQUIRE(top.size() == 3);
    CHECK(top[0].probability >= top[1].probability);
    const ResidualDecomposition d = decompose_residual(*cache, pos);
    for (const auto& p : top) {
      const LogitAttribution a = direct_logit_attribution(*cache, d, p.id);
      INFO("pos " << pos << " target " << p.id << " error " << a.max_abs_error);
      CHECK(a.logit == p.logit);
      CHECK(a.max_abs_error <= 1e-4f * std::max(1.0f, std::abs(a.logit)));
      // The grid's entries are the heads' entries of the full list.
      CHECK(a.per_head(0, 0) == a.per_component[2]);
    }
  }
}

TEST_CASE("a logits-only run gives the same logits", "[forward]") {
  const auto model = Model::load(test::fixture_model("f32_prefixed"));
  const std::vector<int32_t> tokens = {290, 51, 257, 273};
  RunOptions o;
  o.logits_only = true;
  const auto full = model->run(tokens);
  const auto lean = model->run(tokens, o);
  CHECK(full->logits == lean->logits);
  CHECK(lean->n_layer() == 0);
  CHECK_THROWS_WITH(lean->get("blocks.0.hook_resid_pre"), Catch::Contains("only the logits"));
}

TEST_CASE("an incremental run equals a full run", "[forward][incremental]") {
  // Typing at the end of the prompt: the new run reuses the previous run's prefix.
  const auto model = Model::load(test::fixture_model("full_context"));
  std::vector<int32_t> first = {290, 46, 69, 258, 280, 272, 11};
  std::vector<int32_t> longer = first;
  for (int32_t t : {220, 257, 220, 266, 258}) longer.push_back(t);
  std::vector<int32_t> edited = longer;
  edited[4] = 12;  // an edit in the middle: only positions before it are reused
  RunOptions stored;
  stored.store_scores = true;
  stored.store_results = true;
  for (const RunOptions& o : {RunOptions{}, stored}) {
    const auto base = model->run(first, o);
    for (const std::vector<int32_t>* next : {&longer, &edited, &first}) {
      const auto full = model->run(*next, o);
      const auto incremental = model->run(*next, o, base);
      size_t common = 0;
      while (common < first.size() && common < next->size() && first[common] == (*next)[common]) ++common;
      CHECK(incremental->reused_prefix == static_cast<int>(std::min(common, next->size() - 1)));
      CHECK(full->reused_prefix == 0);
      CHECK(incremental->logits_finite == incremental->logits.all_finite());
      for (const std::string& key : full->keys()) {
        INFO(key << " after reusing " << incremental->reused_prefix);
        const test::Comparison c = test::compare(full->get(key).data, incremental->get(key).data);
        CHECK(c.masks_agree);
        CHECK(c.relative <= 1e-5);  // float rounding only: the products see different row counts
      }
      for (int l = 0; l < full->n_layer(); ++l) {
        const ConcatVsSum cs = concat_vs_sum(*incremental, l);
        CHECK(cs.max_abs_vs_cache == 0.0f);  // the prefix's attn_out and the new rows' are the kernel's
        CHECK(cs.max_abs_diff < 1e-5f);
      }
    }
  }
}

TEST_CASE("Hugging Face's tiny-random-gpt2 folder loads and runs", "[forward][shared]") {
  const auto dir = test::shared_dir() / "models/tiny-random-gpt2";
  if (!std::filesystem::exists(dir / "model.safetensors")) {
    WARN("skipped: " << dir << " is absent (optional real-world data)");
    return;
  }
  const auto model = Model::load(dir);
  CHECK(model->config().n_layers == 5);
  CHECK(model->config().d_mlp == 128);  // n_inner null: 4 * n_embd, not intermediate_size
  CHECK(model->bos_id() == 0);          // the tokenizer's bos_token, as Hugging Face prepends it
  const auto ids = model->encode("Hello world, it's me", true);
  CHECK(ids == std::vector<int32_t>{0, 40, 416, 79, 206, 750, 12, 322, 7, 83, 701});
  const auto cache = model->run(ids);
  CHECK(cache->logits.all_finite());
  for (int l = 0; l < cache->n_layer(); ++l) CHECK(concat_vs_sum(*cache, l).max_abs_diff < 1e-5f);
}

TEST_CASE("typing past the context limit reuses the truncated run instead of recomputing it", "[forward][incremental]") {
  // The GUI truncates an over-long text to the context; characters typed after the cut change
  // nothing that is run, so the previous cache is shown again (recomputing its last position
  // copied the whole cache: 2 s per key for GPT-2 small at 1024 tokens).
  const auto model = Model::load(test::fixture_model("full_context"));  // context: 16 tokens
  TextRunOptions o;
  o.overlong = OverlongPolicy::TruncateWithWarning;
  std::string text = "the cat sat on the mat and the dog sat on the log and then";
  const TextRun first = run_text(model, text, o);
  REQUIRE(first.dropped_tokens > 0);
  REQUIRE(first.cache->n_pos() == 16);
  o.previous = first.cache;
  const TextRun typed = run_text(model, text + " they slept", o);
  CHECK(typed.cache == first.cache);
  CHECK(typed.dropped_tokens > first.dropped_tokens);
  REQUIRE_FALSE(typed.warnings.empty());
  CHECK_THAT(typed.warnings.front(), Catch::Contains("left out of this run"));
  // A change inside the kept tokens still runs, and equals a fresh run.
  const TextRun edited = run_text(model, "a" + text, o);
  CHECK(edited.cache != first.cache);
  o.previous = nullptr;
  const TextRun fresh = run_text(model, "a" + text, o);
  CHECK(test::compare(fresh.cache->get("logits").data, edited.cache->get("logits").data).relative <= 1e-5);
  // Asking for more than the earlier run stored runs again.
  o.previous = first.cache;
  o.run.store_scores = true;
  const TextRun with_scores = run_text(model, text, o);
  CHECK(with_scores.cache != first.cache);
  CHECK_FALSE(with_scores.cache->layer(0).scores_hqk.empty());
}

TEST_CASE("forward: the automatic thread count follows the work and the weights' size", "[forward]") {
  auto config = [](int n_layer, int d_model, int d_vocab) {
    ModelConfig c;
    c.n_layers = n_layer;
    c.n_heads = 8;
    c.n_key_value_heads = 8;
    c.d_model = d_model;
    c.d_head = d_model / 8;
    c.d_mlp = 4 * d_model;
    c.n_ctx = 1024;
    c.d_vocab = d_vocab;
    return c;
  };
  const int all = omp_get_num_procs();
  const ModelConfig builtin = config(4, 256, 4096);     // 4.2M parameters: 17 MB, cached
  const ModelConfig gpt2_small = config(12, 768, 50257);  // 124M parameters: 500 MB, streamed
  CHECK(builtin.parameter_count() * 4 < 64 * (1 << 20));
  CHECK(gpt2_small.parameter_count() * 4 > 64 * (1 << 20));
  // A typed key on the built-in model: one thread (forking costs more than it saves).
  CHECK(auto_threads(builtin, 1) == 1);
  CHECK(auto_threads(builtin, 27) == 1);
  // Enough arithmetic, or weights streamed from memory even for one token: every core.
  CHECK(auto_threads(builtin, 200) == all);
  CHECK(auto_threads(gpt2_small, 1) == all);
  CHECK(auto_threads(gpt2_small, 20) == all);
}

// The rotary fixtures, Llama's family: rotary positions (llama3 and linear scaling), RMSNorm, grouped and
// multi-query attention, SwiGLU, [out, in] weights, separate Q/K/V, head_dim != d_model / n_heads,
// biases, tied and untied unembeddings, F16/BF16/F32 and a sharded checkpoint.
// And GPT-NeoX's: partial rotary, parallel (and sequential) blocks, QKV fused per head.
// And Gemma 2's, Gemma 3's, Qwen3's and a windowed Qwen2's: (1 + w) norms, norms after attention
// and the MLP, q/k norms, soft-caps, sliding windows shorter than the prompt, local rotations.
const char* const kRotaryFixtures[] = {"llama_gqa",     "llama_tied_headdim",  "qwen2_bias",     "neox_parallel",
                                       "neox_sequential", "gemma2_window",     "gemma3_local_global",
                                       "gemma3_pattern",  "qwen3_qknorm",      "qwen2_window"};

TEST_CASE("rotary fixtures: every cache key matches the float64 PyTorch reference", "[forward][fixtures][llama]") {
  for (const char* name : kRotaryFixtures) {
    DYNAMIC_SECTION(name) {
      const auto dir = test::fixture_model(name);
      const auto model = Model::load(dir);
      const auto ref = SafetensorsFile::open(dir / "reference.safetensors");
      const std::vector<int32_t> tokens = reference_tokens(*ref);
      const auto cache = model->run(tokens);
      // The reference holds exactly the cache's keys (no hook_pos_embed; the rotary, norm-scale
      // and gated-MLP keys), plus "tokens".
      CHECK(cache->keys().size() + 1 == ref->tensors().size());
      CHECK_FALSE(cache->has("hook_pos_embed"));
      for (const std::string& key : cache->keys()) {
        const TensorInfo* t = ref->find(key);
        INFO(name << " " << key);
        REQUIRE(t != nullptr);
        const Tensor ours = cache->get(key);
        CHECK(ours.shape == t->shape);
        const test::Comparison c = test::compare(ref->to_f32(*t), ours.data);
        INFO("max |diff| " << c.max_abs << ", relative " << c.relative);
        CHECK(c.masks_agree);
        CHECK(c.relative <= kRelTol);
      }
    }
  }
}

TEST_CASE("each layer's window is the reference's, and the summary names the new options", "[forward][window]") {
  // fixture.json's attention_windows come from hsref.py's own reading of the config (layer_types,
  // Gemma 2's even layers, Gemma 3's pattern, Qwen's max_window_layers).
  for (const char* name : {"gemma2_window", "gemma3_local_global", "gemma3_pattern", "qwen3_qknorm", "qwen2_window"}) {
    DYNAMIC_SECTION(name) {
      const auto dir = test::fixture_model(name);
      // fixture.json is Python's JSON (a mutation's error may be Infinity): the list alone is parsed.
      const std::string text = test::read_text(dir / "fixture.json");
      std::smatch list;
      REQUIRE(std::regex_search(text, list, std::regex(R"re("attention_windows":\s*(\[[^\]]*\]))re")));
      const auto windows = nlohmann::json::parse(list[1].str());
      const auto model = Model::load(dir);
      const ModelConfig& c = model->config();
      REQUIRE(windows.size() == static_cast<size_t>(c.n_layers));
      for (int l = 0; l < c.n_layers; ++l) CHECK(attention_window(c, l) == windows[static_cast<size_t>(l)].get<int>());
    }
  }
  const auto gemma2 = Model::load(test::fixture_model("gemma2_window"));
  const std::string summary = describe_architecture(gemma2->config(), true);
  for (const char* part : {"embedding × sqrt(d_model)", "RMSNorm without bias (1 + w)", "norms after attention and the MLP too",
                           "sliding window 4 on 2 of 3 layers", "scores soft-capped at", "logits soft-capped at"}) {
    INFO(summary);
    CHECK_THAT(summary, Catch::Contains(part));
  }
  const std::string gemma3 = describe_architecture(Model::load(test::fixture_model("gemma3_pattern"))->config(), false);
  CHECK_THAT(gemma3, Catch::Contains("q/k norms"));
  CHECK_THAT(gemma3, Catch::Contains("local layers θ 10000"));
  CHECK_THAT(gemma3, !Catch::Contains("scores soft-capped"));  // Gemma 3 reads the cap but does not apply it
}

TEST_CASE("transformers 5's rope_parameters give the same rotation as rope_theta and rope_scaling", "[forward][rope]") {
  // A copy of a fixture whose config says the same in the newer form.
  int copies = 0;
  auto rewritten = [&copies](const std::string& name, const std::function<void(nlohmann::json&)>& edit) {
    const fs::path dir = test::scratch_dir() / ("rope_parameters_" + name + std::to_string(++copies));
    fs::remove_all(dir);
    fs::copy(test::fixture_model(name), dir, fs::copy_options::recursive);
    auto config = nlohmann::json::parse(test::read_text(dir / "config.json"));
    edit(config);
    std::ofstream(dir / "config.json") << config.dump(2);
    return dir;
  };
  const std::vector<int32_t> tokens = {290, 5, 77, 260, 13, 99, 281, 0, 1, 2, 45, 46};
  auto same_logits = [&](const std::string& name, const fs::path& dir) {
    const auto a = Model::load(test::fixture_model(name))->run(tokens);
    const auto b = Model::load(dir)->run(tokens);
    CHECK(a->get("logits").data == b->get("logits").data);
  };
  SECTION("Gemma 3: one object per attention type, the scaling only on full attention") {
    const fs::path dir = rewritten("gemma3_local_global", [](nlohmann::json& j) {
      j["rope_parameters"] = {{"full_attention", {{"rope_type", "linear"}, {"factor", 4.0}, {"rope_theta", 1000000.0}}},
                              {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 10000.0}}}};
      j.erase("rope_theta");
      j.erase("rope_scaling");
      j.erase("rope_local_base_freq");
    });
    same_logits("gemma3_local_global", dir);
    // Without it the defaults (theta 1e6, no scaling) would rotate otherwise: the key is read.
    const auto plain = rewritten("gemma3_local_global", [](nlohmann::json& j) {
      j.erase("rope_theta");
      j.erase("rope_scaling");
    });
    CHECK(Model::load(plain)->run(tokens)->get("logits").data != Model::load(dir)->run(tokens)->get("logits").data);
  }
  SECTION("Llama: one object") {
    const fs::path dir = rewritten("llama_gqa", [](nlohmann::json& j) {
      nlohmann::json p = j["rope_scaling"];
      p["rope_theta"] = j["rope_theta"];
      j["rope_parameters"] = p;
      j.erase("rope_theta");
      j.erase("rope_scaling");
    });
    same_logits("llama_gqa", dir);
  }
  SECTION("a family without a local rotation refuses a different one for sliding layers") {
    const fs::path dir = rewritten("qwen2_window", [](nlohmann::json& j) {
      j["rope_parameters"] = {{"full_attention", {{"rope_type", "default"}, {"rope_theta", 1000000.0}}},
                              {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 10000.0}}}};
    });
    CHECK_THROWS_WITH(Model::load(dir), Catch::Contains("rotates sliding-window layers differently"));
  }
}

TEST_CASE("rotary fixtures: the fast pass equals the slow loops, a reused prefix equals a full run",
          "[forward][llama]") {
  for (const char* name : kRotaryFixtures) {
    DYNAMIC_SECTION(name) {
      const auto model = Model::load(test::fixture_model(name));
      const std::vector<int32_t> tokens = {290, 5, 77, 260, 13, 99, 281, 0, 1, 2, 45, 46};
      RunOptions stored;
      stored.store_scores = stored.store_results = true;
      const auto fast = model->run(tokens, stored);
      const auto slow = test::forward_reference(model->weights(), tokens);
      for (const std::string& key : fast->keys()) {
        INFO(key);
        const test::Comparison c = test::compare(slow->get(key).data, fast->get(key).data);
        CHECK(c.masks_agree);
        CHECK(c.relative <= 1e-5);
      }
      // Derived keys (scores, results, norms, hook_post) are the bits a stored run holds.
      const auto plain = model->run(tokens);
      for (const std::string& key : fast->keys()) {
        INFO(key);
        CHECK(plain->get(key).data == fast->get(key).data);
      }
      // The memory guard counts what the cache of this architecture stores (rotary's unrotated q
      // and k, a gated MLP's up projection).
      CHECK(estimate_cache_bytes(model->config(), static_cast<int64_t>(tokens.size()), stored) >= fast->stored_bytes());
      CHECK(estimate_cache_bytes(model->config(), static_cast<int64_t>(tokens.size()), stored) <=
            2 * fast->stored_bytes());
      // Typing at the end: the prefix's rotated keys are reused, the new positions rotated by
      // their own angles.
      const std::vector<int32_t> first(tokens.begin(), tokens.begin() + 7);
      const auto incremental = model->run(tokens, stored, model->run(first, stored));
      CHECK(incremental->reused_prefix == 7);
      for (const std::string& key : fast->keys()) {
        INFO(key << " after reusing 7");
        CHECK(test::compare(fast->get(key).data, incremental->get(key).data).relative <= 1e-5);
      }
    }
  }
}

TEST_CASE("rotary fixtures: the identities the views show hold without a position embedding", "[analysis][llama]") {
  for (const char* name : kRotaryFixtures) {
    DYNAMIC_SECTION(name) {
      const auto model = Model::load(test::fixture_model(name));
      const ModelConfig& c = model->config();
      const std::vector<int32_t> tokens = {290, 51, 257, 273, 270, 267, 270, 220};
      const auto cache = model->run(tokens);
      const int attn_bias = c.architecture.attn_out_bias ? 1 : 0;
      for (int pos = 0; pos < cache->n_pos(); ++pos) {
        const ResidualDecomposition d = decompose_residual(*cache, pos);
        REQUIRE(d.labels.size() == static_cast<size_t>(1 + c.n_layers * (c.n_heads + attn_bias + 1)));
        CHECK(d.labels[0] == "embed");
        CHECK(d.labels[1] == "L0H0");
        INFO(name << " pos " << pos << " error " << d.max_abs_error);
        CHECK(d.max_abs_error <= 1e-5f * d.residual.cwiseAbs().maxCoeff());
        for (const Prediction& p : top_predictions(*cache, pos, 2)) {
          const LogitAttribution a = direct_logit_attribution(*cache, d, p.id);
          if (!c.architecture.norm_bias) CHECK(a.bias_term == 0.0f);  // RMSNorm has no bias
          CHECK(a.max_abs_error <= 1e-4f * std::max(1.0f, std::abs(a.logit)));
        }
      }
      for (int l = 0; l < c.n_layers; ++l) {
        const ConcatVsSum cs = concat_vs_sum(*cache, l);
        CHECK(cs.max_abs_vs_cache == 0.0f);
        CHECK(cs.max_abs_diff <= 1e-5f * std::max(1.0f, cs.via_concat.cwiseAbs().maxCoeff()));
        CHECK(cs.z_concat.cols() == c.n_heads * c.d_head);
      }
    }
  }
}

TEST_CASE("keeping the last n_ctx tokens of an over-long text keeps BOS and the end", "[forward][overlong]") {
  const auto model = Model::load(test::fixture_model("full_context"));  // context: 16 tokens
  const std::string text = "the cat sat on the mat and the dog sat on the log and then they slept";
  const std::vector<int32_t> all = model->encode(text, true);
  REQUIRE(all.size() > 16);
  TextRunOptions o;
  o.overlong = OverlongPolicy::KeepLastWithWarning;
  const TextRun r = run_text(model, text, o);
  std::vector<int32_t> expected = {all.front()};  // BOS
  expected.insert(expected.end(), all.end() - 15, all.end());
  CHECK(r.tokens == expected);
  CHECK(r.dropped_tokens == static_cast<int>(all.size()) - 16);
  CHECK(r.dropped_from_start);
  REQUIRE_FALSE(r.warnings.empty());
  CHECK_THAT(r.warnings.front(), Catch::Contains("the first " + std::to_string(r.dropped_tokens) + " tokens after BOS"));
  const auto fresh = model->run(expected);
  CHECK(test::compare(fresh->get("logits").data, r.cache->get("logits").data).relative == 0.0);
  // Without BOS, the last 16 tokens.
  o.prepend_bos = false;
  const std::vector<int32_t> body = model->encode(text, false);
  const TextRun no_bos = run_text(model, text, o);
  CHECK(no_bos.tokens == std::vector<int32_t>(body.end() - 16, body.end()));
  CHECK_THAT(no_bos.warnings.front(), Catch::Contains("the first " + std::to_string(body.size() - 16) + " tokens were"));
}
