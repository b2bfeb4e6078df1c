// SAEs and transcoders (core/features/sae.h) against the float64 reference
// (tools/reference/saeref.py) on the fixtures of tests/fixtures/sae: every architecture and config
// variant, max |reference - ours| / max |reference| at most 1e-4 per array, and a latent the
// reference leaves at 0 is exactly 0 here. Then the refusals.
#include <catch2/catch.hpp>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>

#include "core/error.h"
#include "core/features/sae.h"
#include "core/features/sae_config.h"
#include "core/io/npz_reader.h"
#include "core/model/config.h"
#include "core/model/thread_scope.h"
#include "core/tensor/safetensors.h"
#include "test_support.h"

namespace fs = std::filesystem;
using Catch::Matchers::Contains;

namespace {

constexpr double kTolerance = 1e-4;  // of each array's largest magnitude

fs::path sae_fixtures() { return hs::test::source_dir() / "tests/fixtures/sae"; }

// Every fixture folder: the ones holding reference.npz.
std::vector<fs::path> fixture_folders() {
  std::vector<fs::path> out;
  for (const auto& e : fs::recursive_directory_iterator(sae_fixtures()))
    if (e.path().filename() == "reference.npz") out.push_back(e.path().parent_path());
  std::sort(out.begin(), out.end());
  return out;
}

std::map<std::string, hs::Tensor> read_reference(const fs::path& folder) {
  std::map<std::string, hs::Tensor> m;
  for (hs::NpzArray& a : hs::read_npz_file(folder / "reference.npz")) m.emplace(a.name, std::move(a.tensor));
  return m;
}

hs::RowMatrixXf as_matrix(const hs::Tensor& t) {
  REQUIRE(t.shape.size() == 2);
  return hs::ConstMatrixRef(t.data.data(), t.shape[0], t.shape[1]);
}

std::vector<float> as_vector(const hs::RowMatrixXf& m) { return {m.data(), m.data() + m.size()}; }

hs::ModelConfig model_config(const fs::path& folder) { return hs::load_config(folder / "config.json"); }

// A scratch copy of a fixture, to break.
fs::path copy_fixture(const std::string& name) {
  static int counter = 0;
  const fs::path to = hs::test::scratch_dir() / ("sae_" + std::to_string(++counter)) / name;
  fs::remove_all(to);
  fs::create_directories(to.parent_path());
  fs::copy(sae_fixtures() / name, to, fs::copy_options::recursive);
  return to;
}

void write_text(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << text;
}

void edit_json(const fs::path& p, const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json j = nlohmann::json::parse(hs::test::read_text(p));
  edit(j);
  write_text(p, j.dump(2));
}

// Rewrites a safetensors file with `edit` applied to its tensors (F32 bytes).
void edit_weights(const fs::path& p, const std::function<void(std::vector<hs::test::Entry>&)>& edit) {
  std::vector<hs::test::Entry> entries;
  {
    const auto f = hs::SafetensorsFile::open(p);
    for (const auto& t : f->tensors()) {
      const auto raw = f->raw_bytes(t);
      entries.push_back({t.name, t.dtype_text, t.shape, std::string(reinterpret_cast<const char*>(raw.data()), raw.size())});
    }
  }
  edit(entries);
  write_text(p, hs::test::build_safetensors(entries));
}

hs::test::Entry* entry(std::vector<hs::test::Entry>& entries, const std::string& name) {
  for (auto& e : entries)
    if (e.name == name) return &e;
  FAIL("no tensor " << name);
  return nullptr;
}

void set_float(hs::test::Entry& e, size_t i, float v) { std::memcpy(e.bytes.data() + 4 * i, &v, 4); }

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const hs::Error& e) {
    return e.what();
  }
  FAIL("no hs::Error was thrown");
  return "";
}

}  // namespace

TEST_CASE("SAE fixtures: every architecture matches the float64 reference to 1e-4 of its scale", "[sae]") {
  const std::vector<fs::path> folders = fixture_folders();
  REQUIRE(folders.size() >= 19);
  const hs::ModelConfig llama = model_config(hs::test::fixture_model("llama_gqa"));
  for (const fs::path& folder : folders) {
    const std::string rel = fs::relative(folder, sae_fixtures()).string();
    INFO(rel);
    const hs::SaeSet set = hs::load_sae_folder(folder);
    const auto ref = read_reference(folder);
    REQUIRE(!set.saes.empty());
    for (const hs::Sae& sae : set.saes) {
      const std::string suffix = set.saes.size() > 1 ? "_layer" + std::to_string(sae.layer) : "";
      INFO(sae.name << " (" << sae.source_format << " " << sae.architecture << ", " << sae.hook_in << " -> "
                    << sae.hook_out << ")");
      const hs::RowMatrixXf x = as_matrix(ref.at("x" + suffix));
      const hs::SaeRun run = hs::run_sae(sae, x);
      const hs::Tensor& want_acts = ref.at("feature_acts" + suffix);
      const hs::Tensor& want_out = ref.at("sae_out" + suffix);
      const auto acts = hs::test::compare(want_acts.data, as_vector(run.feature_acts));
      const auto out = hs::test::compare(want_out.data, as_vector(run.sae_out));
      std::printf("sae fixture %-55s feature_acts max diff %.2e (rel %.2e), sae_out max diff %.2e (rel %.2e)\n",
                  (rel + (suffix.empty() ? "" : " " + sae.name)).c_str(), acts.max_abs, acts.relative, out.max_abs,
                  out.relative);
      CHECK(acts.relative <= kTolerance);
      CHECK(out.relative <= kTolerance);
      // Inactive latents exactly 0, and the same latents active as in the reference.
      int mismatched = 0;
      for (size_t i = 0; i < want_acts.data.size(); ++i)
        mismatched += (want_acts.data[i] == 0.0f) != (run.feature_acts.data()[i] == 0.0f);
      CHECK(mismatched == 0);
      CHECK(run.sae_in == x);
      // The naive encoder agrees with the fast one.
      const auto naive = hs::test::compare(as_vector(hs::sae_encode_naive(sae, x)), as_vector(run.feature_acts));
      CHECK(naive.relative <= 1e-5);
      // Every fixture is sized for llama_gqa.
      CHECK_NOTHROW(hs::check_sae_fits(sae, llama));
    }
  }
}

TEST_CASE("SAE loading: what each format says, in HeadScope's names", "[sae]") {
  const auto one = [](const std::string& name) { return hs::load_sae_folder(sae_fixtures() / name).saes.at(0); };
  const hs::Sae standard = one("standard");
  CHECK(standard.source_format == "saelens v6");
  CHECK(standard.architecture == "standard");
  CHECK(standard.hook_in == "blocks.1.hook_resid_pre");
  CHECK(standard.hook_out == standard.hook_in);
  CHECK_FALSE(standard.is_transcoder());
  CHECK(standard.layer == 1);
  CHECK(standard.apply_b_dec_to_input);
  CHECK((standard.d_in == 32 && standard.d_sae == 64 && standard.d_out == 32));

  const hs::Sae legacy = one("legacy");
  CHECK(legacy.source_format == "saelens legacy");
  CHECK(legacy.hook_in == "blocks.0.hook_resid_pre");
  CHECK(legacy.apply_b_dec_to_input);  // handle_pre_6_0_config's default
  const hs::Sae legacy_topk = one("legacy_topk");
  CHECK(legacy_topk.architecture == "topk");
  CHECK(legacy_topk.k == 6);

  const hs::Sae jt = one("jumprelu_transcoder");
  CHECK(jt.is_transcoder());
  CHECK(jt.hook_in == "blocks.1.ln2.hook_normalized");  // written mlp.hook_in
  CHECK(jt.hook_out == "blocks.1.hook_mlp_out");
  CHECK_FALSE(jt.apply_b_dec_to_input);

  CHECK(one("hook_z").hook_z);
  CHECK(one("topk_rescale").rescale_acts_by_decoder_norm);

  const hs::SaeSet ct = hs::load_sae_folder(sae_fixtures() / "ct_list_topk");
  REQUIRE(ct.saes.size() == 2);
  CHECK(ct.saes[0].name == "layer_0");
  CHECK(ct.saes[1].layer == 1);
  CHECK(ct.saes[0].source_format == "circuit-tracer");
  CHECK(ct.saes[0].architecture == "topk");
  CHECK(ct.saes[0].k == 8);
  CHECK_FALSE(ct.saes[0].relu_after);
  CHECK(ct.saes[0].hook_in == "blocks.0.ln2.hook_normalized");
  CHECK(ct.saes[1].hook_out == "blocks.1.hook_mlp_out");
  CHECK(ct.saes[0].hook_out_before_post_norm);
  CHECK(ct.saes[0].W_skip.rows() == 32);
  CHECK(ct.saes[1].W_skip.size() == 0);

  const hs::SaeSet files = hs::load_sae_folder(sae_fixtures() / "ct_layer_files");
  REQUIRE(files.saes.size() == 2);
  CHECK(files.saes[0].architecture == "jumprelu");
  CHECK(files.saes[1].W_skip.size() == 32 * 32);
  CHECK(hs::load_sae_folder(sae_fixtures() / "ct_legacy_list_relu").saes[1].hook_in == "blocks.1.hook_resid_mid");

  const hs::Sae gs = one("gemma_scope/gemma-scope-tiny-pt-res/layer_1/width_48");
  CHECK(gs.source_format == "gemma-scope npz");
  CHECK(gs.architecture == "jumprelu");
  CHECK(gs.hook_in == "blocks.1.hook_resid_post");
  CHECK_FALSE(gs.apply_b_dec_to_input);
}

TEST_CASE("SAE decoder: sae_decode, the output scale and the decoder product agree with the decoder", "[sae]") {
  // sae_out is linear in the latents at a position: sae_out(a + h e_i) - sae_out(a) = h * s_p *
  // (W_dec[i] / |W_dec[i]| under rescale), which sae_decoder_times and sae_output_scale describe.
  for (const char* name : {"layer_norm", "constant_norm_rescale", "topk_rescale", "skip_transcoder", "transcoder"}) {
    INFO(name);
    const hs::Sae sae = hs::load_sae_folder(sae_fixtures() / name).saes.at(0);
    const auto ref = read_reference(sae_fixtures() / name);
    const hs::RowMatrixXf x = as_matrix(ref.at("x"));
    const hs::SaeRun run = hs::run_sae(sae, x);
    CHECK(hs::sae_decode(sae, run.feature_acts, x) == run.sae_out);
    hs::RowMatrixXf g = hs::RowMatrixXf::Random(x.rows(), sae.d_out);
    const hs::RowMatrixXf jt = hs::sae_decoder_times(sae, g);  // [pos, d_sae]
    const hs::VectorXf s = hs::sae_output_scale(sae, x);
    for (int latent : {0, 7, sae.d_sae - 1}) {
      hs::RowMatrixXf bumped = run.feature_acts;
      bumped.col(latent).array() += 1.0f;
      const hs::RowMatrixXf diff = hs::sae_decode(sae, bumped, x) - run.sae_out;
      for (Eigen::Index p = 0; p < x.rows(); ++p) {
        const double want = g.row(p).cast<double>().dot(diff.row(p).cast<double>());
        CHECK(std::abs(want - s(p) * jt(p, latent)) <= 1e-3 * (1 + std::abs(want)));
      }
    }
    CHECK(hs::sae_decoder_row(sae, 3) == sae.W_dec.row(3));
  }
}

TEST_CASE("SAE loading refuses what it cannot honour, naming the file and the field", "[sae]") {
  SECTION("no such folder, a file, a folder without an SAE") {
    const fs::path none = hs::test::scratch_dir() / "sae_nope";
    CHECK_THROWS_WITH(hs::load_sae_folder(none), Contains("no such folder"));
    CHECK_THROWS_WITH(hs::load_sae_folder(sae_fixtures() / "standard/cfg.json"), Contains("is a file, not a folder"));
    const fs::path empty = hs::test::scratch_dir() / "sae_empty";
    fs::create_directories(empty);
    CHECK_THROWS_WITH(hs::load_sae_folder(empty), Contains("holds no cfg.json (SAELens), config.yaml"));
  }
  SECTION("missing weights") {
    const fs::path d = copy_fixture("standard");
    fs::remove(d / "sae_weights.safetensors");
    CHECK_THROWS_WITH(hs::load_sae_folder(d), Contains("sae_weights.safetensors: is missing"));
  }
  SECTION("an unknown architecture") {
    const fs::path d = copy_fixture("standard");
    edit_json(d / "cfg.json", [](nlohmann::json& j) { j["architecture"] = "sparse_magic"; });
    CHECK_THROWS_WITH(hs::load_sae_folder(d), Contains("\"architecture\" is \"sparse_magic\"") &&
                                                   Contains("cfg.json"));
  }
  SECTION("a tensor of the wrong shape") {
    const fs::path d = copy_fixture("standard");
    edit_json(d / "cfg.json", [](nlohmann::json& j) { j["d_sae"] = 50; });
    CHECK_THROWS_WITH(hs::load_sae_folder(d),
                      Contains("tensor \"W_enc\" has shape [32, 64], expected [d_in, d_sae] = [32, 50]"));
  }
  SECTION("a missing tensor, an unexpected one, a NaN") {
    fs::path d = copy_fixture("jumprelu");
    edit_weights(d / "sae_weights.safetensors", [](auto& e) { e.erase(e.begin() + 2); });  // sorted: W_dec W_enc b_dec b_enc threshold
    CHECK_THROWS_WITH(hs::load_sae_folder(d), Contains("has no tensor \"b_dec\""));
    d = copy_fixture("standard");
    edit_weights(d / "sae_weights.safetensors", [](auto& e) { e.push_back({"W_mystery", "F32", {1}, std::string(4, '\0')}); });
    CHECK_THROWS_WITH(hs::load_sae_folder(d), Contains("has a tensor \"W_mystery\" that a SAELens standard does not have"));
    d = copy_fixture("standard");
    edit_weights(d / "sae_weights.safetensors", [](auto& e) { set_float(*entry(e, "b_enc"), 5, std::nanf("")); });
    CHECK_THROWS_WITH(hs::load_sae_folder(d), Contains("tensor \"b_enc\" holds NaN at element 5"));
  }
  SECTION("a legacy scaling_factor that is not 1") {
    const fs::path d = copy_fixture("legacy");
    edit_weights(d / "sae_weights.safetensors", [](auto& e) { set_float(*entry(e, "scaling_factor"), 3, 2.0f); });
    CHECK_THROWS_WITH(hs::load_sae_folder(d), Contains("scaling_factor[3] is 2, not 1"));
  }
  SECTION("an unknown normalize_activations, reshape, activation_fn; a transcoder subtracting b_dec") {
    fs::path d = copy_fixture("standard");
    edit_json(d / "cfg.json", [](nlohmann::json& j) { j["normalize_activations"] = "batch_norm"; });
    CHECK_THROWS_WITH(hs::load_sae_folder(d), Contains("\"normalize_activations\" is \"batch_norm\""));
    d = copy_fixture("legacy");
    edit_json(d / "cfg.json", [](nlohmann::json& j) { j["activation_fn_str"] = "tanh-relu"; });
    CHECK_THROWS_WITH(hs::load_sae_folder(d), Contains("\"activation_fn\" is \"tanh-relu\""));
    d = copy_fixture("standard");
    edit_json(d / "cfg.json", [](nlohmann::json& j) { j["reshape_activations"] = "hook_z"; });
    CHECK_THROWS_WITH(hs::load_sae_folder(d), Contains("SAELens reshapes only attn.hook_z"));
    d = copy_fixture("transcoder");
    edit_json(d / "cfg.json", [](nlohmann::json& j) { j["apply_b_dec_to_input"] = true; });
    CHECK_THROWS_WITH(hs::load_sae_folder(d), Contains("refuses for transcoders"));
    d = copy_fixture("transcoder");
    edit_json(d / "cfg.json", [](nlohmann::json& j) { j["metadata"].erase("hook_name_out"); });
    CHECK_THROWS_WITH(hs::load_sae_folder(d), Contains("metadata.hook_name_out"));
    d = copy_fixture("standard");
    edit_json(d / "cfg.json", [](nlohmann::json& j) { j["metadata"]["hook_name"] = "blocks.1.hook_nonsense"; });
    CHECK_THROWS_WITH(hs::load_sae_folder(d), Contains("\"blocks.1.hook_nonsense\" is not a TransformerLens hook"));
    d = copy_fixture("topk");
    edit_json(d / "cfg.json", [](nlohmann::json& j) { j["k"] = 65; });
    CHECK_THROWS_WITH(hs::load_sae_folder(d), Contains("\"k\" is 65, more than the 64 latents"));
    d = copy_fixture("standard");
    write_text(d / "cfg.json", "{\"d_in\": 32,");
    CHECK_THROWS_WITH(hs::load_sae_folder(d), Contains("cfg.json: not valid JSON"));
  }
  SECTION("transcoder sets: bad YAML, a Hub path, a file outside the folder, a missing layer") {
    fs::path d = copy_fixture("ct_layer_files");
    write_text(d / "config.yaml", "model_kind: transcoder_set\nfeature_input_hook: [unclosed\n");
    CHECK_THROWS_WITH(hs::load_sae_folder(d), Contains("config.yaml: not valid YAML"));
    d = copy_fixture("ct_list_topk");
    write_text(d / "config.yaml", "feature_input_hook: mlp.hook_in\nfeature_output_hook: mlp.hook_out\n"
                                  "transcoders:\n  - hf://org/repo/layer_0.safetensors\n");
    CHECK_THROWS_WITH(hs::load_sae_folder(d), Contains("on the Hugging Face Hub"));
    write_text(d / "config.yaml", "feature_input_hook: mlp.hook_in\nfeature_output_hook: mlp.hook_out\n"
                                  "transcoders:\n  - ../elsewhere.safetensors\n");
    CHECK_THROWS_WITH(hs::load_sae_folder(d), Contains("must be files inside the folder"));
    write_text(d / "config.yaml", "feature_input_hook: mlp.hook_in\nfeature_output_hook: mlp.hook_out\n"
                                  "activation: topk\ntranscoders:\n  - weights/tc_0.safetensors\n");
    CHECK_THROWS_WITH(hs::load_sae_folder(d), Contains("activation is topk but k is missing"));
    d = copy_fixture("ct_layer_files");
    fs::rename(d / "layer_1.safetensors", d / "layer_2.safetensors");
    CHECK_THROWS_WITH(hs::load_sae_folder(d), Contains("has no layer_1.safetensors"));
    d = copy_fixture("ct_layer_files");
    write_text(d / "config.yaml", "model_kind: cross_layer_transcoder\nfeature_input_hook: x\nfeature_output_hook: y\n");
    CHECK_THROWS_WITH(hs::load_sae_folder(d), Contains("cross_layer_transcoder"));
  }
}

TEST_CASE("SAE fit: the hook must exist in the model with the SAE's width", "[sae]") {
  const hs::ModelConfig tiny = model_config(hs::test::source_dir() / "resources/models/headscope-tiny");
  const hs::ModelConfig llama = model_config(hs::test::fixture_model("llama_gqa"));
  const hs::Sae standard = hs::load_sae_folder(sae_fixtures() / "standard").saes.at(0);
  CHECK(message_of([&] { hs::check_sae_fits(standard, tiny); }) ==
        "the SAE standard reads blocks.1.hook_resid_pre with d_in = 32, but this model's blocks.1.hook_resid_pre has "
        "256 values per position: the SAE was trained on another model.");
  hs::Sae far = standard;
  far.hook_in = far.hook_out = "blocks.7.hook_resid_pre";
  CHECK_THROWS_WITH(hs::check_sae_fits(far, llama), Contains("which is not a hook of this model (2 layers"));
  // hook_z: n_heads * d_head, flattened.
  const hs::Sae z = hs::load_sae_folder(sae_fixtures() / "hook_z").saes.at(0);
  CHECK_THROWS_WITH(hs::check_sae_fits(z, tiny), Contains("256 values per position (n_heads x d_head)"));
  // circuit-tracer's mlp.hook_out on a model with a post-MLP norm (Gemma 2).
  hs::ModelConfig gemma = model_config(hs::test::fixture_model("gemma2_window"));
  hs::Sae ct = hs::load_sae_folder(sae_fixtures() / "ct_list_topk").saes.at(0);
  ct.d_in = ct.d_out = gemma.d_model;
  CHECK_THROWS_WITH(hs::check_sae_fits(ct, gemma), Contains("before its post-MLP norm"));
}

TEST_CASE("SAE TopK keeps exactly k latents per position, ties to the lower index", "[sae]") {
  hs::Sae s;
  s.name = "tie";
  s.d_in = 2;
  s.d_sae = 5;
  s.d_out = 2;
  s.activation = hs::SaeActivation::TopK;
  s.k = 2;
  s.relu_after = false;
  s.W_enc = hs::RowMatrixXf::Zero(2, 5);
  s.b_enc = hs::RowVectorXf::Constant(5, -1.0f);  // five equal pre-activations, all negative
  s.b_dec = hs::RowVectorXf::Zero(2);
  s.W_dec = hs::RowMatrixXf::Ones(5, 2);
  s.W_dec_norm = s.W_dec.rowwise().norm().transpose();
  const hs::RowMatrixXf x = hs::RowMatrixXf::Zero(3, 2);
  const hs::RowMatrixXf a = hs::sae_encode(s, x);
  for (Eigen::Index p = 0; p < 3; ++p) {
    CHECK(a(p, 0) == -1.0f);
    CHECK(a(p, 1) == -1.0f);
    CHECK((a.row(p).tail(3).array() == 0.0f).all());
  }
  CHECK(hs::sae_encode_naive(s, x) == a);
}

TEST_CASE("SAE encoder: a product large enough to share among threads gives the same bits on one or two, "
          "and matches the naive encoder",
          "[sae]") {
  // 48 positions x 64 x 4000 latents: over the size at which sae_encode splits the latents among
  // the calling thread's OpenMP team (and not a multiple of its 512-latent blocks).
  for (const hs::SaeActivation activation : {hs::SaeActivation::Relu, hs::SaeActivation::TopK}) {
    hs::Sae s;
    s.name = "wide";
    s.d_in = 64;
    s.d_sae = 4000;
    s.d_out = 64;
    s.activation = activation;
    s.k = 37;
    s.W_enc = hs::RowMatrixXf::Random(s.d_in, s.d_sae);
    s.b_enc = hs::RowVectorXf::Random(s.d_sae) * 0.5f;
    s.b_dec = hs::RowVectorXf::Random(s.d_out) * 0.1f;
    s.W_dec = hs::RowMatrixXf::Random(s.d_sae, s.d_out);
    s.W_dec_norm = s.W_dec.rowwise().norm().transpose();
    const hs::RowMatrixXf x = hs::RowMatrixXf::Random(48, s.d_in);
    hs::RowMatrixXf one, two;
    {
      hs::ThreadScope t(1);
      one = hs::sae_encode(s, x);
    }
    {
      hs::ThreadScope t(2);
      two = hs::sae_encode(s, x);
    }
    CHECK(one == two);
    const hs::RowMatrixXf naive = hs::sae_encode_naive(s, x);
    CHECK((naive - two).cwiseAbs().maxCoeff() <= 1e-4f * naive.cwiseAbs().maxCoeff());
    if (activation == hs::SaeActivation::TopK)
      for (Eigen::Index p = 0; p < x.rows(); ++p) CHECK((two.row(p).array() != 0.0f).count() <= s.k);
  }
}
