// The table of hook points (hooks.h) and edits at every editable hook (intervention.h): the
// listing covers every key of the contract, an edit shows at its own key exactly as
// TransformerLens's forward hook would leave it, prefix reuse with an edit equals a fresh run,
// a callable that adds a vector equals the steering edit, a callable that zeros hook_z equals
// zero_ablation, and the command-line parsers refuse what does not fit.
#include <catch2/catch.hpp>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "core/model/forward.h"
#include "core/model/hooks.h"
#include "core/model/model.h"
#include "core/tensor/safetensors.h"
#include "test_support.h"

using namespace hs;
namespace fs = std::filesystem;

namespace {

// GPT-2 (learned positions, LayerNorm, plain MLP) and Llama (rotary, RMSNorm, GQA, gated MLP).
const char* const kFixtures[] = {"f32_prefixed", "llama_gqa"};
const std::vector<int32_t> kTokens = {290, 5, 77, 260, 13, 99, 281, 0, 1, 2};

std::shared_ptr<ActivationCache> run(const Model& m, const std::vector<int32_t>& tokens, Interventions iv = {},
                                     std::shared_ptr<const ActivationCache> previous = nullptr) {
  RunOptions o;
  o.interventions = std::move(iv);
  return m.run(tokens, o, std::move(previous));
}

// Every editable hook this model has.
std::vector<HookPoint> editable_hooks(const ModelConfig& c) {
  std::vector<HookPoint> out;
  for (const HookInfo& h : hook_table())
    if (h.edit != EditUnit::None && hook_exists(c, h.hook)) out.push_back(h.hook);
  return out;
}

// A unit of the hook (the last one, so the column offset matters), or -1 for whole rows.
int some_unit(const ModelConfig& c, HookPoint hook) { return hook_unit_count(c, hook) - 1; }

// The key's value as [rows, row width] (per-position hooks), or [head * query, key] for the
// pattern.
RowMatrixXf as_rows(const ActivationCache& cache, HookPoint hook, int l) {
  const Tensor t = cache.get(hook_key(hook, l));
  const int64_t n = hook == HookPoint::Pattern ? t.shape[0] * t.shape[1] : t.shape[0];
  const int64_t w = static_cast<int64_t>(t.data.size()) / n;
  return ConstMatrixRef(t.data.data(), n, w);
}

using test::write_npy;

double relative(const std::vector<float>& a, const std::vector<float>& b) { return test::compare(a, b).relative; }

}  // namespace

TEST_CASE("the hook table lists every key of the contract with its shape", "[hooks]") {
  for (const char* name : kFixtures) {
    DYNAMIC_SECTION(name) {
      const auto model = Model::load(test::fixture_model(name));
      const ModelConfig& c = model->config();
      const auto cache = run(*model, kTokens);
      const std::vector<HookListing> listing = hook_listing(&c);
      REQUIRE(listing.size() == static_cast<size_t>(kHookCount));
      std::set<std::string> listed;
      for (const HookListing& e : listing)
        if (e.exists) listed.insert(e.name);
      for (const std::string& key : cache->keys()) {
        INFO(key);
        const std::optional<HookKey> k = parse_hook_key(c, key);
        REQUIRE(k);
        CHECK(hook_key(k->hook, k->layer) == key);
        CHECK(listed.count(k->layer >= 0 ? "blocks.{l}." + std::string(hook_info(k->hook).name) : key) == 1);
        CHECK(cache->get(key).shape == hook_shape(c, k->hook, cache->n_pos()));
        CHECK(cache->has(key));
      }
      // Every listed key is in the cache, once per layer for the per-layer ones.
      size_t expected = 0;
      for (const HookListing& e : listing)
        if (e.exists) expected += e.name.starts_with("blocks.") ? static_cast<size_t>(c.n_layers) : 1;
      CHECK(expected == cache->keys().size());
      const nlohmann::json j = hook_listing_json(&c);
      REQUIRE(j.size() == listing.size());
      for (const auto& e : j) {
        if (e["name"] == "blocks.{l}.attn.hook_z") {
          CHECK(e["shape"] == "[pos, " + std::to_string(c.n_heads) + ", " + std::to_string(c.d_head) + "]");
          CHECK(e["dims"] == "[pos, head, d_head]");
          CHECK(e["unit"] == "head");
        }
        if (e["name"] == "blocks.{l}.attn.hook_k") CHECK(e["shape"] == "[pos, " + std::to_string(c.n_key_value_heads) + ", " + std::to_string(c.d_head) + "]");
        if (e["name"] == "blocks.{l}.mlp.hook_post") CHECK(e["unit"] == "neuron");
        if (e["name"] == "logits") CHECK(e["editable"] == false);
        if (e["name"] == "hook_pos_embed") CHECK(e["exists"] == !cache->has_rotary());
      }
      CHECK(hook_listing_text(&c).find("blocks.{l}.hook_resid_pre") != std::string::npos);
    }
  }
  // Without a model the shapes are symbolic and every hook is listed.
  const std::vector<HookListing> generic = hook_listing();
  for (const HookListing& e : generic) CHECK(e.shape == e.dims);
}

TEST_CASE("an edit at every editable hook shows at its own key as a TransformerLens hook leaves it", "[hooks][edits]") {
  for (const char* name : kFixtures) {
    DYNAMIC_SECTION(name) {
      const auto model = Model::load(test::fixture_model(name));
      const ModelConfig& c = model->config();
      const auto plain = run(*model, kTokens);
      const std::vector<int32_t> other_tokens = {290, 7, 8, 9, 10, 11, 12, 13, 14, 15};
      const auto other = run(*model, other_tokens);
      const int S = static_cast<int>(kTokens.size());
      for (HookPoint hook : editable_hooks(c)) {
        const int l = hook_info(hook).per_layer ? 1 : 0;
        const int unit = some_unit(c, hook);
        const int64_t width = hook_unit_width(c, hook, S);
        const Eigen::Index c0 = unit >= 0 ? unit * width : 0;
        const Eigen::Index w = unit >= 0 ? width : hook_row_width(c, hook, S);
        // The key's rows of the unit: for the pattern, head `unit`'s [query, key] matrix.
        auto unit_rows = [&](const ActivationCache& cache) -> RowMatrixXf {
          const RowMatrixXf m = as_rows(cache, hook, l);
          if (hook == HookPoint::Pattern) return m.middleRows(static_cast<Eigen::Index>(unit) * S, S);
          return m.middleCols(c0, w);
        };
        const RowMatrixXf before = unit_rows(*plain);
        INFO(hook_key(hook, l) << " unit " << unit);

        // zero at position 3: that row of the unit is zero, the rows before it are unchanged.
        const auto zeroed = run(*model, kTokens, {zero_at(hook, l, unit, 3)});
        RowMatrixXf z = unit_rows(*zeroed);
        CHECK(z.row(3).isZero(0));
        CHECK(z.topRows(3) == before.topRows(3));
        CHECK(zeroed->get("logits").data != plain->get("logits").data);

        // patch every position from another run: the unit holds the other run's values.
        const auto patched = run(*model, kTokens, {patch_at(other, hook, l, unit)});
        CHECK(unit_rows(*patched) == unit_rows(*other));

        if (hook == HookPoint::Pattern) continue;  // mean and steer are refused there (below)
        // mean over positions: every row is the plain run's mean.
        const auto meaned = run(*model, kTokens, {mean_at(hook, l, unit)});
        const RowVectorXf mean = before.colwise().mean();
        const RowMatrixXf m = unit_rows(*meaned);
        for (int p = 0; p < S; ++p) CHECK((m.row(p) - mean).cwiseAbs().maxCoeff() <= 1e-6f * (1 + mean.cwiseAbs().maxCoeff()));

        // steer: plain + scale * v at every position.
        std::vector<float> v(static_cast<size_t>(w));
        for (size_t i = 0; i < v.size(); ++i) v[i] = 0.1f * static_cast<float>(i % 7) - 0.3f;
        const auto steered = run(*model, kTokens, {steer_at(hook, l, v, 2.5f, unit)});
        const RowVectorXf add = ConstRowVectorRef(v.data(), w) * 2.5f;
        RowMatrixXf expected = before;
        expected.rowwise() += add;
        CHECK((unit_rows(*steered) - expected).cwiseAbs().maxCoeff() <= 1e-5f * (1 + expected.cwiseAbs().maxCoeff()));
      }
    }
  }
}

TEST_CASE("edits: prefix reuse equals a fresh run, a callable equals its built-in kind", "[hooks][edits]") {
  for (const char* name : kFixtures) {
    DYNAMIC_SECTION(name) {
      const auto model = Model::load(test::fixture_model(name));
      const ModelConfig& c = model->config();
      // Several position-local edits at once, at every editable hook.
      Interventions edits;
      for (HookPoint hook : editable_hooks(c)) {
        const int l = 0;
        edits.push_back(zero_at(hook, l, some_unit(c, hook), 2));
        if (hook != HookPoint::Pattern) {
          const int64_t w = hook_unit_width(c, hook, 10);
          edits.push_back(steer_at(hook, 1 % c.n_layers, std::vector<float>(static_cast<size_t>(w), 0.05f), 1.5f,
                                   some_unit(c, hook)));
        }
      }
      CHECK(prefix_stable(edits));
      const auto fresh = run(*model, kTokens, edits);
      const std::vector<int32_t> first(kTokens.begin(), kTokens.begin() + 6);
      const auto incremental = run(*model, kTokens, edits, run(*model, first, edits));
      CHECK(incremental->reused_prefix == 6);
      for (const std::string& key : fresh->keys()) {
        INFO(key << " after reusing 6");
        CHECK(test::compare(fresh->get(key).data, incremental->get(key).data).relative <= 1e-5);
      }
      // A mean or a patch is not position-local: no reuse.
      CHECK(!prefix_stable({mean_at(HookPoint::ResidPre, 0)}));
      CHECK(run(*model, kTokens, {mean_at(HookPoint::ResidPre, 0)}, run(*model, first, {mean_at(HookPoint::ResidPre, 0)}))
                ->reused_prefix == 0);

      // A callable adding the vector is the steering edit, bit for bit.
      const std::vector<float> v(static_cast<size_t>(c.d_model), 0.25f);
      auto add = std::make_shared<CallableEdit>();
      add->edit = [v](Eigen::Ref<RowMatrixXf> rows, Eigen::Index) {
        const RowVectorXf a = ConstRowVectorRef(v.data(), static_cast<Eigen::Index>(v.size())) * 3.0f;
        rows.rowwise() += a;
      };
      add->position_local = true;
      const auto steered = run(*model, kTokens, {steer_at(HookPoint::ResidMid, 1, v, 3.0f)});
      const auto called = run(*model, kTokens, {call_at(HookPoint::ResidMid, 1, add)});
      for (const std::string& key : steered->keys()) {
        INFO(key);
        CHECK(steered->get(key).data == called->get(key).data);
      }
      // A callable that writes zeros at hook_z is zero_ablation.
      auto zeros = std::make_shared<CallableEdit>();
      zeros->edit = [](Eigen::Ref<RowMatrixXf> rows, Eigen::Index) { rows.setZero(); };
      const auto ablated = run(*model, kTokens, {zero_ablation(1, 1)});
      const auto zero_called = run(*model, kTokens, {call_at(HookPoint::Z, 1, zeros, 1)});
      for (const std::string& key : ablated->keys()) {
        INFO(key);
        CHECK(ablated->get(key).data == zero_called->get(key).data);
      }
      // A callable that changes nothing leaves the plain run's bits.
      auto nothing = std::make_shared<CallableEdit>();
      nothing->edit = [](Eigen::Ref<RowMatrixXf>, Eigen::Index) {};
      const auto plain = run(*model, kTokens);
      for (HookPoint hook : editable_hooks(c)) {
        const auto same = run(*model, kTokens, {call_at(hook, 1, nothing)});
        for (const std::string& key : plain->keys()) {
          INFO(hook_name(hook) << " " << key);
          CHECK(relative(plain->get(key).data, same->get(key).data) == 0.0);
        }
      }
    }
  }
}

TEST_CASE("edits that do not fit are refused, and the command-line forms parse", "[hooks][edits]") {
  const auto model = Model::load(test::fixture_model("llama_gqa"));  // 2 layers, 4 heads, 2 kv heads, d_mlp 48
  const ModelConfig& c = model->config();
  CHECK_THROWS_WITH(run(*model, kTokens, {zero_at(HookPoint::Logits, 0)}), Catch::Contains("cannot be edited"));
  CHECK_THROWS_WITH(run(*model, kTokens, {zero_at(HookPoint::AttnScores, 0, 1)}), Catch::Contains("cannot be edited"));
  CHECK_THROWS_WITH(run(*model, kTokens, {zero_at(HookPoint::Result, 0)}), Catch::Contains("cannot be edited"));
  CHECK_THROWS_WITH(run(*model, kTokens, {zero_at(HookPoint::PosEmbed, 0)}), Catch::Contains("this model has no hook_pos_embed"));
  CHECK_THROWS_WITH(run(*model, kTokens, {zero_at(HookPoint::K, 0, 2)}), Catch::Contains("2 kv heads per layer (0-1)"));
  CHECK_THROWS_WITH(run(*model, kTokens, {zero_at(HookPoint::MlpPost, 0, 48)}), Catch::Contains("48 neurons per MLP (0-47)"));
  CHECK_THROWS_WITH(run(*model, kTokens, {zero_at(HookPoint::ResidPre, 0, 1)}), Catch::Contains("a whole row at a time"));
  CHECK_THROWS_WITH(run(*model, kTokens, {zero_at(HookPoint::MlpOut, 2)}), Catch::Contains("2 layers (0-1)"));
  CHECK_THROWS_WITH(run(*model, kTokens, {zero_at(HookPoint::MlpOut, 0, -1, 10)}), Catch::Contains("outside the prompt"));
  CHECK_THROWS_WITH(run(*model, kTokens, {mean_at(HookPoint::Pattern, 0, 1)}), Catch::Contains("zero, patch or a callable"));
  CHECK_THROWS_WITH(run(*model, kTokens, {steer_at(HookPoint::Z, 0, std::vector<float>(5), 1.0f, 1)}),
                    Catch::Contains("the vector has 5 values but attn.hook_z of one head is 8 wide"));
  CHECK_THROWS_WITH(run(*model, kTokens, {call_at(HookPoint::Z, 0, nullptr)}), Catch::Contains("needs its function"));

  const Interventions e = parse_edits("attn.hook_z:1.2:zero@5,blocks.0.mlp.hook_post:17:mean,embed:zero@0,resid_pre:1:mean");
  REQUIRE(e.size() == 4);
  CHECK((e[0].hook == HookPoint::Z && e[0].layer == 1 && e[0].head == 2 && e[0].pos == 5 && e[0].kind == InterventionKind::Zero));
  CHECK((e[1].hook == HookPoint::MlpPost && e[1].layer == 0 && e[1].head == 17 && e[1].pos == -1 && e[1].kind == InterventionKind::Mean));
  CHECK((e[2].hook == HookPoint::Embed && e[2].pos == 0));
  CHECK((e[3].hook == HookPoint::ResidPre && e[3].layer == 1 && e[3].head == -1));
  CHECK(describe(e[0]) == "L1H2 at position 5 zero-ablated");
  CHECK(describe(e[1]) == "mlp_post L0 neuron 17 mean-ablated");
  CHECK_NOTHROW(run(*model, kTokens, e));
  CHECK_THROWS_WITH(parse_edits("attn.hook_zz:1.2:zero"), Catch::Contains("is not a hook point"));
  CHECK_THROWS_WITH(parse_edits("attn.hook_z:1.2:half"), Catch::Contains("neither zero nor mean"));
  CHECK_THROWS_WITH(parse_edits("hook_resid_pre:zero"), Catch::Contains("give its LAYER"));
  CHECK_THROWS_WITH(parse_edits("hook_resid_pre:1.3:zero"), Catch::Contains("has no heads or neurons"));
  CHECK_THROWS_WITH(parse_edits("hook_embed:1:zero"), Catch::Contains("belongs to no layer"));
  CHECK_THROWS_WITH(parse_edits("z:1.2:zero@x"), Catch::Contains("is not a position"));

  const fs::path dir = test::scratch_dir() / "steer";
  fs::create_directories(dir);
  std::vector<float> v(static_cast<size_t>(c.d_model));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) / 10.0f;
  write_npy(dir / "v.npy", v);
  write_npy(dir / "short.npy", std::vector<float>(7, 1.0f));
  const Intervention s = parse_steer("blocks.1.hook_resid_pre:" + (dir / "v.npy").string() + ":4.0@3", c);
  CHECK((s.kind == InterventionKind::Add && s.hook == HookPoint::ResidPre && s.layer == 1 && s.pos == 3 && s.scale == 4.0f));
  CHECK(*s.vector == v);
  const auto steered = run(*model, kTokens, {s});
  const auto plain = run(*model, kTokens);
  const RowVectorXf expected = plain->layer(1).resid_pre.row(3) + ConstRowVectorRef(v.data(), c.d_model) * 4.0f;
  CHECK((steered->layer(1).resid_pre.row(3) - expected).cwiseAbs().maxCoeff() <= 1e-5f);
  CHECK_THROWS_WITH(parse_steer("hook_resid_pre:1:" + (dir / "short.npy").string() + ":4", c),
                    Catch::Contains("holds 7 values (shape [7]) but blocks.1.hook_resid_pre is 32 wide"));
  CHECK_THROWS_WITH(parse_steer("z:1.1:" + (dir / "short.npy").string() + ":4", c),
                    Catch::Contains("holds 7 values (shape [7]) but blocks.1.attn.hook_z of one head is 8 wide"));
  CHECK_THROWS_WITH(parse_steer("hook_resid_pre:1:" + (dir / "v.npy").string() + ":big", c), Catch::Contains("is not a number"));
  CHECK_THROWS_WITH(parse_steer("logits:" + (dir / "v.npy").string() + ":1", c), Catch::Contains("cannot be edited"));
}

TEST_CASE("edits at every editable hook match the float64 TransformerLens-hook reference", "[hooks][edits][fixtures]") {
  // tests/fixtures/analyses/make_edits.py: per model, a run of each kind (zero, mean, patch,
  // steer) with an edit at every editable hook. Tolerance as for the forward pass.
  const fs::path dir = test::source_dir() / "tests/fixtures/analyses/edits";
  const nlohmann::json fixture = nlohmann::json::parse(test::read_text(dir / "fixture.json"));
  REQUIRE(fixture["runs"].size() == 8);
  for (const auto& r : fixture["runs"]) {
    const std::string name = r["model"];
    DYNAMIC_SECTION(r["file"].get<std::string>()) {
      const auto model = Model::load(test::fixture_model(name));
      const std::vector<int32_t> tokens = r["tokens"].get<std::vector<int32_t>>();
      const auto source = run(*model, r["source_tokens"].get<std::vector<int32_t>>());
      Interventions edits;
      for (const auto& e : r["edits"]) {
        const std::optional<HookPoint> hook = find_hook(e["hook"].get<std::string>());
        REQUIRE(hook);
        const int layer = e["layer"], unit = e["unit"], pos = e["pos"];
        const std::string kind = e["kind"];
        if (kind == "zero") edits.push_back(zero_at(*hook, layer, unit, pos));
        if (kind == "mean") edits.push_back(mean_at(*hook, layer, unit));
        if (kind == "patch") edits.push_back(patch_at(source, *hook, layer, unit, pos));
        if (kind == "steer")
          edits.push_back(steer_at(*hook, layer, e["vector"].get<std::vector<float>>(), e["scale"].get<float>(), unit, pos));
      }
      const auto cache = run(*model, tokens, edits);
      const auto ref = SafetensorsFile::open(dir / r["file"].get<std::string>());
      for (const std::string& key : cache->keys()) {
        INFO(r["file"].get<std::string>() << " " << key);
        const TensorInfo* t = ref->find(key);
        REQUIRE(t != nullptr);
        const Tensor ours = cache->get(key);
        CHECK(ours.shape == t->shape);
        const test::Comparison c = test::compare(ref->to_f32(*t), ours.data);
        INFO("max |diff| " << c.max_abs << ", relative " << c.relative);
        CHECK(c.masks_agree);
        CHECK(c.relative <= 1e-4);
      }
    }
  }
}
