// Ablation and activation patching against the float64 TransformerLens-convention reference
// (tests/fixtures/analyses/make_ablate_patch.py), the batched sweep against one full run per
// cell, and the identities both must keep.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "core/analysis/ablation.h"
#include "core/analysis/patching.h"
#include "core/model/forward.h"
#include "core/model/model.h"
#include "core/session/session.h"
#include "core/tensor/safetensors.h"
#include "test_support.h"

using namespace hs;
namespace fs = std::filesystem;

namespace {

// Tolerance: 1e-4 relative to each array's largest reference magnitude, as for the forward pass.
constexpr double kRelTol = 1e-4;

fs::path fixture_dir() { return test::source_dir() / "tests/fixtures/analyses/ablate_patch"; }

const nlohmann::json& fixture() {
  static const nlohmann::json j = nlohmann::json::parse(test::read_text(fixture_dir() / "fixture.json"));
  return j;
}

std::vector<float> flat(const nlohmann::json& nested) {
  std::vector<float> out;
  for (const auto& row : nested)
    for (const auto& v : row) out.push_back(v.get<float>());
  return out;
}

std::vector<float> flat(const RowMatrixXf& m) { return std::vector<float>(m.data(), m.data() + m.size()); }

double relative(const RowMatrixXf& ref, const RowMatrixXf& ours) {
  const double scale = std::max(1e-30, static_cast<double>(ref.cwiseAbs().maxCoeff()));
  return static_cast<double>((ref - ours).cwiseAbs().maxCoeff()) / scale;
}

std::shared_ptr<ActivationCache> run(const Model& m, const std::vector<int32_t>& tokens, Interventions iv = {},
                                     std::shared_ptr<const ActivationCache> previous = nullptr) {
  RunOptions o;
  o.interventions = std::move(iv);
  return m.run(tokens, o, std::move(previous));
}

// A copy of a fixture model in `dir` whose layer-0 head `head` reads no value: its columns of
// W_V are zero, so its z is b_V at every position (a pattern row sums to 1).
fs::path model_with_constant_z(const fs::path& dir, const std::string& name, int head) {
  fs::create_directories(dir);
  const fs::path src = test::fixture_model(name);
  for (const char* f : {"config.json", "vocab.json", "merges.txt"}) fs::copy_file(src / f, dir / f);
  const auto file = SafetensorsFile::open(src / "model.safetensors");
  const auto config = nlohmann::json::parse(test::read_text(src / "config.json"));
  const int64_t D = config["n_embd"].get<int64_t>(), H = config["n_head"].get<int64_t>(), dh = D / H;
  std::vector<test::Entry> entries;
  for (const TensorInfo& t : file->tensors()) {
    const auto bytes = file->raw_bytes(t);
    test::Entry e{t.name, t.dtype_text, t.shape, std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size())};
    if (t.name.find("h.0.attn.c_attn.weight") != std::string::npos) {
      REQUIRE(t.dtype == DType::F32);
      auto* w = reinterpret_cast<float*>(e.bytes.data());  // [d_model, 3 d_model]: Q | K | V
      for (int64_t r = 0; r < D; ++r)
        for (int64_t c = 0; c < dh; ++c) w[r * 3 * D + 2 * D + head * dh + c] = 0.0f;
    }
    entries.push_back(std::move(e));
  }
  std::ofstream(dir / "model.safetensors", std::ios::binary) << test::build_safetensors(entries);
  return dir;
}

struct PatchCase {
  std::shared_ptr<const Model> model;
  PatchingInputs in;
  std::shared_ptr<ActivationCache> clean, corrupt;
};

PatchCase patch_case(const nlohmann::json& c) {
  PatchCase p;
  p.model = Model::load(test::fixture_model(c["model"].get<std::string>()));
  p.in = patching_inputs(*p.model, c["clean_text"].get<std::string>(), c["corrupt_text"].get<std::string>(),
                         c["answer_text"].get<std::string>(), c["wrong_text"].get<std::string>(), c["bos"].get<bool>());
  p.clean = p.model->run(p.in.clean);
  p.corrupt = p.model->run(p.in.corrupt);
  return p;
}

constexpr HookPoint kSites[] = {HookPoint::ResidPre, HookPoint::AttnOut, HookPoint::MlpOut, HookPoint::Z};

}  // namespace

TEST_CASE("ablated runs match the float64 reference on every cache key", "[ablation][fixtures]") {
  for (const auto& a : fixture()["ablations"]) {
    const std::string name = a["model"].get<std::string>(), spec = a["ablate"].get<std::string>();
    DYNAMIC_SECTION(name << " --ablate " << spec) {
      const auto model = Model::load(test::fixture_model(name));
      const auto ref = SafetensorsFile::open(fixture_dir() / a["file"].get<std::string>());
      const auto cache = run(*model, a["tokens"].get<std::vector<int32_t>>(), parse_head_ablations(spec));
      CHECK(cache->interventions.size() == parse_head_ablations(spec).size());
      for (const std::string& key : cache->keys()) {
        INFO(key);
        const TensorInfo* t = ref->find(key);
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

TEST_CASE("an ablated head's hook_z is zero, or its mean, and the rest of the layer is untouched", "[ablation]") {
  const auto model = Model::load(test::fixture_model("full_context"));
  const std::vector<int32_t> tokens = {290, 46, 69, 258, 280, 272, 11, 220, 257};
  const auto plain = run(*model, tokens);
  const auto ablated = run(*model, tokens, {zero_ablation(1, 2), mean_ablation(0, 1)});
  const int dh = model->config().d_head;
  CHECK(ablated->layer(1).z.middle_cols(2 * dh, dh).isZero(0.0f));
  const RowMatrixXf z01 = ablated->layer(0).z.middle_cols(dh, dh);
  for (Eigen::Index r = 1; r < z01.rows(); ++r) CHECK(z01.row(r) == z01.row(0));
  CHECK(z01.row(0).isApprox(plain->layer(0).z.middle_cols(dh, dh).colwise().mean(), 1e-6f));
  // Layer 0's other heads, its patterns and everything before the edit are the plain run's.
  CHECK(ablated->layer(0).z.middle_cols(0, dh) == plain->layer(0).z.middle_cols(0, dh));
  CHECK(ablated->layer(0).pattern == plain->layer(0).pattern);
  CHECK(ablated->layer(0).resid_pre == plain->layer(0).resid_pre);
  CHECK(!(ablated->layer(0).attn_out == plain->layer(0).attn_out));
}

TEST_CASE("interventions never mix into an unrelated run's reused prefix", "[ablation][incremental]") {
  const auto model = Model::load(test::fixture_model("full_context"));
  const std::vector<int32_t> first = {290, 46, 69, 258, 280, 272, 11};
  std::vector<int32_t> longer = first;
  for (int32_t t : {220, 257, 220, 266}) longer.push_back(t);
  const Interventions zero = {zero_ablation(0, 1), zero_ablation(1, 0)};
  const Interventions mean = {mean_ablation(0, 1)};

  SECTION("zero ablations reuse a prefix made with the same ablations, and equal a full run") {
    const auto base = run(*model, first, zero);
    const auto full = run(*model, longer, zero);
    const auto incremental = run(*model, longer, zero, base);
    CHECK(incremental->reused_prefix == static_cast<int>(first.size()));
    for (const std::string& key : full->keys()) {
      INFO(key);
      CHECK(test::compare(full->get(key).data, incremental->get(key).data).relative <= 1e-5);
    }
  }
  SECTION("a plain run and an ablated run never lend each other their prefix") {
    const auto plain = run(*model, first);
    const auto ablated = run(*model, first, zero);
    CHECK(run(*model, longer, zero, plain)->reused_prefix == 0);
    CHECK(run(*model, longer, {}, ablated)->reused_prefix == 0);
    CHECK(run(*model, longer, {zero_ablation(0, 1)}, ablated)->reused_prefix == 0);
    // The same tokens with other interventions run again instead of showing the earlier run.
    const TextRun again = run_tokens(model, first, RunOptions{}, ablated);
    CHECK(again.cache != ablated);
    CHECK(again.cache->interventions.empty());
    CHECK(again.cache->logits == plain->logits);
  }
  SECTION("a mean ablation depends on every position, so it never reuses a prefix") {
    const auto base = run(*model, first, mean);
    const auto incremental = run(*model, longer, mean, base);
    CHECK(incremental->reused_prefix == 0);
    CHECK(incremental->logits == run(*model, longer, mean)->logits);
    // ... and the mean over the longer prompt changes the earlier positions too.
    CHECK(incremental->logits.middle_rows(0, static_cast<Eigen::Index>(first.size())) != base->logits.to_matrix());
  }
}

TEST_CASE("a run without interventions is the plain run, bit for bit", "[ablation][forward]") {
  const auto model = Model::load(test::fixture_model("bf16_prefixed"));
  const std::vector<int32_t> tokens = {290, 82, 257, 267, 68, 281, 82, 220};
  const auto plain = model->run(tokens);
  const auto empty = run(*model, tokens, {});
  for (const std::string& key : plain->keys()) {
    INFO(key);
    CHECK(plain->get(key).data == empty->get(key).data);
  }
}

TEST_CASE("mean-ablating a head whose z is constant over positions changes nothing", "[ablation][identities]") {
  const fs::path dir = test::scratch_dir() / "constant_z";
  fs::remove_all(dir);
  const auto model = Model::load(model_with_constant_z(dir, "f32_prefixed", 2));
  const std::vector<int32_t> tokens = {290, 51, 257, 273, 270, 267, 270, 220, 262, 258};
  const auto plain = model->run(tokens);
  const int dh = model->config().d_head;
  const RowMatrixXf z = plain->layer(0).z.middle_cols(2 * dh, dh);
  REQUIRE((z.rowwise() - z.row(0)).cwiseAbs().maxCoeff() <= 1e-6f * z.cwiseAbs().maxCoeff());
  const auto ablated = run(*model, tokens, {mean_ablation(0, 2)});
  for (const std::string& key : plain->keys()) {
    INFO(key);
    const test::Comparison c = test::compare(plain->get(key).data, ablated->get(key).data);
    CHECK(c.masks_agree);
    CHECK(c.relative <= 1e-6);
  }
  // And a one-token prompt's mean is its only position, exactly.
  const std::vector<int32_t> one = {290};
  CHECK(run(*model, one, {mean_ablation(1, 0)})->logits == model->run(one)->logits);
  fs::remove_all(dir);
}

TEST_CASE("interventions that do not fit the model or the run are refused", "[ablation][errors]") {
  const auto model = Model::load(test::fixture_model("f32_prefixed"));  // 2 layers, 4 heads
  const std::vector<int32_t> tokens = {290, 51, 257};
  CHECK_THROWS_WITH(run(*model, tokens, {zero_ablation(2, 0)}), Catch::Contains("this model has 2 layers (0-1)"));
  CHECK_THROWS_WITH(run(*model, tokens, {mean_ablation(0, 4)}), Catch::Contains("4 heads per layer (0-3)"));
  const auto other = model->run(std::vector<int32_t>{290, 51});
  CHECK_THROWS_WITH(run(*model, tokens, {patch_from(other, HookPoint::ResidPre, 0, 1)}),
                    Catch::Contains("must be equal"));
  CHECK_THROWS_WITH(run(*model, tokens, {patch_from(nullptr, HookPoint::ResidPre, 0, 1)}),
                    Catch::Contains("needs the run to copy from"));
  CHECK_THROWS_WITH(parse_head_ablations("3-2"), Catch::Contains("\"3-2\" is not one"));
  CHECK_THROWS_WITH(parse_head_ablations("1.0,1.0:mean"), Catch::Contains("twice"));
  CHECK_THROWS_WITH(parse_head_ablations("1.0:half"), Catch::Contains("\"1.0:half\" is not one"));
  const Interventions parsed = parse_head_ablations("3.2,1.0:mean");
  REQUIRE(parsed.size() == 2);
  CHECK(parsed[0] == zero_ablation(3, 2));
  CHECK(parsed[1] == mean_ablation(1, 0));
}

TEST_CASE("the before/after comparison of an ablation", "[ablation][analysis]") {
  const auto model = Model::load(test::fixture_model("f16_plain"));
  const std::vector<int32_t> tokens = {54, 257, 264, 220, 266, 258, 220, 257, 77, 30, 288};
  const auto plain = model->run(tokens);
  const auto ablated = run(*model, tokens, {zero_ablation(1, 0), zero_ablation(1, 3)});
  const RunComparison same = compare_runs(*plain, *plain, 10);
  for (double kl : same.kl) CHECK(kl == 0.0);
  CHECK(same.logit_change() == 0.0f);
  const RunComparison r = compare_runs(*plain, *ablated, 10);
  CHECK(r.pos == static_cast<int>(tokens.size()) - 1);
  REQUIRE(r.before.size() == 10);
  CHECK(r.before.front().id == top_predictions(*plain, r.pos, 1).front().id);
  CHECK(r.after.front().id == top_predictions(*ablated, r.pos, 1).front().id);
  CHECK(r.target == r.before.front().id);
  CHECK(r.logit_change() == ablated->logits(r.pos, r.target) - plain->logits(r.pos, r.target));
  REQUIRE(r.kl.size() == tokens.size());
  // KL by its definition, from the logits in double.
  for (int p = 0; p < plain->n_pos(); ++p) {
    const Eigen::ArrayXd a = plain->logits.row(p).cast<double>().transpose().array();
    const Eigen::ArrayXd b = ablated->logits.row(p).cast<double>().transpose().array();
    const Eigen::ArrayXd la = a - (a.maxCoeff() + std::log((a - a.maxCoeff()).exp().sum()));
    const Eigen::ArrayXd lb = b - (b.maxCoeff() + std::log((b - b.maxCoeff()).exp().sum()));
    CHECK(r.kl[static_cast<size_t>(p)] == Approx((la.exp() * (la - lb)).sum()).epsilon(1e-9).margin(1e-12));
  }
  CHECK(*std::max_element(r.kl.begin(), r.kl.end()) > 0.0);
  CHECK(compare_runs(*plain, *ablated, 3, 7).target == 7);
}

TEST_CASE("patching sweeps match the float64 reference", "[patching][fixtures]") {
  for (const auto& c : fixture()["patching"]) {
    const PatchCase p = patch_case(c);
    CHECK(p.in.clean == c["clean_tokens"].get<std::vector<int32_t>>());
    CHECK(p.in.corrupt == c["corrupt_tokens"].get<std::vector<int32_t>>());
    CHECK(p.in.answer == c["answer"].get<int32_t>());
    CHECK(p.in.wrong == c["wrong"].get<int32_t>());
    for (HookPoint what : kSites) {
      const std::string site(hook_short_name(what));
      DYNAMIC_SECTION(c["model"].get<std::string>() << " " << site) {
        const auto& ref = c["sweeps"][site];
        const PatchingResult r = patching_sweep(*p.clean, *p.corrupt, p.in.answer, p.in.wrong, what);
        CHECK(r.batched);
        CHECK(r.metric_clean == Approx(ref["metric_clean"].get<double>()).epsilon(kRelTol));
        CHECK(r.metric_corrupt == Approx(ref["metric_corrupt"].get<double>()).epsilon(kRelTol));
        const test::Comparison raw = test::compare(flat(ref["raw"]), flat(r.raw));
        const test::Comparison norm = test::compare(flat(ref["normalized"]), flat(r.normalized));
        INFO("raw: max |diff| " << raw.max_abs << ", relative " << raw.relative);
        INFO("normalized: max |diff| " << norm.max_abs << ", relative " << norm.relative);
        CHECK(r.raw.rows() == p.model->config().n_layers);
        CHECK(r.raw.cols() == (what == HookPoint::Z ? p.model->config().n_heads : p.clean->n_pos()));
        CHECK(raw.relative <= kRelTol);
        CHECK(norm.relative <= kRelTol);
      }
    }
  }
}

TEST_CASE("the batched sweep equals one full run per cell", "[patching]") {
  // full_context: 3 heads of d_head 12; f16_plain: an untied unembedding; bf16_prefixed: 3 layers
  // and the 1/(l+1) attention scale.
  struct Prompts {
    const char* model;
    std::vector<int32_t> clean, corrupt;
    int32_t answer, wrong;
  };
  const Prompts cases[] = {
      {"full_context", {290, 46, 69, 258, 280, 272, 11, 220, 257, 220, 266, 258}, {290, 46, 69, 258, 280, 272, 11, 220, 257, 220, 257, 258}, 0, 13},
      {"f16_plain", {54, 257, 264, 220, 266, 258, 220, 257, 77, 30}, {54, 257, 264, 220, 75, 258, 220, 257, 77, 30}, 258, 11},
      {"bf16_prefixed", {290, 82, 257, 267, 68, 281, 82, 220, 19, 17}, {290, 70, 257, 267, 68, 281, 82, 220, 16, 22}, 284, 63},
      // Rotary positions, RMSNorm, GQA and a gated MLP; MQA with biases; LayerNorm with partial
      // rotary (sequential GPT-NeoX).
      {"llama_gqa", {290, 46, 69, 258, 280, 272, 11, 220, 257}, {290, 46, 69, 258, 280, 272, 11, 220, 266}, 0, 13},
      {"llama_tied_headdim", {290, 82, 257, 267, 68, 281, 82}, {290, 70, 257, 267, 68, 281, 82}, 271, 132},
      {"neox_sequential", {54, 257, 264, 220, 266, 258, 220}, {54, 257, 264, 220, 75, 258, 220}, 258, 11},
  };
  for (const Prompts& c : cases) {
    const auto model = Model::load(test::fixture_model(c.model));
    const std::shared_ptr<const ActivationCache> clean = model->run(c.clean), corrupt = model->run(c.corrupt);
    for (HookPoint what : kSites)
      for (bool skip : {true, false})
        for (int64_t group : {int64_t{4096}, int64_t{7}}) {
          DYNAMIC_SECTION(c.model << " " << hook_short_name(what) << (skip ? "" : " computing every cell")
                                  << " groups of " << group << " rows") {
            SweepControl control;
            control.skip_unchanged = skip;
            control.max_group_rows = group;
            const PatchingResult fast = patching_sweep(*clean, *corrupt, c.answer, c.wrong, what, control);
            const PatchingResult slow = patching_sweep_full_runs(clean, corrupt, c.answer, c.wrong, what);
            CHECK_FALSE(slow.batched);
            CHECK(fast.batched);
            CHECK(fast.metric_clean == slow.metric_clean);
            CHECK(fast.metric_corrupt == slow.metric_corrupt);
            INFO("raw relative " << relative(slow.raw, fast.raw) << ", normalized " << relative(slow.normalized, fast.normalized));
            CHECK(relative(slow.raw, fast.raw) <= 1e-5);
            CHECK(relative(slow.normalized, fast.normalized) <= 1e-5);
            if (!skip) CHECK(fast.recomputed_runs == fast.raw.size());
          }
        }
  }
}

TEST_CASE("parallel blocks fall back to one full run per cell", "[patching][llama]") {
  const auto model = Model::load(test::fixture_model("neox_parallel"));
  const std::shared_ptr<const ActivationCache> clean = model->run(std::vector<int32_t>{290, 46, 69, 258, 280, 272}),
                                               corrupt = model->run(std::vector<int32_t>{290, 46, 69, 258, 266, 272});
  const PatchingResult r = patching_sweep(*clean, *corrupt, 0, 13, HookPoint::ResidPre);
  CHECK_FALSE(r.batched);
  const PatchingResult full = patching_sweep_full_runs(clean, corrupt, 0, 13, HookPoint::ResidPre);
  CHECK(r.raw == full.raw);
}

TEST_CASE("patching identities", "[patching][identities]") {
  const auto model = Model::load(test::fixture_model("bf16_prefixed"));
  const std::vector<int32_t> clean_t = {290, 82, 257, 267, 68, 281, 82, 220, 19, 17};
  const std::vector<int32_t> corrupt_t = {290, 82, 257, 267, 68, 281, 82, 220, 16, 22};  // differs from position 8
  const std::shared_ptr<const ActivationCache> clean = model->run(clean_t), corrupt = model->run(corrupt_t);
  const int32_t answer = 284, wrong = 63;
  const float m_clean = logit_difference(*clean, answer, wrong), m_corrupt = logit_difference(*corrupt, answer, wrong);
  REQUIRE(m_clean != m_corrupt);

  SECTION("resid_pre of layer 0 patched at every position is the clean run") {
    const auto patched = run(*model, corrupt_t, {patch_from(clean, HookPoint::ResidPre, 0, -1)});
    CHECK(patched->logits == clean->logits);
    CHECK((logit_difference(*patched, answer, wrong) - m_corrupt) / (m_clean - m_corrupt) == 1.0f);
  }
  SECTION("a patch from the corrupted run itself, or no patch, is the corrupted run") {
    for (HookPoint what : kSites) {
      const auto patched = run(*model, corrupt_t, {patch_from(corrupt, what, 1, what == HookPoint::Z ? 2 : 5)});
      CHECK(patched->logits == corrupt->logits);
    }
    CHECK(model->run(corrupt_t)->logits == corrupt->logits);
  }
  SECTION("cells before the first differing token change nothing: exactly 0 when skipped, ~0 when computed") {
    for (bool skip : {true, false}) {
      SweepControl control;
      control.skip_unchanged = skip;
      for (HookPoint what : {HookPoint::ResidPre, HookPoint::AttnOut, HookPoint::MlpOut}) {
        const PatchingResult r = patching_sweep(*clean, *corrupt, answer, wrong, what, control);
        INFO(hook_short_name(what) << (skip ? " skipped" : " computed"));
        for (int l = 0; l < r.normalized.rows(); ++l)
          for (int p = 0; p < 8; ++p) {
            if (skip) CHECK(r.normalized(l, p) == 0.0f);
            else CHECK(std::abs(r.normalized(l, p)) <= 1e-5f);
          }
        if (skip) CHECK(r.recomputed_runs == r.normalized.rows() * 2);  // positions 8 and 9 of each layer
      }
    }
  }
  SECTION("position 0 (BOS in both prompts) never changes anything") {
    const PatchingResult r = patching_sweep(*clean, *corrupt, answer, wrong, HookPoint::ResidPre);
    for (int l = 0; l < r.raw.rows(); ++l) CHECK(r.raw(l, 0) == m_corrupt);
  }
}

TEST_CASE("patching refuses inputs it cannot use, with messages", "[patching][errors]") {
  const auto model = Model::load(test::fixture_model("f32_prefixed"));
  CHECK_THROWS_WITH(patching_inputs(*model, "The cat sat", "The cat sat on", "!", "."),
                    Catch::Contains("the clean prompt is 7 tokens and the corrupted prompt 9 (BOS included)"));
  CHECK_THROWS_WITH(patching_inputs(*model, "The cat", "The hat", " mat", "."),
                    Catch::Equals("the answer \" mat\" is 2 tokens (\"␣m\" + \"at\"); it must be exactly one token "
                                  "(often with a leading space, as \" Paris\")."));
  CHECK_THROWS_WITH(patching_inputs(*model, "The cat", "The hat", "!", ""), Catch::StartsWith("the wrong answer is empty"));
  CHECK_THROWS_WITH(patching_inputs(*model, "The cat", "The hat", "!", "!"), Catch::Contains("the same token"));
  const PatchingInputs in = patching_inputs(*model, "The cat", "The hat", "!", ".");
  CHECK(in.clean.front() == model->bos_id());
  const auto clean = model->run(in.clean);
  CHECK_THROWS_WITH(patching_sweep(*clean, *clean, in.answer, in.wrong, HookPoint::ResidPre),
                    Catch::Contains("on both prompts"));
  const auto shorter = model->run(std::vector<int32_t>{290, 51});
  CHECK_THROWS_WITH(patching_sweep(*clean, *shorter, in.answer, in.wrong, HookPoint::Z), Catch::Contains("same number of tokens"));
  CHECK_THROWS_WITH(patching_sweep(*clean, *model->run(in.corrupt), in.answer, 291, HookPoint::Z),
                    Catch::Contains("outside the vocabulary"));
  CHECK_THROWS_WITH(parse_hook_point("resid_post"), Catch::Contains("use resid_pre, attn_out, mlp_out or z"));
}

TEST_CASE("a sweep reports progress and can be cancelled", "[patching]") {
  const auto model = Model::load(test::fixture_model("full_context"));
  const auto clean = model->run(std::vector<int32_t>{290, 46, 69, 258, 280, 272, 11, 220});
  const auto corrupt = model->run(std::vector<int32_t>{290, 47, 69, 258, 280, 272, 11, 220});
  std::vector<double> seen;
  SweepControl control;
  control.max_group_rows = 10;
  control.progress = [&](double f) { seen.push_back(f); };
  patching_sweep(*clean, *corrupt, 0, 13, HookPoint::ResidPre, control);
  REQUIRE(seen.size() >= 3);
  CHECK(std::is_sorted(seen.begin(), seen.end()));
  CHECK(seen.back() == 1.0);
  int checks = 0;
  control.cancelled = [&] { return ++checks > 2; };
  CHECK_THROWS_AS(patching_sweep(*clean, *corrupt, 0, 13, HookPoint::Z, control), Cancelled);
  checks = 0;
  CHECK_THROWS_AS(patching_sweep_full_runs(clean, corrupt, 0, 13, HookPoint::Z, control), Cancelled);
}

TEST_CASE("cli run --ablate writes the ablated run's cache, with the keys of an ordinary run", "[ablation][cli]") {
  const auto& a = fixture()["ablations"][0];
  const fs::path out = test::scratch_dir() / "ablate.json";
  std::string ids;
  for (const auto& t : a["tokens"]) ids += (ids.empty() ? "" : ",") + std::to_string(t.get<int>());
  const test::CliRun r = test::run_cli("run --model " + test::quote(test::fixture_model(a["model"]).string()) +
                                       " --tokens " + ids + " --ablate " + a["ablate"].get<std::string>() + " -o " +
                                       test::quote(out.string()));
  INFO(r.err);
  REQUIRE(r.code == 0);
  const auto j = nlohmann::json::parse(test::read_text(out));
  fs::remove(out);
  const auto ref = SafetensorsFile::open(fixture_dir() / a["file"].get<std::string>());
  const auto model = Model::load(test::fixture_model(a["model"]));
  for (const std::string& key : model->run(a["tokens"].get<std::vector<int32_t>>())->keys()) {
    INFO(key);
    REQUIRE(j.contains(key));
    std::vector<float> ours;
    std::function<void(const nlohmann::json&)> walk = [&](const nlohmann::json& v) {
      if (v.is_array())
        for (const auto& x : v) walk(x);
      else ours.push_back(v.is_null() ? -std::numeric_limits<float>::infinity() : v.get<float>());
    };
    walk(j[key]);
    const test::Comparison c = test::compare(ref->to_f32(*ref->find(key)), ours);
    CHECK(c.masks_agree);
    CHECK(c.relative <= kRelTol);
  }
}

TEST_CASE("cli patch writes metric_clean, metric_corrupt, raw and normalized", "[patching][cli]") {
  const auto& c = fixture()["patching"][1];
  const fs::path out = test::scratch_dir() / "patch.json";
  for (HookPoint what : kSites) {
    const std::string site(hook_short_name(what));
    INFO(site);
    const test::CliRun r = test::run_cli(
        "patch --model " + test::quote(test::fixture_model(c["model"]).string()) + " --clean " +
        test::quote(c["clean_text"]) + " --corrupt " + test::quote(c["corrupt_text"]) + " --answer " +
        test::quote(c["answer_text"]) + " --wrong " + test::quote(c["wrong_text"]) + " --what " + site + " -o " +
        test::quote(out.string()));
    INFO(r.err);
    REQUIRE(r.code == 0);
    CHECK(r.out.empty());
    const auto j = nlohmann::json::parse(test::read_text(out));
    const auto& ref = c["sweeps"][site];
    CHECK(j["what"] == site);
    CHECK(j["metric_clean"].get<double>() == Approx(ref["metric_clean"].get<double>()).epsilon(kRelTol));
    CHECK(j["metric_corrupt"].get<double>() == Approx(ref["metric_corrupt"].get<double>()).epsilon(kRelTol));
    CHECK(j["raw"].size() == ref["raw"].size());
    CHECK(j["raw"][0].size() == ref["raw"][0].size());
    CHECK(test::compare(flat(ref["raw"]), flat(j["raw"])).relative <= kRelTol);
    CHECK(test::compare(flat(ref["normalized"]), flat(j["normalized"])).relative <= kRelTol);
    CHECK(j["clean_tokens"] == c["clean_tokens"]);
    CHECK(j["answer_id"] == c["answer"]);
    CHECK(j["labels"].size() == c["clean_tokens"].size());
  }
  fs::remove(out);
  const test::CliRun help = test::run_cli("patch --help");
  CHECK(help.code == 0);
  CHECK(help.out.find("--what resid_pre|attn_out|mlp_out|z") != std::string::npos);
}
