// Splicing an SAE or transcoder into a run, editing its latents, the quality of one prompt, and the
// attribution of latents (core/features/features.h), on the built-in model with SAEs made here.
#include <random>

#include "core/analysis/head_scores.h"
#include "core/error.h"
#include "core/features/features.h"
#include "core/io/npz_reader.h"
#include "core/model/backward.h"
#include "core/model/forward.h"
#include "core/model/metric.h"
#include "core/model/model.h"
#include "core/session/session.h"
#include "tests/core/test_support.h"

namespace {

using hs::LatentEdit;
using hs::RowMatrixXf;

const std::shared_ptr<const hs::Model>& builtin() {
  static const auto m = hs::Model::load(hs::builtin_model_dir());
  return m;
}

std::vector<int32_t> prompt_tokens() {
  return hs::run_text(builtin(), "The cat sat on the mat. The cat sat on the").tokens;
}

// A ReLU SAE (or transcoder) with seeded weights: about a third of its latents fire on a row.
hs::Sae make_sae(const std::string& hook_in, const std::string& hook_out, int d_sae, unsigned seed) {
  const int d = builtin()->config().d_model;
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  hs::Sae s;
  s.name = "test";
  s.architecture = hook_in == hook_out ? "standard" : "transcoder";
  s.source_format = "saelens v6";
  s.hook_in = hook_in;
  s.hook_out = hook_out;
  s.layer = hs::parse_hook_key(builtin()->config(), hook_in)->layer;
  s.d_in = d;
  s.d_sae = d_sae;
  s.d_out = d;
  s.W_enc = RowMatrixXf::NullaryExpr(d, d_sae, [&] { return n(rng) / std::sqrt(static_cast<float>(d)); });
  s.W_dec = RowMatrixXf::NullaryExpr(d_sae, d, [&] { return 0.1f * n(rng); });
  s.b_enc = hs::RowVectorXf::Constant(d_sae, -0.3f);
  s.b_dec = hs::RowVectorXf::NullaryExpr(d, [&] { return 0.01f * n(rng); });
  return s;
}

std::shared_ptr<const hs::ActivationCache> run(const std::vector<int32_t>& tokens, hs::Interventions i = {},
                                               std::shared_ptr<const hs::ActivationCache> previous = nullptr) {
  hs::RunOptions o;
  o.interventions = std::move(i);
  return hs::forward(builtin()->weights(), tokens, o, std::move(previous));
}

void require_same_bits(const hs::ActivationCache& a, const hs::ActivationCache& b) {
  REQUIRE(a.keys() == b.keys());
  for (const std::string& key : a.keys()) {
    INFO(key);
    const hs::Tensor x = a.get(key), y = b.get(key);
    REQUIRE(x.shape == y.shape);
    CHECK(std::memcmp(x.data.data(), y.data.data(), x.data.size() * sizeof(float)) == 0);
  }
}

// A latent active at position p with the largest activation there.
std::pair<int, int> an_active_latent(const RowMatrixXf& acts, int p) {
  Eigen::Index i = 0;
  acts.row(p).maxCoeff(&i);
  REQUIRE(acts(p, i) > 0.0f);
  return {static_cast<int>(i), p};
}

}  // namespace

TEST_CASE("a spliced SAE or transcoder with its error term and no edit leaves every key the same bits") {
  const auto tokens = prompt_tokens();
  const auto plain = run(tokens);
  for (const auto& [in, out] : {std::pair{"blocks.2.hook_resid_pre", "blocks.2.hook_resid_pre"},
                                {"blocks.1.ln2.hook_normalized", "blocks.1.hook_mlp_out"},
                                {"blocks.0.attn.hook_z", "blocks.0.attn.hook_z"}}) {
    INFO(in);
    // hook_z's rows are [pos, n_heads * d_head], as wide as d_model in this model.
    hs::Sae sae = make_sae(in, out, 96, 7);
    sae.hook_z = std::string(in).ends_with("hook_z");
    const auto shared = std::make_shared<const hs::Sae>(sae);
    const auto spliced = run(tokens, hs::splice_sae(shared, *builtin()->weights(), {}));
    require_same_bits(*plain, *spliced);
  }
}

TEST_CASE("an edited latent changes its hook by the decoder's difference and every key downstream follows") {
  const auto tokens = prompt_tokens();
  const auto plain = run(tokens);
  const auto sae = std::make_shared<const hs::Sae>(make_sae("blocks.2.hook_resid_pre", "blocks.2.hook_resid_pre", 128, 3));
  const RowMatrixXf x = hs::hook_rows(*plain, sae->hook_in);
  const hs::SaeRun clean = hs::run_sae(*sae, x);
  const auto [latent, pos] = an_active_latent(clean.feature_acts, 5);

  for (const LatentEdit edit : {LatentEdit{latent, LatentEdit::Kind::Zero, 0.0f, pos},
                                LatentEdit{latent, LatentEdit::Kind::Scale, 3.0f, -1},
                                LatentEdit{latent, LatentEdit::Kind::Add, 2.5f, pos}}) {
    INFO(hs::describe(edit));
    const auto spliced = run(tokens, hs::splice_sae(sae, *builtin()->weights(), {.error_term = true, .edits = {edit}}));
    // The expected rows, from the SAE's own functions in SAELens's order: decode(edited) + error.
    RowMatrixXf expected = x;
    RowMatrixXf acts = clean.feature_acts;
    for (Eigen::Index p = 0; p < x.rows(); ++p) {
      if (edit.pos >= 0 && p != edit.pos) continue;
      if (edit.kind == LatentEdit::Kind::Add) {
        expected.row(p) += edit.value * hs::sae_decoder_row(*sae, latent);
        continue;
      }
      acts(p, latent) = edit.kind == LatentEdit::Kind::Zero ? 0.0f : acts(p, latent) * edit.value;
    }
    if (edit.kind != LatentEdit::Kind::Add) {
      const RowMatrixXf decoded = hs::sae_decode(*sae, acts, x);
      // Only where the latent's value changed: an inactive latent scaled leaves its position alone.
      for (Eigen::Index p = 0; p < x.rows(); ++p)
        if (acts(p, latent) != clean.feature_acts(p, latent))
          expected.row(p) = decoded.row(p) + (x.row(p) - clean.sae_out.row(p));
    }
    const RowMatrixXf got = hs::hook_rows(*spliced, sae->hook_in);
    CHECK(got == expected);
    // The positions not edited are the plain run's, and the edit moved its position.
    if (edit.pos >= 0) {
      for (Eigen::Index p = 0; p < x.rows(); ++p)
        if (p != edit.pos) CHECK(got.row(p) == x.row(p));
      CHECK((got.row(edit.pos) - x.row(edit.pos)).norm() > 1e-3f);
    }
    // Downstream: the same bits as a run that writes `expected` at the hook.
    auto write = std::make_shared<hs::CallableEdit>();
    write->edit = [expected](Eigen::Ref<RowMatrixXf> rows, Eigen::Index first) {
      rows = expected.middleRows(first, rows.rows());
    };
    const auto written = run(tokens, {hs::call_at(hs::HookPoint::ResidPre, 2, write)});
    CHECK(spliced->logits.to_matrix() == written->logits.to_matrix());
  }
}

TEST_CASE("without the error term the SAE's output replaces its hook, and the quality reports that run's loss") {
  const auto tokens = prompt_tokens();
  const auto plain = run(tokens);
  for (const auto& [in, out] : {std::pair{"blocks.2.hook_resid_pre", "blocks.2.hook_resid_pre"},
                                {"blocks.1.ln2.hook_normalized", "blocks.1.hook_mlp_out"}}) {
    INFO(in);
    const auto sae = std::make_shared<const hs::Sae>(make_sae(in, out, 128, 11));
    const auto replaced = run(tokens, hs::splice_sae(sae, *builtin()->weights(), {.error_term = false, .edits = {}}));
    // Layer 2's (layer 1's) input is the plain run's, so the replacement is run_sae on the plain rows.
    const hs::SaeRun r = hs::run_sae(*plain, *sae);
    CHECK(hs::hook_rows(*replaced, out) == r.sae_out);
    const hs::SaeQuality q = hs::sae_quality(builtin()->weights(), tokens, *sae);
    CHECK(q.positions == static_cast<int>(tokens.size()));
    CHECK(q.loss_spliced == hs::metric_value(hs::loss_metric(), *replaced));
    CHECK(q.loss_clean == hs::metric_value(hs::loss_metric(), *plain));
    CHECK(q.loss_spliced != q.loss_clean);
    // The quality's numbers from their definitions, in double.
    const RowMatrixXf target = hs::hook_rows(*plain, out);
    const Eigen::MatrixXd diff = target.cast<double>() - r.sae_out.cast<double>();
    const Eigen::RowVectorXd mean = target.cast<double>().colwise().mean();
    const double var = (target.cast<double>().rowwise() - mean).squaredNorm();
    CHECK(q.mse == Approx(diff.squaredNorm() / static_cast<double>(diff.size())).epsilon(1e-12));
    CHECK(q.explained_variance == Approx(1.0 - diff.squaredNorm() / var).epsilon(1e-12));
    CHECK(q.l0 == Approx(static_cast<double>((r.feature_acts.array() != 0.0f).count()) /
                                static_cast<double>(tokens.size())));
  }
}

TEST_CASE("a transcoder reads its input from the spliced run itself, an earlier edit included") {
  const auto tokens = prompt_tokens();
  const auto sae0 = std::make_shared<const hs::Sae>(make_sae("blocks.0.hook_resid_pre", "blocks.0.hook_resid_pre", 64, 5));
  const auto tc = std::make_shared<const hs::Sae>(make_sae("blocks.1.ln2.hook_normalized", "blocks.1.hook_mlp_out", 64, 6));
  // Steer the first SAE strongly, and replace layer 1's MLP by the transcoder.
  hs::Interventions i = hs::splice_sae(sae0, *builtin()->weights(), {.error_term = true, .edits = {{3, LatentEdit::Kind::Add, 8.0f, -1}}});
  for (hs::Intervention& e : hs::splice_sae(tc, *builtin()->weights(), {.error_term = false, .edits = {}})) i.push_back(e);
  const auto both = run(tokens, i);
  // The transcoder's output is run_sae on this run's own ln2 rows (which the steering changed).
  const RowMatrixXf ln2 = hs::hook_rows(*both, "blocks.1.ln2.hook_normalized");
  CHECK((ln2 - hs::hook_rows(*run(tokens), "blocks.1.ln2.hook_normalized")).norm() > 1e-2f);
  CHECK(hs::hook_rows(*both, "blocks.1.hook_mlp_out") == hs::run_sae(*tc, ln2).sae_out);
}

TEST_CASE("a spliced run that extends an earlier one reuses its prefix and agrees with a fresh run") {
  const auto tokens = prompt_tokens();
  const auto tc = std::make_shared<const hs::Sae>(make_sae("blocks.2.ln2.hook_normalized", "blocks.2.hook_mlp_out", 64, 9));
  const hs::Interventions i =
      hs::splice_sae(tc, *builtin()->weights(), {.error_term = true, .edits = {{4, LatentEdit::Kind::Scale, 0.0f, -1}}});
  const std::vector<int32_t> prefix(tokens.begin(), tokens.end() - 3);
  const auto first = run(prefix, i);
  const auto extended = run(tokens, i, first);
  CHECK(extended->reused_prefix > 0);
  // As a plain run's reuse (test_position_blocks.cpp): the products of fewer rows may round
  // differently, so to 1e-5 of each key's scale.
  const auto fresh = run(tokens, i);
  REQUIRE(extended->keys() == fresh->keys());
  for (const std::string& key : fresh->keys()) {
    INFO(key);
    const hs::test::Comparison c = hs::test::compare(fresh->get(key).data, extended->get(key).data);
    CHECK(c.masks_agree);
    CHECK(c.relative <= 1e-5);
  }
}

TEST_CASE("latent attribution is activation times the derivative, checked by a finite difference") {
  const auto tokens = prompt_tokens();
  const auto plain = run(tokens);
  const auto sae = std::make_shared<const hs::Sae>(make_sae("blocks.1.hook_resid_pre", "blocks.1.hook_resid_pre", 96, 13));
  const hs::Metric metric = hs::logprob_metric(tokens[5]);
  hs::GradOptions go;
  go.keep = {hs::HookPoint::ResidPre};
  const hs::GradientCache g = hs::backward(*plain, metric, go);
  const hs::SaeRun r = hs::run_sae(*plain, *sae);
  const RowMatrixXf attribution = hs::latent_attribution(*sae, r, g.rows(hs::HookPoint::ResidPre, 1));
  REQUIRE(attribution.rows() == static_cast<Eigen::Index>(tokens.size()));
  const double base = hs::metric_value(metric, *plain);
  int checked = 0;
  for (int p : {2, 6, static_cast<int>(tokens.size()) - 1}) {
    const auto [latent, pos] = an_active_latent(r.feature_acts, p);
    const float h = 1e-2f;
    const auto nudged = run(tokens, hs::splice_sae(sae, *builtin()->weights(),
                                                   {.error_term = true, .edits = {{latent, LatentEdit::Kind::Scale, 1 + h, pos}}}));
    const double fd = (hs::metric_value(metric, *nudged) - base) / h;
    INFO("latent " << latent << " pos " << pos << " fd " << fd << " attribution " << attribution(pos, latent));
    CHECK(attribution(pos, latent) == Approx(fd).margin(2e-3).epsilon(0.05));
    ++checked;
  }
  CHECK(checked == 3);
  // An inactive latent has no attribution.
  CHECK(((r.feature_acts.array() == 0.0f).select(attribution.array(), 0.0f) == 0.0f).all());
}

TEST_CASE("latent edits parse and bad ones are refused with the item named") {
  const auto e = hs::parse_latent_edits("12:zero,40:x2.5,7:+3@4,8:-1.5");
  REQUIRE(e.size() == 4);
  CHECK(e[0] == LatentEdit{12, LatentEdit::Kind::Zero, 0.0f, -1});
  CHECK(e[1] == LatentEdit{40, LatentEdit::Kind::Scale, 2.5f, -1});
  CHECK(e[2] == LatentEdit{7, LatentEdit::Kind::Add, 3.0f, 4});
  CHECK(e[3] == LatentEdit{8, LatentEdit::Kind::Add, -1.5f, -1});
  for (const char* bad : {"12", "x:zero", "12:double", "12:xx", "12:zero@p", "", "12:+nan"}) {
    INFO(bad);
    CHECK_THROWS_AS(hs::parse_latent_edits(bad), hs::Error);
  }
  CHECK_THROWS_WITH(hs::parse_latent_edits("3:zero,12:double"), Catch::Contains("12:double"));
  const auto sae = std::make_shared<const hs::Sae>(make_sae("blocks.2.hook_resid_pre", "blocks.2.hook_resid_pre", 32, 1));
  CHECK_THROWS_WITH(hs::splice_sae(sae, *builtin()->weights(), {.error_term = true, .edits = {{32, LatentEdit::Kind::Zero, 0, -1}}}),
                    Catch::Contains("latents 0 to 31"));
}

namespace {

std::string float_bytes(const float* p, Eigen::Index n) {
  return std::string(reinterpret_cast<const char*>(p), static_cast<size_t>(n) * sizeof(float));
}

// The SAE as SAELens v6 saves it: cfg.json (metadata.hook_name) and sae_weights.safetensors.
std::filesystem::path write_saelens_folder(const hs::Sae& s, const std::string& name) {
  const std::filesystem::path dir = hs::test::scratch_dir() / name;
  std::filesystem::create_directories(dir);
  nlohmann::json cfg = {{"architecture", "standard"}, {"d_in", s.d_in}, {"d_sae", s.d_sae}, {"dtype", "float32"},
                        {"device", "cpu"}, {"apply_b_dec_to_input", false}, {"normalize_activations", "none"},
                        {"reshape_activations", "none"},
                        {"metadata", {{"sae_lens_version", "6.5.0"}, {"hook_name", s.hook_in}}}};
  std::ofstream(dir / "cfg.json") << cfg.dump();
  std::ofstream(dir / "sae_weights.safetensors", std::ios::binary)
      << hs::test::build_safetensors({{"W_enc", "F32", {s.d_in, s.d_sae}, float_bytes(s.W_enc.data(), s.W_enc.size())},
                                      {"W_dec", "F32", {s.d_sae, s.d_out}, float_bytes(s.W_dec.data(), s.W_dec.size())},
                                      {"b_enc", "F32", {s.d_sae}, float_bytes(s.b_enc.data(), s.b_enc.size())},
                                      {"b_dec", "F32", {s.d_out}, float_bytes(s.b_dec.data(), s.b_dec.size())}});
  return dir;
}

std::map<std::string, hs::Tensor> read_npz_map(const std::filesystem::path& p) {
  std::map<std::string, hs::Tensor> out;
  for (hs::NpzArray& a : hs::read_npz_file(p)) out[a.name] = std::move(a.tensor);
  return out;
}

std::vector<float> flat(const RowMatrixXf& m) { return {m.data(), m.data() + m.size()}; }

}  // namespace

TEST_CASE("cli features writes the latents, the output and the input of an SAE folder, and run --sae splices it") {
  const auto tokens = prompt_tokens();
  std::string ids;
  for (int32_t t : tokens) ids += (ids.empty() ? "" : ",") + std::to_string(t);
  const hs::Sae made = make_sae("blocks.1.hook_resid_pre", "blocks.1.hook_resid_pre", 64, 21);
  const std::filesystem::path dir = write_saelens_folder(made, "cli_sae");
  const hs::SaeSet set = hs::load_sae_folder(dir);
  REQUIRE(set.saes.size() == 1);
  const hs::Sae& sae = set.saes[0];
  const auto plain = run(tokens);
  const hs::SaeRun expected = hs::run_sae(*plain, sae);
  REQUIRE((expected.feature_acts.array() > 0).count() > 0);

  const std::filesystem::path out = hs::test::scratch_dir() / "cli_features.npz";
  const auto r = hs::test::run_cli("features --sae " + hs::test::quote(dir.string()) + " --tokens " + ids + " -o " +
                                   hs::test::quote(out.string()));
  INFO(r.err);
  REQUIRE(r.code == 0);
  auto npz = read_npz_map(out);
  const auto n = static_cast<int64_t>(tokens.size());
  CHECK(npz["sae_in"].shape == std::vector<int64_t>{n, sae.d_in});
  CHECK(npz["feature_acts"].shape == std::vector<int64_t>{n, sae.d_sae});
  CHECK(npz["sae_out"].shape == std::vector<int64_t>{n, sae.d_out});
  CHECK(npz["sae_in"].data == flat(hs::hook_rows(*plain, "blocks.1.hook_resid_pre")));
  CHECK(npz["feature_acts"].data == flat(expected.feature_acts));
  CHECK(npz["sae_out"].data == flat(expected.sae_out));
  CHECK(npz["tokens"].data == std::vector<float>(tokens.begin(), tokens.end()));
  const hs::SaeQuality q = hs::sae_quality(builtin()->weights(), tokens, sae);
  CHECK(npz["explained_variance"].data == std::vector<float>{static_cast<float>(q.explained_variance)});
  CHECK(npz["loss_spliced"].data == std::vector<float>{static_cast<float>(q.loss_spliced)});

  // run --sae with no edit: the plain run's file; with an edit: the library's spliced run.
  const std::filesystem::path a = hs::test::scratch_dir() / "cli_plain.npz", b = hs::test::scratch_dir() / "cli_spliced.npz",
                              c = hs::test::scratch_dir() / "cli_edited.npz";
  const std::string sae_arg = " --sae " + hs::test::quote(dir.string()) + " --tokens " + ids;
  REQUIRE(hs::test::run_cli("run --tokens " + ids + " -o " + hs::test::quote(a.string())).code == 0);
  REQUIRE(hs::test::run_cli("run" + sae_arg + " -o " + hs::test::quote(b.string())).code == 0);
  CHECK(hs::test::read_text(a) == hs::test::read_text(b));
  const auto [latent, pos] = an_active_latent(expected.feature_acts, 4);
  const auto edited = hs::test::run_cli("run" + sae_arg + " --sae-edit " + std::to_string(latent) + ":zero@" +
                                        std::to_string(pos) + " -o " + hs::test::quote(c.string()));
  INFO(edited.err);
  REQUIRE(edited.code == 0);
  const auto spliced = run(tokens, hs::splice_sae(std::make_shared<const hs::Sae>(sae), *builtin()->weights(),
                                                  {.error_term = true, .edits = {{latent, LatentEdit::Kind::Zero, 0.0f, pos}}}));
  npz = read_npz_map(c);
  CHECK(npz["blocks.1.hook_resid_pre"].data == flat(hs::hook_rows(*spliced, "blocks.1.hook_resid_pre")));
  CHECK(npz["logits"].data == spliced->get("logits").data);
  CHECK(npz["blocks.1.hook_resid_pre"].data != flat(hs::hook_rows(*plain, "blocks.1.hook_resid_pre")));

  // Refusals: an SAE of another model, an edit without an SAE, a latent out of range.
  CHECK(hs::test::run_cli("features --model " + hs::test::quote(hs::test::fixture_model("llama_gqa").string()) +
                          " --sae " + hs::test::quote(dir.string()) + " --tokens 1,2 -o " + hs::test::quote(out.string() + "x.npz"))
            .err.find("trained on another model") != std::string::npos);
  CHECK(hs::test::run_cli("run --sae-edit 3:zero --tokens 1,2 -o x.npz").code == 2);
  CHECK(hs::test::run_cli("run" + sae_arg + " --sae-edit 64:zero -o x.npz").err.find("latents 0 to 63") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(out.string() + "x.npz"));
}

TEST_CASE("the shipped SAE and transcoders load, fit the built-in model and reconstruct held-out prose") {
  // resources/models/headscope-tiny/saes (tools/train/train_saes.py; SAE_CARD.md has the held-out
  // numbers over 118k positions). One paragraph the model never trained on, as a check that the
  // files and their reading agree with the card: a reading error (a transposed matrix, a missed
  // b_dec) drops explained variance far below these bounds.
  const std::filesystem::path dir = hs::test::source_dir() / "resources/models/headscope-tiny/saes";
  const std::vector<int32_t> tokens = hs::run_text(builtin(), hs::kHeadScoreProse).tokens;
  REQUIRE(tokens.size() > 100);
  for (const std::string name : {"resid_pre_2", "transcoder_0", "transcoder_1", "transcoder_2", "transcoder_3"}) {
    INFO(name);
    const hs::SaeSet set = hs::load_sae_folder(dir / name);
    REQUIRE(set.saes.size() == 1);
    const hs::Sae& sae = set.saes[0];
    hs::check_sae_fits(sae, builtin()->config());
    CHECK(sae.d_sae == 2048);
    const hs::SaeQuality q = hs::sae_quality(builtin()->weights(), tokens, sae);
    INFO("EV " << q.explained_variance << " L0 " << q.l0 << " loss " << q.loss_clean << " -> " << q.loss_spliced);
    CHECK(q.l0 <= 32.0);
    CHECK(q.l0 >= 8.0);
    CHECK(q.explained_variance >= (name == "resid_pre_2" ? 0.8 : 0.7));
    CHECK(q.loss_spliced < q.loss_clean + 0.5);
  }
}
