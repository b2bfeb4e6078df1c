// The backward pass (core/model/backward.h): each operation's backward against finite
// differences, the whole pass against the tape reference (backward_reference.h) on every fixture
// family and every metric kind, and against finite differences of the model itself through an
// added vector at a hook (the edit mechanism).
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "backward_reference.h"
#include "core/error.h"
#include "core/model/backward.h"
#include "core/model/forward.h"
#include "core/model/llama2c.h"
#include "core/model/model.h"
#include "core/model/ops.h"
#include "test_support.h"

using namespace hs;
namespace fs = std::filesystem;
using fs_path_t = std::filesystem::path;

namespace {

RowMatrixXf random_matrix(Eigen::Index r, Eigen::Index c, std::mt19937& rng, float sd = 1.0f) {
  std::normal_distribution<float> n(0.0f, sd);
  RowMatrixXf m(r, c);
  for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = n(rng);
  return m;
}

// Checks an analytic gradient of L(x) = sum(f(x) * r) element by element against central
// differences: |fd - analytic| <= 2e-2 * max|analytic| + 2e-3.
void check_gradient(const std::function<double(const RowMatrixXf&)>& L, RowMatrixXf x, const RowMatrixXf& analytic,
                    float eps = 1e-2f) {
  REQUIRE(analytic.rows() == x.rows());
  REQUIRE(analytic.cols() == x.cols());
  const double scale = analytic.cwiseAbs().maxCoeff();
  double worst = 0;
  for (Eigen::Index i = 0; i < x.size(); ++i) {
    const float saved = x.data()[i];
    x.data()[i] = saved + eps;
    const double up = L(x);
    x.data()[i] = saved - eps;
    const double down = L(x);
    x.data()[i] = saved;
    const double fd = (up - down) / (2.0 * eps);
    worst = std::max(worst, std::abs(fd - analytic.data()[i]) - 2e-2 * scale);
  }
  INFO("largest |analytic| " << scale);
  CHECK(worst <= 2e-3);
}

double weighted_sum(const RowMatrixXf& y, const RowMatrixXf& r) { return (y.cast<double>().array() * r.cast<double>().array()).sum(); }

std::vector<float> backward_random_vector(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

}  // namespace

TEST_CASE("each operation's backward equals finite differences", "[backward][ops]") {
  std::mt19937 rng(11);
  const Eigen::Index S = 4, D = 6;
  std::vector<float> w = backward_random_vector(D, rng), b = backward_random_vector(D, rng);
  for (NormKind kind : {NormKind::LayerNorm, NormKind::RMSNorm}) {
    DYNAMIC_SECTION("norm " << to_string(kind)) {
      const RowMatrixXf x = random_matrix(S, D, rng), r = random_matrix(S, D, rng), rs = random_matrix(S, 1, rng);
      // L = sum(y * r) + sum(scale * rs): the scale's own seed flows too (hook_scale).
      auto L = [&](const RowMatrixXf& xx) {
        RowMatrixXf y;
        VectorXf s;
        norm_forward(y, &s, xx, w.data(), b.data(), 1e-5f, kind);
        return weighted_sum(y, r) + (s.cast<double>().array() * rs.col(0).cast<double>().array()).sum();
      };
      RowMatrixXf dx;
      VectorXf d_scale;
      norm_backward(dx, &d_scale, r, x, w.data(), 1e-5f, kind, rs.data());
      check_gradient(L, x, dx);
      // With no output gradient, only the scale's seed.
      auto Ls = [&](const RowMatrixXf& xx) {
        RowMatrixXf y;
        VectorXf s;
        norm_forward(y, &s, xx, w.data(), b.data(), 1e-5f, kind);
        return (s.cast<double>().array() * rs.col(0).cast<double>().array()).sum();
      };
      norm_backward(dx, &d_scale, RowMatrixXf(), x, w.data(), 1e-5f, kind, rs.data());
      check_gradient(Ls, x, dx);
      CHECK(d_scale.isApprox(rs.col(0)));
    }
  }
  for (Activation act : {Activation::GeluNew, Activation::GeluErf, Activation::Relu, Activation::Silu}) {
    DYNAMIC_SECTION("activation " << static_cast<int>(act)) {
      RowMatrixXf x = random_matrix(3, 5, rng, 2.0f);
      for (Eigen::Index i = 0; i < x.size(); ++i)
        if (std::abs(x.data()[i]) < 0.05f) x.data()[i] = 0.3f;  // away from relu's kink
      const RowMatrixXf r = random_matrix(3, 5, rng);
      auto L = [&](const RowMatrixXf& xx) {
        RowMatrixXf y;
        activation_forward(y, xx, act);
        return weighted_sum(y, r);
      };
      RowMatrixXf dx;
      activation_backward(dx, r, x, act);
      check_gradient(L, x, dx, 1e-3f);
      // The gated form: both inputs.
      const RowMatrixXf up = random_matrix(3, 5, rng);
      RowMatrixXf d_gate, d_up;
      gated_activation_backward(d_gate, d_up, r, x, up, act);
      check_gradient([&](const RowMatrixXf& g) { RowMatrixXf y; gated_activation_forward(y, g, up, act); return weighted_sum(y, r); },
                     x, d_gate, 1e-3f);
      check_gradient([&](const RowMatrixXf& u) { RowMatrixXf y; gated_activation_forward(y, x, u, act); return weighted_sum(y, r); },
                     up, d_up, 1e-3f);
    }
  }
  SECTION("rotary, full and partial") {
    for (int dim : {8, 4}) {
      RotaryParams p;
      p.dim = dim;
      p.base = 100.0;
      RowMatrixXf cos, sin;
      rotary_tables(cos, sin, rotary_inv_freq(p), 0, S);
      const RowMatrixXf x = random_matrix(S, 2 * 8, rng), r = random_matrix(S, 2 * 8, rng);
      auto L = [&](const RowMatrixXf& xx) {
        RowMatrixXf y = xx;
        rotary_forward(y, 2, 8, dim, cos, sin);
        return weighted_sum(y, r);
      };
      RowMatrixXf d = r;
      rotary_backward(d, 2, 8, dim, cos, sin);
      check_gradient(L, x, d);
    }
  }
  SECTION("linear, float32 and bf16 panels, a row range of W") {
    const int64_t K = 12, N = 20;
    const RowMatrixXf Wf = random_matrix(K, N, rng);
    std::vector<uint16_t> w16(static_cast<size_t>(K * N));
    RowMatrixXf W16f(K, N);
    for (int64_t i = 0; i < K * N; ++i) {
      uint32_t bits;
      std::memcpy(&bits, Wf.data() + i, 4);
      w16[static_cast<size_t>(i)] = static_cast<uint16_t>(bits >> 16);
      bits = uint32_t{w16[static_cast<size_t>(i)]} << 16;
      std::memcpy(W16f.data() + i, &bits, 4);
    }
    const PackedMatrix P32 = PackedMatrix::from_rows(Wf.data(), K, N, N);
    const PackedMatrix P16 = PackedMatrix::from_rows(PanelType::BF16, w16.data(), K, N, N);
    const RowMatrixXf dy = random_matrix(3, N, rng);
    for (const auto& PW : {std::pair<const PackedMatrix*, const RowMatrixXf*>{&P32, &Wf}, {&P16, &W16f}}) {
      const PackedMatrix* P = PW.first;  // named copies: clang before 16 cannot capture a binding
      const RowMatrixXf* W = PW.second;
      RowMatrixXf dx;
      linear_backward_input(dx, dy, *P, 4, 10);
      const RowMatrixXf expect = dy * W->middleRows(4, 6).transpose();
      CHECK((dx - expect).cwiseAbs().maxCoeff() <= 1e-5f * expect.cwiseAbs().maxCoeff());
      // accumulate adds
      linear_backward_input(dx, dy, *P, 4, 10, true);
      CHECK((dx - 2 * expect).cwiseAbs().maxCoeff() <= 2e-5f * expect.cwiseAbs().maxCoeff());
      // and it is the derivative of the forward product
      auto L = [&](const RowMatrixXf& xx) {
        RowMatrixXf y;
        linear_forward(y, xx, *P, nullptr);
        return weighted_sum(y, dy);
      };
      RowMatrixXf full;
      linear_backward_input(full, dy, *P, 0, K);
      check_gradient(L, random_matrix(3, K, rng), full);
    }
  }
  SECTION("softmax and causal attention with shared key/value heads") {
    ModelConfig c;
    c.n_heads = 4;
    c.n_key_value_heads = 2;
    c.d_head = 3;
    const Eigen::Index T = 5;
    const float scale = 0.7f;
    const RowMatrixXf q = random_matrix(T, 12, rng), k = random_matrix(T, 6, rng), v = random_matrix(T, 6, rng);
    const RowMatrixXf rz = random_matrix(T, 12, rng);
    // The attention forward written out here: softmax over keys 0..i, z = pattern @ v.
    auto attend = [&](const RowMatrixXf& qq, const RowMatrixXf& kk, const RowMatrixXf& vv, RowMatrixXf* pattern) {
      RowMatrixXf z = RowMatrixXf::Zero(T, 12);
      if (pattern) pattern->setZero(4 * T, T);
      for (int h = 0; h < 4; ++h) {
        const int kv = c.kv_head(h);
        for (Eigen::Index i = 0; i < T; ++i) {
          RowVectorXf s = (qq.row(i).segment(h * 3, 3) * kk.middleCols(kv * 3, 3).topRows(i + 1).transpose()) * scale;
          s = (s.array() - s.maxCoeff()).exp();
          s /= s.sum();
          if (pattern) pattern->row(h * T + i).head(i + 1) = s;
          z.row(i).segment(h * 3, 3) = s * vv.middleCols(kv * 3, 3).topRows(i + 1);
        }
      }
      return z;
    };
    RowMatrixXf pattern;
    attend(q, k, v, &pattern);
    RowMatrixXf dq, dk, dv, dp, ds;
    AttentionBackward io;
    io.d_z = &rz;
    io.d_pattern = &dp;
    io.d_scores = &ds;
    attention_backward(dq, dk, dv, q, k, v, pattern, c, scale, io);
    check_gradient([&](const RowMatrixXf& x) { return weighted_sum(attend(x, k, v, nullptr), rz); }, q, dq);
    check_gradient([&](const RowMatrixXf& x) { return weighted_sum(attend(q, x, v, nullptr), rz); }, k, dk);
    check_gradient([&](const RowMatrixXf& x) { return weighted_sum(attend(q, k, x, nullptr), rz); }, v, dv);
    // Masked scores get 0; the pattern's gradient is d_z . v over every key (TransformerLens).
    for (int h = 0; h < 4; ++h)
      for (Eigen::Index i = 0; i < T; ++i)
        for (Eigen::Index j = 0; j < T; ++j) {
          if (j > i) CHECK(ds(h * T + i, j) == 0.0f);
          const float expect = rz.row(i).segment(h * 3, 3).dot(v.row(j).segment(c.kv_head(h) * 3, 3));
          CHECK(dp(h * T + i, j) == Approx(expect).margin(1e-5));
        }
  }
  SECTION("per-head RMSNorm (q/k norm) with its scales' seed, and soft-capping") {
    const int heads = 3, dh = 4;
    const std::vector<float> wh = backward_random_vector(dh, rng);
    const RowMatrixXf x = random_matrix(S, heads * dh, rng), r = random_matrix(S, heads * dh, rng);
    const RowMatrixXf rs = random_matrix(S, heads, rng);
    auto L = [&](const RowMatrixXf& xx) {
      RowMatrixXf y = xx, scales;
      head_rmsnorm_forward(y, heads, dh, wh.data(), 1e-6f, &scales);
      return weighted_sum(y, r) + weighted_sum(scales, rs);
    };
    RowMatrixXf dx, d_scales;
    head_rmsnorm_backward(dx, &d_scales, r, x, heads, dh, wh.data(), 1e-6f, rs.data());
    check_gradient(L, x, dx);
    REQUIRE(d_scales.rows() == S);
    REQUIRE(d_scales.cols() == heads);
    // The scale's own gradient: the seed minus sum_j d_y w x / s^2 of its head (norm_backward's d_s).
    for (Eigen::Index i = 0; i < S; ++i)
      for (int h = 0; h < heads; ++h) {
        const RowVectorXf xs = x.row(i).segment(h * dh, dh);
        const double sc = std::sqrt(xs.squaredNorm() / dh + 1e-6);
        double dot = 0;
        for (int j = 0; j < dh; ++j) dot += double{r(i, h * dh + j)} * wh[static_cast<size_t>(j)] * xs(j);
        CHECK(d_scales(i, h) == Approx(rs(i, h) - dot / (sc * sc)).epsilon(1e-4).margin(1e-5));
      }
    const float cap = 1.5f;
    const RowMatrixXf y0 = random_matrix(2, 7, rng, 3.0f), ry = random_matrix(2, 7, rng);
    auto Lc = [&](const RowMatrixXf& xx) {
      RowMatrixXf y = xx;
      softcap_forward(y.data(), y.size(), cap);
      return weighted_sum(y, ry);
    };
    RowMatrixXf capped = y0, d = ry;
    softcap_forward(capped.data(), capped.size(), cap);
    softcap_backward(d.data(), capped.data(), d.size(), cap);
    check_gradient(Lc, y0, d, 1e-3f);
  }
  SECTION("attention under a sliding window and a soft-cap") {
    ModelConfig c;
    c.n_heads = 2;
    c.n_key_value_heads = 1;
    c.d_head = 3;
    const Eigen::Index T = 6;
    const int window = 3;
    const float scale = 0.8f, cap = 1.2f;
    const RowMatrixXf q = random_matrix(T, 6, rng, 2.0f), k = random_matrix(T, 3, rng, 2.0f), v = random_matrix(T, 3, rng);
    const RowMatrixXf rz = random_matrix(T, 6, rng), rs = random_matrix(2 * T, T, rng);
    // Written out: keys q - window < j <= q, scores cap * tanh(q.k * scale / cap), softmax, z.
    // The loss also reads the kept scores (a scores seed), so the cap's derivative is checked on both.
    auto attend = [&](const RowMatrixXf& qq, const RowMatrixXf& kk, const RowMatrixXf& vv, RowMatrixXf* pattern,
                      double* score_term) {
      RowMatrixXf z = RowMatrixXf::Zero(T, 6);
      if (pattern) pattern->setZero(2 * T, T);
      double st = 0;
      for (int h = 0; h < 2; ++h)
        for (Eigen::Index i = 0; i < T; ++i) {
          const Eigen::Index first = std::max<Eigen::Index>(0, i - window + 1), n = i + 1 - first;
          RowVectorXf sc = (qq.row(i).segment(h * 3, 3) * kk.middleRows(first, n).transpose()) * scale;
          for (Eigen::Index j = 0; j < n; ++j) sc(j) = cap * std::tanh(sc(j) / cap);
          for (Eigen::Index j = 0; j < n; ++j) st += double{sc(j)} * rs(h * T + i, first + j);
          RowVectorXf p = (sc.array() - sc.maxCoeff()).exp();
          p /= p.sum();
          if (pattern) pattern->row(h * T + i).segment(first, n) = p;
          z.row(i).segment(h * 3, 3) = p * vv.middleRows(first, n);
        }
      if (score_term) *score_term = st;
      return z;
    };
    auto L = [&](const RowMatrixXf& qq, const RowMatrixXf& kk, const RowMatrixXf& vv) {
      double st = 0;
      const RowMatrixXf z = attend(qq, kk, vv, nullptr, &st);
      return weighted_sum(z, rz) + st;
    };
    RowMatrixXf pattern;
    attend(q, k, v, &pattern, nullptr);
    RowMatrixXf dq, dk, dv, ds;
    AttentionBackward io;
    io.d_z = &rz;
    io.scores_seed = &rs;
    io.d_scores = &ds;
    io.window = window;
    io.softcap = cap;
    attention_backward(dq, dk, dv, q, k, v, pattern, c, scale, io);
    check_gradient([&](const RowMatrixXf& x) { return L(x, k, v); }, q, dq, 1e-3f);
    check_gradient([&](const RowMatrixXf& x) { return L(q, x, v); }, k, dk, 1e-3f);
    check_gradient([&](const RowMatrixXf& x) { return L(q, k, x); }, v, dv, 1e-3f);
    // Keys outside the window, like those after the query, have a zero score gradient.
    for (int h = 0; h < 2; ++h)
      for (Eigen::Index i = 0; i < T; ++i)
        for (Eigen::Index j = 0; j < T; ++j)
          if (j > i || j <= i - window) CHECK(ds(h * T + i, j) == 0.0f);
  }
}

namespace {

// A tiny llama2.c checkpoint with random weights (test_llama2c.cpp's recipe): Llama math read from
// another file format.
std::shared_ptr<const Weights> tiny_llama2c() {
  const int32_t header[7] = {16, 24, 2, 4, 2, 20, 8};  // dim, hidden, layers, heads, kv heads, vocab, context
  std::mt19937 rng(5);
  std::normal_distribution<float> noise(0.0f, 0.5f);
  std::vector<float> w(static_cast<size_t>(test::llama2c_floats(header)));
  for (float& x : w) x = noise(rng);
  const std::string bytes = test::llama2c_bytes(header, w);
  // The checkpoint's floats are copied in; its weights own what they read.
  return llama2c_checkpoint_from_bytes(
             std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), "tiny.bin")
      .weights;
}

struct Subject {
  std::string name;
  std::shared_ptr<const Weights> weights;
};

std::vector<Subject> subjects() {
  std::vector<Subject> out;
  for (const char* name : {"f32_prefixed", "bf16_prefixed", "f16_plain", "llama_gqa", "llama_tied_headdim", "qwen2_bias",
                           "neox_parallel", "neox_sequential"})
    out.push_back({name, Model::load(test::fixture_model(name))->weights()});
  out.push_back({"llama2c", tiny_llama2c()});
  return out;
}

// Every metric kind, and a dot product at every key of the contract (a middle layer; the whole row
// and, where it has units, unit 1), at position 2 or the last.
std::vector<std::pair<std::string, Metric>> metrics_for(const ModelConfig& c, int S, std::mt19937& rng) {
  std::vector<std::pair<std::string, Metric>> out = {
      {"logit_diff", logit_diff_metric(3, 7)},
      {"logit_diff@2", logit_diff_metric(5, 1, 2)},
      {"logit", logit_metric(4)},
      {"logprob", logprob_metric(9, 3)},
      {"loss", loss_metric()},
  };
  const int l = c.n_layers / 2;
  for (const HookInfo& h : hook_table()) {
    if (!hook_exists(c, h.hook)) continue;
    for (int unit : {-1, 1}) {
      if (unit >= 0 && metric_unit_count(c, h.hook) <= unit) continue;
      Metric m = dot_metric(h.hook, l, {}, unit < 0 ? -1 : 2, unit);
      m.vector = backward_random_vector(static_cast<size_t>(metric_vector_length(m, c, S)), rng);
      out.emplace_back("dot " + hook_key(h.hook, l) + " unit " + std::to_string(unit), std::move(m));
    }
  }
  return out;
}

}  // namespace

TEST_CASE("the backward pass equals the tape reference on every family, key and metric", "[backward][reference]") {
  std::mt19937 rng(7);
  for (const Subject& s : subjects()) {
    DYNAMIC_SECTION(s.name) {
      const ModelConfig& c = s.weights->config();
      const std::vector<int32_t> tokens = {1, 7, 3, 12, 4, 9};
      const auto cache = forward(s.weights, tokens);
      int compared = 0;
      for (const auto& [what, metric] : metrics_for(c, static_cast<int>(tokens.size()), rng)) {
        INFO(s.name << ": " << what);
        const GradientCache ours = backward(*cache, metric);
        const test::ReferenceGradients ref = test::backward_reference(s.weights, tokens, metric);
        CHECK(ours.metric_value == Approx(ref.metric).epsilon(1e-4).margin(1e-4));
        // The same keys: those the metric depends on.
        std::vector<std::string> ref_keys;
        for (const std::string& k : cache->keys())
          if (ref.grads.count(k)) ref_keys.push_back(k);
        CHECK(ours.keys() == ref_keys);
        for (const std::string& key : ours.keys()) {
          if (!ref.grads.count(key)) continue;
          INFO(key);
          const Tensor g = ours.get(key);
          CHECK(g.shape == cache->get(key).shape);
          const std::vector<double>& r = ref.grads.at(key);
          REQUIRE(g.data.size() == r.size());
          double max_ref = 0, max_diff = 0;
          for (size_t i = 0; i < r.size(); ++i) {
            max_ref = std::max(max_ref, std::abs(r[i]));
            max_diff = std::max(max_diff, std::abs(r[i] - g.data[i]));
          }
          INFO("max |ref| " << max_ref << ", max |diff| " << max_diff);
          CHECK(max_diff <= 1e-4 * max_ref + 1e-6);
          ++compared;
        }
      }
      CHECK(compared > 100);
    }
  }
}

TEST_CASE("a run that keeps the MLP's pre-activations has the same cache and the same gradient", "[backward][store_mlp_pre]") {
  // RunOptions::store_mlp_pre stores what the cache otherwise derives (and the backward pass
  // reads): the forward's own values, so every key and every gradient is the same, bit for bit.
  for (const Subject& s : subjects()) {
    DYNAMIC_SECTION(s.name) {
      const ModelConfig& c = s.weights->config();
      const std::vector<int32_t> tokens = {1, 7, 3, 12, 4, 9};
      RunOptions keep;
      keep.store_mlp_pre = true;
      const auto plain = forward(s.weights, tokens);
      const auto kept = forward(s.weights, tokens, keep);
      CHECK_FALSE(cache_covers(*plain, keep));
      CHECK(cache_covers(*kept, keep));
      CHECK(kept->layer(0).mlp_pre.rows() == static_cast<Eigen::Index>(tokens.size()));
      CHECK(kept->layer(0).mlp_pre_linear.empty() == (c.architecture.mlp != MlpKind::Gated));
      for (const std::string& key : plain->keys()) {
        INFO(key);
        CHECK(kept->get(key).data == plain->get(key).data);
      }
      const Metric metric = logit_diff_metric(3, 7);
      const GradientCache a = backward(*plain, metric), b = backward(*kept, metric);
      REQUIRE(a.keys() == b.keys());
      for (const std::string& key : a.keys()) {
        INFO(key);
        CHECK(a.get(key).data == b.get(key).data);
      }
      // A longer prompt reusing the kept run's prefix keeps the pre-activations of every position:
      // the prefix's copied from the kept run, bit for bit, the new one computed (one row through
      // the products, so equal to a fresh run's to rounding, as every key of an extended run is;
      // a build without -march=native may round a 7-row product's rows unlike a 6-row one's).
      std::vector<int32_t> longer = tokens;
      longer.push_back(5);
      const auto extended = forward(s.weights, longer, keep, kept);
      const auto fresh = forward(s.weights, longer, keep);
      const int last = c.n_layers - 1;
      const RowMatrixXf e = extended->layer(last).mlp_pre.to_matrix(), f = fresh->layer(last).mlp_pre.to_matrix();
      REQUIRE(e.rows() == static_cast<Eigen::Index>(longer.size()));
      CHECK(e.topRows(6) == kept->layer(last).mlp_pre.to_matrix());
      CHECK((e - f).cwiseAbs().maxCoeff() <= 1e-5f * f.cwiseAbs().maxCoeff());
    }
  }
}

TEST_CASE("the gradient at a hook predicts the metric's change when a vector is added there", "[backward][fd]") {
  // The edit mechanism (an added vector, intervention.h) moves one activation; the metric's
  // change over +-e against grad . e.
  std::mt19937 rng(3);
  for (const char* name : {"f32_prefixed", "llama_gqa", "neox_parallel"}) {
    DYNAMIC_SECTION(name) {
      const auto model = Model::load(test::fixture_model(name));
      const ModelConfig& c = model->config();
      const std::vector<int32_t> tokens = {2, 8, 5, 11, 6};
      const Metric metric = logprob_metric(17);
      const GradientCache g = backward(*forward(model->weights(), tokens), metric);
      for (const auto& site : std::vector<std::pair<HookPoint, int>>{{HookPoint::Embed, -1},
                                                                      {HookPoint::ResidPre, 1},
                                                                      {HookPoint::V, 0},
                                                                      {HookPoint::Q, 1},
                                                                      {HookPoint::Z, 0},
                                                                      {HookPoint::MlpPre, 0},
                                                                      {HookPoint::MlpPost, 1},
                                                                      {HookPoint::ResidMid, 0}}) {
        const HookPoint hook = site.first;  // named copies: clang before 16 cannot capture a binding
        const int layer = site.second;
        INFO(hook_key(hook, layer));
        const int pos = 2;
        const int64_t width = hook_row_width(c, hook, static_cast<int64_t>(tokens.size()));
        std::vector<float> e = backward_random_vector(static_cast<size_t>(width), rng);
        const float eps = 1e-2f;
        auto metric_with = [&](float sign) {
          RunOptions o;
          o.interventions.push_back(steer_at(hook, layer, e, sign * eps, -1, pos));
          return metric_value(metric, *forward(model->weights(), tokens, o));
        };
        const double fd = (metric_with(1) - metric_with(-1)) / (2.0 * eps);
        double predicted = 0;
        const RowMatrixXf& rows = g.rows(hook, layer);
        for (int64_t j = 0; j < width; ++j) predicted += double{rows(pos, j)} * e[static_cast<size_t>(j)];
        CHECK(fd == Approx(predicted).epsilon(2e-2).margin(2e-3));
      }
    }
  }
}

TEST_CASE("the backward pass refuses what it cannot differentiate", "[backward][refused]") {
  const auto model = Model::load(test::fixture_model("f32_prefixed"));
  const std::vector<int32_t> tokens = {1, 2, 3};
  const auto cache = forward(model->weights(), tokens);
  const int V = model->config().d_vocab;
  CHECK_THROWS_WITH(backward(*cache, logit_diff_metric(V, 2)), Catch::Contains("token " + std::to_string(V) + " (the answer) is outside the vocabulary [0, " + std::to_string(V)));
  CHECK_THROWS_WITH(backward(*cache, logit_metric(1, 3)), Catch::Contains("give a position from 0 to 2"));
  CHECK_THROWS_WITH(backward(*cache, logit_diff_metric(4, 4)), Catch::Contains("same token"));
  CHECK_THROWS_WITH(backward(*forward(model->weights(), std::vector<int32_t>{1}), loss_metric()),
                    Catch::Contains("at least two tokens"));
  CHECK_THROWS_WITH(backward(*cache, dot_metric(HookPoint::ResidPost, 0, std::vector<float>(5))),
                    Catch::Contains("give a vector of 32 values"));
  CHECK_THROWS_WITH(backward(*cache, dot_metric(HookPoint::Z, 0, std::vector<float>(8), -1, 4)),
                    Catch::Contains("unit 4 is out of range"));
  CHECK_THROWS_WITH(backward(*cache, dot_metric(HookPoint::RotQ, 0, std::vector<float>(8))),
                    Catch::Contains("not a key of this model"));
  CHECK_THROWS_WITH(backward(*cache, dot_metric(HookPoint::Z, 5, std::vector<float>(32))), Catch::Contains("layers 0..1"));
  RunOptions logits_only;
  logits_only.logits_only = true;
  CHECK_THROWS_WITH(backward(*forward(model->weights(), tokens, logits_only), logit_metric(1)),
                    Catch::Contains("kept only the logits"));
  RunOptions edited;
  edited.interventions.push_back(zero_ablation(0, 1));
  CHECK_THROWS_WITH(backward(*forward(model->weights(), tokens, edited), logit_metric(1)), Catch::Contains("made with edits"));
  // A key the metric does not depend on is absent, and get() says why.
  const GradientCache g = backward(*cache, dot_metric(HookPoint::Z, 0, std::vector<float>(8, 1.0f), 1, 0));
  CHECK_FALSE(g.has("logits"));
  CHECK(g.has("blocks.0.attn.hook_pattern"));
  CHECK_FALSE(g.has("blocks.0.hook_attn_out"));
  CHECK_THROWS_WITH(g.get("blocks.1.hook_resid_pre"), Catch::Contains("does not depend on"));
  // Keeping only the residual stream.
  GradOptions only;
  only.keep = {HookPoint::ResidPre};
  const GradientCache r = backward(*cache, logit_metric(1), only);
  CHECK(r.keys() == std::vector<std::string>{"blocks.0.hook_resid_pre", "blocks.1.hook_resid_pre"});
  CHECK(r.get("blocks.1.hook_resid_pre").data == backward(*cache, logit_metric(1)).get("blocks.1.hook_resid_pre").data);
}

namespace {

// The members of a stored (uncompressed) zip, as write_npz makes it: name -> (the .npy header's
// dictionary, the data's bytes).
std::map<std::string, std::pair<std::string, std::string>> read_stored_npz(const std::string& z) {
  std::map<std::string, std::pair<std::string, std::string>> out;
  auto u16 = [&](size_t at) { return static_cast<size_t>(static_cast<uint8_t>(z[at]) | static_cast<uint8_t>(z[at + 1]) << 8); };
  auto u32 = [&](size_t at) { return u16(at) | u16(at + 2) << 16; };
  size_t at = 0;
  while (at + 30 <= z.size() && u32(at) == 0x04034b50u) {
    const size_t size = u32(at + 18), name_len = u16(at + 26), extra = u16(at + 28);
    const std::string name = z.substr(at + 30, name_len);
    const std::string npy = z.substr(at + 30 + name_len + extra, size);
    const size_t h = static_cast<size_t>(static_cast<uint8_t>(npy[8]) | static_cast<uint8_t>(npy[9]) << 8);
    out[name] = {npy.substr(10, h), npy.substr(10 + h)};
    at += 30 + name_len + extra + size;
  }
  return out;
}

}  // namespace

TEST_CASE("headscope-cli grad writes the metric, the tokens and every dependent key's gradient", "[backward][cli]") {
  const fs_path_t model = test::fixture_model("llama_gqa");
  const auto m = Model::load(model);
  const std::vector<int32_t> tokens = {1, 5, 9, 3, 7};
  const GradientCache g = backward(*forward(m->weights(), tokens), logit_diff_metric(4, 7, 3));
  const std::string base = "grad --model " + test::quote(model.string()) +
                           " --tokens 1,5,9,3,7 --metric logit_diff --answer-id 4 --wrong-id 7 --pos 3 -o ";
  SECTION("npz") {
    const fs_path_t out = test::scratch_dir() / "grad.npz";
    const test::CliRun r = test::run_cli(base + test::quote(out.string()));
    INFO(r.err);
    REQUIRE(r.code == 0);
    const auto members = read_stored_npz(test::read_text(out));
    REQUIRE(members.count("metric.npy"));
    CHECK(members.at("metric.npy").first.find("'descr': '<f8'") != std::string::npos);
    CHECK(members.at("metric.npy").first.find("'shape': (1,)") != std::string::npos);
    double metric = 0;
    std::memcpy(&metric, members.at("metric.npy").second.data(), 8);
    CHECK(metric == g.metric_value);
    CHECK(members.at("tokens.npy").first.find("'descr': '<i4'") != std::string::npos);
    std::vector<int32_t> written(tokens.size());
    std::memcpy(written.data(), members.at("tokens.npy").second.data(), tokens.size() * 4);
    CHECK(written == tokens);
    CHECK(members.size() == g.keys().size() + 2);
    for (const std::string& key : g.keys()) {
      INFO(key);
      REQUIRE(members.count(key + ".grad.npy"));
      const Tensor t = g.get(key);
      const auto& [header, bytes] = members.at(key + ".grad.npy");
      CHECK(header.find("'descr': '<f4'") != std::string::npos);
      REQUIRE(bytes.size() == t.data.size() * 4);
      CHECK(std::memcmp(bytes.data(), t.data.data(), bytes.size()) == 0);
    }
    // Every key of this metric: everything before the logits at position 3 depends on it.
    CHECK(g.keys().size() == forward(m->weights(), tokens)->keys().size());
  }
  SECTION("json") {
    const fs_path_t out = test::scratch_dir() / "grad.json";
    REQUIRE(test::run_cli(base + test::quote(out.string())).code == 0);
    const nlohmann::json j = nlohmann::json::parse(test::read_text(out));
    CHECK(j["metric"].get<double>() == Approx(g.metric_value).epsilon(1e-12));
    CHECK(j["metric_name"] == "logit_diff");
    CHECK(j["tokens"].get<std::vector<int32_t>>() == tokens);
    CHECK(j["grads"].size() == g.keys().size());
    const Tensor z = g.get("blocks.1.attn.hook_z");
    CHECK(j["grads"]["blocks.1.attn.hook_z"]["shape"].get<std::vector<int64_t>>() == z.shape);
    CHECK(j["grads"]["blocks.1.attn.hook_z"]["data"].get<std::vector<float>>() == z.data);
  }
  SECTION("a dot product leaves out the keys after its hook") {
    const fs_path_t out = test::scratch_dir() / "dot.json", vec = test::scratch_dir() / "dot.npy";
    test::write_npy(vec, std::vector<float>(8, 0.5f));
    const test::CliRun r = test::run_cli("grad --model " + test::quote(model.string()) +
                                         " --tokens 1,5,9,3,7 --metric dot --hook blocks.0.attn.hook_v --unit 1 --vector " +
                                         test::quote(vec.string()) + " -o " + test::quote(out.string()));
    INFO(r.err);
    REQUIRE(r.code == 0);
    const nlohmann::json j = nlohmann::json::parse(test::read_text(out));
    CHECK(j["grads"].contains("blocks.0.attn.hook_v"));
    CHECK(j["grads"].contains("hook_embed"));
    CHECK_FALSE(j["grads"].contains("blocks.0.attn.hook_q"));
    CHECK_FALSE(j["grads"].contains("blocks.0.attn.hook_z"));
    CHECK_FALSE(j["grads"].contains("logits"));
  }
  SECTION("usage mistakes exit with 2") {
    const std::string cmd = "grad --model " + test::quote(model.string()) + " --tokens 1,5,9 -o " +
                            test::quote((test::scratch_dir() / "u.json").string());
    CHECK(test::run_cli(cmd).code == 2);  // no --metric
    CHECK(test::run_cli(cmd + " --metric loss --pos 1").code == 2);
    CHECK(test::run_cli(cmd + " --metric logit --answer-id 3 --wrong-id 4").code == 2);
    CHECK(test::run_cli(cmd + " --metric logit_diff --answer-id 3").code == 2);
    CHECK(test::run_cli(cmd + " --metric dot --hook blocks.0.hook_zz --vector x.npy").code == 2);
    CHECK(!fs::exists(test::scratch_dir() / "u.json"));
  }
}
