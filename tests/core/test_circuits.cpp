// QK and OV circuits against the float64 PyTorch reference (tests/fixtures/analyses, from
// tools/reference/hsref.py, which materializes every matrix), and the identities the factored
// computation relies on, checked here against explicitly materialized products.
#include <catch2/catch.hpp>

#include <Eigen/Eigenvalues>
#include <Eigen/SVD>
#include <algorithm>
#include <complex>
#include <nlohmann/json.hpp>

#include "core/analysis/circuits.h"
#include "core/error.h"
#include "core/model/model.h"
#include "core/model/ops.h"
#include "test_support.h"

using namespace hs;
using nlohmann::json;

namespace {

// Tolerance: 1e-4 of each quantity's largest magnitude (as tests/fixtures/README.md defines it);
// the copying score lies in [-1, 1] and is compared to 1e-4 absolute.
constexpr double kRelTol = 1e-4;

json circuits_reference(const std::string& name) {
  return json::parse(test::read_text(test::source_dir() / "tests/fixtures/analyses" / name / "circuits.json"));
}

// max |ref - ours| / max |ref|
double relative(const std::vector<double>& ref, const std::vector<double>& ours) {
  REQUIRE(ref.size() == ours.size());
  double diff = 0.0, scale = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    diff = std::max(diff, std::abs(ref[i] - ours[i]));
    scale = std::max(scale, std::abs(ref[i]));
  }
  return diff / std::max(scale, 1e-30);
}

std::vector<double> reals(const std::vector<std::complex<double>>& v) {
  std::vector<double> out;
  for (const auto& z : v) out.push_back(z.real());
  return out;
}
std::vector<double> imags(const std::vector<std::complex<double>>& v) {
  std::vector<double> out;
  for (const auto& z : v) out.push_back(z.imag());
  return out;
}

// Compares a spectrum with the reference's entry for the same head.
void check_spectrum(const CircuitSpectrum& s, const json& ref) {
  CHECK(relative(ref["qk_singular_values"].get<std::vector<double>>(), s.qk_singular_values) <= kRelTol);
  CHECK(relative(ref["ov_singular_values"].get<std::vector<double>>(), s.ov_singular_values) <= kRelTol);
  // Eigenvalues as sets, both sorted by descending real part, then imaginary part; relative to the
  // largest |lambda|.
  const auto re = ref["ov_eigenvalues_real"].get<std::vector<double>>(), im = ref["ov_eigenvalues_imag"].get<std::vector<double>>();
  double scale = 0.0, diff = 0.0;
  REQUIRE(re.size() == s.ov_eigenvalues.size());
  for (size_t i = 0; i < re.size(); ++i) {
    scale = std::max(scale, std::abs(std::complex<double>(re[i], im[i])));
    diff = std::max(diff, std::abs(std::complex<double>(re[i], im[i]) - s.ov_eigenvalues[i]));
  }
  INFO("eigenvalues: max |diff| " << diff << " of max |lambda| " << scale);
  CHECK(diff / scale <= kRelTol);
  CHECK(std::abs(ref["copying_score"].get<double>() - s.copying_score) <= kRelTol);
}

Eigen::MatrixXd rows_of(const Weights& w, bool unembedding) {
  const ModelConfig& c = w.config();
  Eigen::MatrixXd m(c.d_vocab, c.d_model);
  RowVectorXf row(c.d_model);
  for (int t = 0; t < c.d_vocab; ++t) {
    if (unembedding) w.unembed_row(t, row.data());
    else w.embedding_row(t, row.data());
    m.row(t) = row.cast<double>();
  }
  return m;
}

}  // namespace

TEST_CASE("every head's circuit spectrum matches the float64 reference", "[circuits][fixtures]") {
  for (const char* name : {"f32_prefixed", "f16_plain", "bf16_prefixed"}) {
    DYNAMIC_SECTION(name) {
      const auto model = Model::load(test::fixture_model(name));
      const Weights& w = *model->weights();
      const json ref = circuits_reference(name);
      // Raw token vectors for every head; extended ones (through layer 0's MLP) after layer 0.
      const RowMatrixXf all_raw = copying_scores(w, TokenVectors::Raw);
      const RowMatrixXf all_default = copying_scores(w);
      REQUIRE(all_raw.rows() == model->config().n_layers);
      REQUIRE(all_raw.cols() == model->config().n_heads);
      REQUIRE(ref["heads_extended"].size() == static_cast<size_t>((model->config().n_layers - 1) * model->config().n_heads));
      for (const char* list : {"heads", "heads_extended"})
        for (const json& head : ref[list]) {
          const int l = head["layer"], h = head["head"];
          const TokenVectors vectors = parse_token_vectors(head["vectors"].get<std::string>());
          INFO("L" << l << "H" << h << ", " << to_string(vectors) << " token vectors");
          const CircuitSpectrum s = circuit_spectrum(w, l, h, vectors);
          CHECK(s.vectors == vectors);
          CHECK(s.qk_singular_values.size() == static_cast<size_t>(model->config().d_head));
          check_spectrum(s, head);
          CHECK(copying_score(w, l, h, vectors) == s.copying_score);
          // The shared-product path for every head agrees with the one-head path; the default is raw
          // for layer 0's heads and extended after.
          const RowMatrixXf& all = vectors == TokenVectors::Raw ? all_raw : all_default;
          if (vectors == TokenVectors::Extended || l == 0)
            CHECK(std::abs(all(l, h) - head["copying_score"].get<double>()) <= kRelTol);
          if (l > 0) CHECK(circuit_spectrum(w, l, h).vectors == TokenVectors::Extended);
        }
    }
  }
}

TEST_CASE("prompt circuits match the float64 reference", "[circuits][fixtures]") {
  for (const char* name : {"f32_prefixed", "f16_plain", "bf16_prefixed"}) {
    DYNAMIC_SECTION(name) {
      const auto model = Model::load(test::fixture_model(name));
      const json ref = circuits_reference(name);
      const std::vector<int32_t> tokens = ref["tokens"];
      const int k = ref["top_k"];
      std::vector<json> heads = ref["prompt_heads"];
      heads.push_back(ref["prompt_heads_extended"][0]);
      for (const json& head : heads) {
        const int l = head["layer"], h = head["head"];
        const TokenVectors vectors = parse_token_vectors(head["vectors"].get<std::string>());
        INFO("L" << l << "H" << h << ", " << to_string(vectors) << " token vectors");
        const PromptCircuits p = prompt_circuits(*model->weights(), l, h, tokens, k, vectors);
        CHECK(p.vectors == vectors);
        const int n = static_cast<int>(tokens.size());
        REQUIRE(p.qk_scores.rows() == n);
        std::vector<double> qk_ref, qk_ours;
        for (int i = 0; i < n; ++i)
          for (int j = 0; j < n; ++j) {
            qk_ref.push_back(head["qk_scores"][i][j]);
            qk_ours.push_back(p.qk_scores(i, j));
          }
        CHECK(relative(qk_ref, qk_ours) <= kRelTol);
        std::vector<double> top_ref, top_ours, self_ref, self_ours;
        for (int i = 0; i < n; ++i) {
          for (int j = 0; j < k; ++j) {
            CHECK(p.ov_top_ids[static_cast<size_t>(i * k + j)] == head["ov_top_ids"][i][j].get<int>());
            top_ref.push_back(head["ov_top_logits"][i][j]);
            top_ours.push_back(p.ov_top_logits[static_cast<size_t>(i * k + j)]);
          }
          self_ref.push_back(head["ov_self_logits"][i]);
          self_ours.push_back(p.ov_self_logits[static_cast<size_t>(i)]);
          CHECK(p.ov_self_ranks[static_cast<size_t>(i)] == head["ov_self_ranks"][i].get<int>());
        }
        CHECK(relative(top_ref, top_ours) <= kRelTol);
        CHECK(relative(self_ref, self_ours) <= kRelTol);
      }
    }
  }
}

TEST_CASE("factored singular values equal those of the materialized d_model x d_model product", "[circuits]") {
  const auto model = Model::load(test::fixture_model("full_context"));  // d_head 12, d_model 36
  const ModelConfig& c = model->config();
  for (int l = 0; l < c.n_layers; ++l) {
    for (int h = 0; h < c.n_heads; ++h) {
      INFO("L" << l << "H" << h);
      const HeadFactors f = head_factors(*model->weights(), l, h);
      const CircuitSpectrum s = circuit_spectrum(*model->weights(), l, h);
      const std::pair<Eigen::MatrixXd, const std::vector<double>*> products[] = {
          {f.W_Q * f.W_K.transpose(), &s.qk_singular_values}, {f.W_V * f.W_O, &s.ov_singular_values}};
      for (const auto& [dense, factored] : products) {
        REQUIRE(dense.rows() == c.d_model);
        const Eigen::VectorXd all = Eigen::JacobiSVD<Eigen::MatrixXd>(dense).singularValues();  // [d_model]
        const std::vector<double> head_part(all.data(), all.data() + c.d_head);
        CHECK(relative(head_part, *factored) <= 1e-10);
        // Rank <= d_head: every singular value past the d_head-th is zero up to rounding.
        int nonzero = 0;
        for (Eigen::Index i = 0; i < all.size(); ++i) nonzero += all(i) > 1e-9 * all(0);
        CHECK(nonzero <= c.d_head);
        CHECK(all.tail(c.d_model - c.d_head).maxCoeff() <= 1e-12 * all(0));
      }
    }
  }
}

TEST_CASE("the full OV circuit's eigenvalues come from the d_head x d_head product", "[circuits]") {
  // Materialize W_E W_OV W_U [d_vocab, d_vocab] (291 x 291 here) and compare its eigenvalues of
  // largest magnitude with the factored ones: the nonzero eigenvalues of A B are those of B A.
  const auto model = Model::load(test::fixture_model("f16_plain"));  // an untied unembedding
  const Weights& w = *model->weights();
  const ModelConfig& c = model->config();
  const Eigen::MatrixXd E = rows_of(w, false), U = rows_of(w, true);
  Eigen::VectorXd wf(c.d_model);
  for (int i = 0; i < c.d_model; ++i) wf(i) = w.final_norm_w()[i];
  for (int h : {0, 3}) {
    const HeadFactors f = head_factors(w, 1, h);
    const Eigen::MatrixXd full = E * f.W_V * f.W_O * wf.asDiagonal() * U.transpose();  // [d_vocab, d_vocab]
    const Eigen::VectorXcd ev = Eigen::EigenSolver<Eigen::MatrixXd>(full, false).eigenvalues();
    std::vector<std::complex<double>> all(ev.data(), ev.data() + ev.size());
    std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return std::abs(a) > std::abs(b); });
    std::vector<std::complex<double>> top(all.begin(), all.begin() + c.d_head);
    std::sort(top.begin(), top.end(), [](const auto& a, const auto& b) {
      return a.real() != b.real() ? a.real() > b.real() : a.imag() > b.imag();
    });
    const CircuitSpectrum s = circuit_spectrum(w, 1, h, TokenVectors::Raw);
    INFO("L1H" << h);
    // Not closer: the factored path sums the vocabulary in float32 blocks (a few 1e-6).
    CHECK(relative(reals(top), reals(s.ov_eigenvalues)) <= 1e-5);
    CHECK(relative(imags(top), imags(s.ov_eigenvalues)) <= 1e-5);
    CHECK(std::abs(all[static_cast<size_t>(c.d_head)]) <= 1e-8 * std::abs(all[0]));  // the rest are zero
    std::complex<double> sum = 0.0;
    double abs_sum = 0.0;
    for (const auto& z : all) {
      sum += z;
      abs_sum += std::abs(z);
    }
    CHECK(s.copying_score == Approx(sum.real() / abs_sum).margin(1e-6));
    CHECK(s.copying_score >= -1.0);
    CHECK(s.copying_score <= 1.0);
  }
}

TEST_CASE("circuits refuse heads and tokens the model does not have", "[circuits][errors]") {
  const auto model = Model::load(test::fixture_model("f32_prefixed"));
  const Weights& w = *model->weights();
  CHECK_THROWS_WITH(circuit_spectrum(w, 2, 0), "layer 2 does not exist; the model has 2 layers (0..1).");
  CHECK_THROWS_WITH(circuit_spectrum(w, 0, 4), "head 4 does not exist; the model has 4 heads per layer (0..3).");
  CHECK_THROWS_AS(head_factors(w, -1, 0), Error);
  CHECK_THROWS_WITH(prompt_circuits(w, 0, 0, {290, 291}, 5), "token id 291 is outside the vocabulary (0..290).");
  const PromptCircuits empty = prompt_circuits(w, 0, 0, {}, 5);
  CHECK(empty.qk_scores.size() == 0);
  CHECK(empty.qk_range == 1.0f);
}

TEST_CASE("the extended embedding is the residual stream after layer 0 with layer 0's attention removed", "[circuits]") {
  // With every layer-0 head zero-ablated and no attention bias, layer 0 adds only its MLP's output
  // to the embedding, so normalize(hook_resid_post of layer 0) at a token is that token's extended
  // vector: an independent check through the forward pass (itself checked against the float64
  // reference), for models whose norm (RMSNorm) and MLP (gated) the GPT-2 reference does not cover.
  for (const char* name : {"llama_gqa", "qwen2_bias"}) {
    DYNAMIC_SECTION(name) {
      const auto model = Model::load(test::fixture_model(name));
      const ModelConfig& c = model->config();
      REQUIRE(model->weights()->layer(0).b_O == nullptr);
      const std::vector<int32_t> tokens = {3, 17, 42, 5};
      RunOptions o;
      for (int h = 0; h < c.n_heads; ++h) o.interventions.push_back(zero_ablation(0, h));
      const auto cache = model->run(tokens, o);
      const RowMatrixXf post = cache->resid_post(0);
      for (size_t i = 0; i < tokens.size(); ++i) {
        RowMatrixXf ours;
        token_vectors_block(ours, *model->weights(), tokens[i], 1, TokenVectors::Extended);
        RowMatrixXf expected, row = post.row(static_cast<Eigen::Index>(i));
        const std::vector<float> ones(static_cast<size_t>(c.d_model), 1.0f);
        rmsnorm_forward(expected, nullptr, row, ones.data(), nullptr, c.norm_eps);
        INFO("position " << i);
        CHECK((ours - expected).cwiseAbs().maxCoeff() <= 1e-5f * expected.cwiseAbs().maxCoeff());
        // Normalized: unit root mean square, up to eps.
        CHECK(std::sqrt(ours.squaredNorm() / c.d_model) == Approx(1.0).epsilon(1e-3));
      }
    }
  }
}

TEST_CASE("token vectors: the choice is named, and layer 0 reads the raw embedding", "[circuits][errors]") {
  const auto model = Model::load(test::fixture_model("f32_prefixed"));
  const Weights& w = *model->weights();
  CHECK(resolve_token_vectors(TokenVectors::Default, 0) == TokenVectors::Raw);
  CHECK(resolve_token_vectors(TokenVectors::Default, 1) == TokenVectors::Extended);
  CHECK_THROWS_WITH(circuit_spectrum(w, 0, 1, TokenVectors::Extended),
                    Catch::Contains("layer 0's heads read the raw embedding"));
  CHECK_THROWS_WITH(parse_token_vectors("embedded"), Catch::Contains("use raw (the embedding rows), extended"));
  CHECK(parse_token_vectors("extended") == TokenVectors::Extended);
  CHECK(circuit_spectrum(w, 0, 1).vectors == TokenVectors::Raw);
  CHECK(prompt_circuits(w, 1, 1, {3, 4}, 2).vectors == TokenVectors::Extended);
}
