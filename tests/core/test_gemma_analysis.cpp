// The analyses on a Gemma 2-shaped model (post-attention and post-MLP norms, attention and final
// soft-caps, a sliding window shorter than the prompt): the decompositions stay exact through the
// post-norm with its scale frozen, direct logit attribution splits the logits before the final
// soft-cap, the logit lens applies the cap, and concat-vs-sum shows the norm as its own step.
// The model is the llama_gqa fixture's weights rewritten as a Gemma 2 folder (until the
// reference branch's gemma2_window fixture is merged): every tensor is real data of the right
// shape, the two new norms per layer copied from other norms of the fixture.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/analysis/concat_sum.h"
#include "core/analysis/dla.h"
#include "core/analysis/head_detectors.h"
#include "core/analysis/logit_lens.h"
#include "core/analysis/residual.h"
#include "core/analysis/view_data.h"
#include "core/model/model.h"
#include "core/tensor/safetensors.h"
#include "test_support.h"

using namespace hs;
namespace fs = std::filesystem;

namespace {

constexpr float kAttnCap = 5.0f, kFinalCap = 3.0f;
constexpr int kWindow = 3;

// A Gemma 2 folder made from the llama_gqa fixture: Llama's post_attention_layernorm (its pre-MLP
// norm) becomes pre_feedforward_layernorm; Gemma's post_attention_layernorm takes a copy of the
// layer's input_layernorm and post_feedforward_layernorm one of model.norm.
fs::path gemma2_folder() {
  // The process's own scratch folder: ctest runs the test cases of this file at once, each its own
  // process, and a shared folder was rewritten under another's feet.
  const fs::path dir = test::scratch_dir() / "gemma_analysis";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path src = test::fixture_model("llama_gqa");
  for (const char* f : {"vocab.json", "merges.txt"}) fs::copy_file(src / f, dir / f);
  const nlohmann::json llama = nlohmann::json::parse(test::read_text(src / "config.json"));
  nlohmann::json c = {{"architectures", {"Gemma2ForCausalLM"}},
                      {"model_type", "gemma2"},
                      {"hidden_size", llama["hidden_size"]},
                      {"intermediate_size", llama["intermediate_size"]},
                      {"num_attention_heads", llama["num_attention_heads"]},
                      {"num_key_value_heads", llama["num_key_value_heads"]},
                      {"num_hidden_layers", llama["num_hidden_layers"]},
                      {"head_dim", 8},
                      {"vocab_size", llama["vocab_size"]},
                      {"max_position_embeddings", 32},
                      {"rms_norm_eps", 1e-6},
                      {"rope_theta", 10000.0},
                      {"hidden_activation", "gelu_pytorch_tanh"},
                      {"query_pre_attn_scalar", 8},
                      {"attn_logit_softcapping", kAttnCap},
                      {"final_logit_softcapping", kFinalCap},
                      {"sliding_window", kWindow},
                      {"tie_word_embeddings", false},
                      {"bos_token_id", llama["bos_token_id"]},
                      {"eos_token_id", llama["eos_token_id"]},
                      {"torch_dtype", "float16"}};
  std::ofstream(dir / "config.json") << c.dump(2);
  const auto file = SafetensorsFile::open(src / "model.safetensors");
  std::vector<test::Entry> entries;
  std::string final_norm;
  for (const TensorInfo& t : file->tensors())
    if (t.name == "model.norm.weight") {
      const auto b = file->raw_bytes(t);
      final_norm.assign(reinterpret_cast<const char*>(b.data()), b.size());
    }
  for (const TensorInfo& t : file->tensors()) {
    const auto b = file->raw_bytes(t);
    test::Entry e{t.name, t.dtype_text, t.shape, std::string(reinterpret_cast<const char*>(b.data()), b.size())};
    const auto at = e.name.find("post_attention_layernorm");
    if (at != std::string::npos) {
      e.name.replace(at, std::string("post_attention_layernorm").size(), "pre_feedforward_layernorm");
      const std::string layer = e.name.substr(0, at);  // "model.layers.N."
      entries.push_back({layer + "post_feedforward_layernorm.weight", e.dtype, e.shape, final_norm});
    }
    if (e.name.find("input_layernorm") != std::string::npos) {
      const std::string layer = e.name.substr(0, e.name.find("input_layernorm"));
      entries.push_back({layer + "post_attention_layernorm.weight", e.dtype, e.shape, e.bytes});
    }
    entries.push_back(std::move(e));
  }
  std::ofstream(dir / "model.safetensors", std::ios::binary) << test::build_safetensors(entries);
  return dir;
}

std::shared_ptr<const Model> gemma2() {
  static const std::shared_ptr<const Model> m = Model::load(gemma2_folder());
  return m;
}

// A prompt longer than the window, so that layer 0 (sliding in Gemma 2) masks keys.
std::vector<int32_t> prompt() {
  std::vector<int32_t> ids;
  for (int i = 0; i < 9; ++i) ids.push_back((i * 37 + 5) % 291);
  return ids;
}

std::shared_ptr<ActivationCache> run() { return gemma2()->run(prompt(), RunOptions{}); }

}  // namespace

TEST_CASE("gemma analysis: the folder is a Gemma 2 model with post-norms, soft-caps and a window", "[gemma_analysis]") {
  const ModelConfig& c = gemma2()->config();
  CHECK(c.architecture.post_attn_norm);
  CHECK(c.architecture.post_mlp_norm);
  CHECK(c.architecture.attn_softcap == kAttnCap);
  CHECK(c.architecture.final_softcap == kFinalCap);
  CHECK(attention_window(c, 0) == kWindow);  // Hugging Face: layer 0 slides (not layer_idx % 2)
  CHECK(attention_window(c, 1) == 0);
  CHECK(window_matters(c, static_cast<int>(prompt().size())));
}

TEST_CASE("gemma analysis: the residual's parts sum to it through the frozen post-norms", "[gemma_analysis]") {
  const auto cache = run();
  const ModelConfig& c = cache->config();
  for (int pos : {0, 4, 8}) {
    const ResidualDecomposition d = decompose_residual(*cache, pos);
    const float scale = d.residual.cwiseAbs().maxCoeff();
    INFO("pos " << pos << ": max |sum - residual| " << d.max_abs_error << ", residual scale " << scale);
    CHECK(d.max_abs_error <= 1e-5f * std::max(1.0f, scale));
    // Each layer's heads alone sum to its hook_attn_out (no b_O in Gemma), and each head is the
    // cache's head_contribution, not its head_result.
    for (int l = 0; l < c.n_layers; ++l) {
      RowVectorXf heads = RowVectorXf::Zero(c.d_model);
      for (size_t i = 0; i < d.labels.size(); ++i)
        if (d.kinds[i] == ComponentKind::Head && d.layers[i] == l) {
          heads += d.components.row(static_cast<Eigen::Index>(i));
          const RowVectorXf contribution = cache->head_contribution(l, d.heads[i]).row(pos);
          CHECK((d.components.row(static_cast<Eigen::Index>(i)) - contribution).cwiseAbs().maxCoeff() <= 1e-6f);
        }
      const RowVectorXf attn_out = cache->layer(l).attn_out.row(pos);
      CHECK((heads - attn_out).cwiseAbs().maxCoeff() <= 1e-5f * std::max(1.0f, attn_out.cwiseAbs().maxCoeff()));
    }
    const RowMatrixXf norms = head_write_norms(*cache, pos);
    for (int l = 0; l < c.n_layers; ++l)
      for (int h = 0; h < c.n_heads; ++h)
        CHECK(norms(l, h) == Approx(cache->head_contribution(l, h).row(pos).norm()).epsilon(1e-5));
  }
}

TEST_CASE("gemma analysis: direct logit attribution splits the logit before the final soft-cap", "[gemma_analysis]") {
  const auto cache = run();
  const int pos = 8;
  const RowVectorXf before = cache->logits_before_softcap(pos);
  int32_t target = 0;
  before.maxCoeff(&target);
  const LogitAttribution a = direct_logit_attribution(*cache, decompose_residual(*cache, pos), target);
  // One token's logit (a dot product) is the whole row's entry to float rounding.
  CHECK(a.logit == cache->logit_before_softcap(pos, target));
  CHECK(a.logit == Approx(before(target)).epsilon(1e-6));
  for (const int32_t t : {0, 1, target == 2 ? 3 : 2})
    CHECK(cache->logit_before_softcap(pos, t) == Approx(before(t)).epsilon(1e-6).margin(1e-6));
  // The cap bends this logit: the capped one is not what the parts sum to.
  CHECK(std::abs(cache->logits(pos, target) - before(target)) > 1e-2f);
  CHECK(cache->logits(pos, target) == Approx(kFinalCap * std::tanh(before(target) / kFinalCap)).margin(1e-5));
  INFO("max |sum of parts - logit before the cap| " << a.max_abs_error);
  CHECK(a.max_abs_error <= 1e-4f * std::max(1.0f, std::abs(a.logit)));
}

TEST_CASE("gemma analysis: the logit lens applies the final soft-cap", "[gemma_analysis]") {
  const auto cache = run();
  const LogitLens lens = logit_lens(*cache);
  const int T = cache->n_pos();
  // The last stream is the model's own output: its log-probabilities are those of the capped logits.
  const ConstMatrixRef last = lens.stream(lens.n_streams - 1);
  double worst = 0.0;
  for (int p = 0; p < T; ++p) {
    const RowVectorXf logits = cache->logits.row(p);
    const float lse = logits.maxCoeff() + std::log((logits.array() - logits.maxCoeff()).exp().sum());
    worst = std::max(worst, static_cast<double>((last.row(p).array() - (logits.array() - lse)).abs().maxCoeff()));
  }
  INFO("max |lens - log_softmax(capped logits)| " << worst);
  CHECK(worst <= 1e-5);
  // Every stream's logits are capped, so no log-probability falls below -2 cap - log(d_vocab).
  const float floor = -2.0f * kFinalCap - std::log(static_cast<float>(cache->config().d_vocab)) - 1e-4f;
  CHECK(lens.logprobs.minCoeff() >= floor);
}

TEST_CASE("gemma analysis: concat-vs-sum shows the post-attention norm as its own step", "[gemma_analysis]") {
  const auto cache = run();
  for (int l = 0; l < cache->n_layer(); ++l) {
    const ConcatVsSum r = concat_vs_sum(*cache, l);
    REQUIRE(r.has_post_norm);
    CHECK(r.max_abs_diff <= 1e-5f);
    // concat @ W_O + b_O is the norm's input, not hook_attn_out.
    const RowMatrixXf input = cache->post_norm_input(l, 1);
    CHECK((r.via_concat - input).cwiseAbs().maxCoeff() <= 1e-6f);
    CHECK((r.post_norm_scale - cache->post_norm_scale(l, 1)).cwiseAbs().maxCoeff() <= 1e-6f);
    CHECK(r.max_abs_vs_cache <= 1e-5f);
    CHECK(r.max_abs_frozen_vs_cache <= 1e-5f);
    // The norm changes the values: without it the identity with the cache would not hold.
    CHECK((r.via_concat - cache->layer(l).attn_out.to_matrix()).cwiseAbs().maxCoeff() > 1e-3f);
  }
}

TEST_CASE("gemma analysis: a sliding layer's pooled pattern masks the keys before the window", "[gemma_analysis]") {
  const auto cache = run();
  const int n = cache->n_pos();
  for (int l = 0; l < cache->n_layer(); ++l) {
    const int window = attention_window(cache->config(), l);
    const PooledGrid g = pooled_pattern(*cache, l, 1, 64);  // one position per cell at 9 tokens
    REQUIRE(g.rows == n);
    for (int q = 0; q < n; ++q)
      for (int k = 0; k < n; ++k) {
        const float v = g.values[static_cast<size_t>(q * n + k)];
        INFO("layer " << l << " query " << q << " key " << k);
        if (k > q || k < first_key(window, q)) CHECK(std::isnan(v));
        else CHECK(v == cache->pattern_row(l, 1, q)[k]);
      }
  }
}

TEST_CASE("gemma analysis: detectors leave out the queries whose keys are all outside the window", "[gemma_analysis]") {
  // Each repeat's induction key (the token after the earlier occurrence) is 5 back: outside
  // layer 0's window of 3, inside layer 1 (global).
  const std::vector<int32_t> tokens = {10, 20, 30, 40, 50, 60, 10, 20, 30, 40};
  const auto cache = gemma2()->run(tokens, RunOptions{});
  const DetectorScores s = detect_heads(*cache, HeadDetector::Induction, false);
  REQUIRE(s.queries == 4);
  REQUIRE(s.layer_queries == std::vector<int>{0, 4});
  for (int h = 0; h < cache->config().n_heads; ++h) {
    CHECK(std::isnan(s.scores(0, h)));  // no evidence either way on the sliding layer
    double naive = 0.0;
    for (int q = 6; q < 10; ++q) naive += cache->pattern_row(1, h, q)[q - 5];
    CHECK(s.scores(1, h) == Approx(naive / 4).margin(1e-6));
  }
  // Previous-token keys (q - 1) are always inside a window of 3: every query counts.
  const DetectorScores prev = detect_heads(*cache, HeadDetector::PreviousToken, false);
  CHECK(prev.layer_queries == std::vector<int>{prev.queries, prev.queries});
}

TEST_CASE("gemma analysis: cli info prints the windows, soft-caps and norms", "[gemma_analysis]") {
  gemma2();  // writes the folder
  const test::CliRun r = test::run_cli("info --model " + test::quote((test::scratch_dir() / "gemma_analysis").string()));
  INFO(r.err);
  REQUIRE(r.code == 0);
  const auto j = nlohmann::json::parse(r.out)["architecture"];
  CHECK(j["family"] == "Gemma 2");
  CHECK(j["window"] == nlohmann::json::parse("[3, null]"));
  CHECK(j["attn_softcap"] == kAttnCap);
  CHECK(j["final_softcap"] == kFinalCap);
  CHECK(j["post_attn_norm"] == true);
  CHECK(j["post_mlp_norm"] == true);
  CHECK(j["qk_norm"] == false);
  CHECK(j["embedding_scaled"] == true);
  CHECK(j["norm_weight_plus_one"] == true);
  CHECK(j["attn_scale"].get<double>() == Approx(1.0 / std::sqrt(8.0)));
  // A Llama folder prints the same keys with the values that change nothing.
  const auto llama = nlohmann::json::parse(test::run_cli("info --model " + test::quote(test::fixture_model("llama_gqa").string())).out)["architecture"];
  CHECK(llama["window"] == nlohmann::json::parse("[null, null]"));
  CHECK(llama["final_softcap"].is_null());
  CHECK(llama["post_attn_norm"] == false);
}
