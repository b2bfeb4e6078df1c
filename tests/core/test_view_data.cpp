// What the views compute (core/analysis/view_data): the pooled grids against naive loops over
// the full matrices, the quantile on data whose answer is known, and the per-position, per-layer
// and per-run bundles against calling the analyses they bundle directly.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <optional>
#include <random>
#include <utility>
#include <vector>

#include "core/analysis/concat_sum.h"
#include "core/analysis/dla.h"
#include "core/analysis/residual.h"
#include "core/analysis/top_k.h"
#include "core/analysis/view_data.h"
#include "core/error.h"
#include "core/model/model.h"
#include "test_support.h"

using namespace hs;

namespace {

std::vector<int32_t> some_tokens(int n) {
  std::vector<int32_t> ids;
  for (int i = 0; i < n; ++i) ids.push_back((i * 37 + 5) % 291);
  return ids;
}

int ceil_div(int a, int b) { return (a + b - 1) / b; }

// Max-pooling of the full [query_pos, key_pos] matrix: each cell the largest weight of its block,
// NaN when its first key comes after its last query.
PooledGrid naive_pooled_pattern(const ActivationCache& cache, int l, int h, int max_side) {
  const RowMatrixXf p = cache.head_pattern(l, h);  // [query_pos, key_pos], zeros above the diagonal
  const int n = static_cast<int>(p.rows());
  PooledGrid g;
  const int block = ceil_div(n, max_side);
  g.rows = g.cols = ceil_div(n, block);
  g.block_rows = g.block_cols = block;
  for (int i = 0; i < g.rows; ++i) {
    const int last_query = std::min(n, (i + 1) * block) - 1;
    for (int j = 0; j < g.cols; ++j) {
      const int first_key = j * block;
      if (first_key > last_query) {
        g.values.push_back(std::nanf(""));
        continue;
      }
      const int first_query = i * block, last_key = std::min(n, first_key + block) - 1;
      g.values.push_back(p.block(first_query, first_key, last_query - first_query + 1, last_key - first_key + 1).maxCoeff());
    }
  }
  return g;
}

// The entry of largest magnitude in each block; on ties the first in row-major order; 0 for an
// all-zero block.
PooledGrid naive_pooled_signed(const RowMatrixXf& m, int max_rows, int max_cols) {
  const int rows = static_cast<int>(m.rows()), cols = static_cast<int>(m.cols());
  PooledGrid g;
  g.block_rows = ceil_div(rows, max_rows);
  g.block_cols = ceil_div(cols, max_cols);
  g.rows = ceil_div(rows, g.block_rows);
  g.cols = ceil_div(cols, g.block_cols);
  for (int i = 0; i < g.rows; ++i)
    for (int j = 0; j < g.cols; ++j) {
      std::vector<float> entries;  // row-major
      for (int r = i * g.block_rows; r < std::min(rows, (i + 1) * g.block_rows); ++r)
        for (int c = j * g.block_cols; c < std::min(cols, (j + 1) * g.block_cols); ++c) entries.push_back(m(r, c));
      float largest = 0.0f;
      for (float x : entries) largest = std::max(largest, std::abs(x));
      float pick = 0.0f;
      if (largest > 0.0f)
        pick = *std::find_if(entries.begin(), entries.end(), [&](float x) { return std::abs(x) == largest; });
      g.values.push_back(pick);
    }
  return g;
}

void check_same_grid(const PooledGrid& got, const PooledGrid& want) {
  REQUIRE(got.rows == want.rows);
  REQUIRE(got.cols == want.cols);
  CHECK(got.block_rows == want.block_rows);
  CHECK(got.block_cols == want.block_cols);
  REQUIRE(got.values.size() == static_cast<size_t>(want.rows) * static_cast<size_t>(want.cols));
  REQUIRE(want.values.size() == got.values.size());
  for (size_t i = 0; i < want.values.size(); ++i) {
    INFO("cell " << i / static_cast<size_t>(want.cols) << ", " << i % static_cast<size_t>(want.cols));
    if (std::isnan(want.values[i])) CHECK(std::isnan(got.values[i]));
    else CHECK(got.values[i] == want.values[i]);
  }
}

bool same_predictions(const std::vector<Prediction>& a, const std::vector<Prediction>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].id != b[i].id || a[i].probability != b[i].probability || a[i].logit != b[i].logit) return false;
  return true;
}

}  // namespace

TEST_CASE("pooled_pattern is the naive block maximum of the pattern, with the masked rule", "[view_data]") {
  const auto model = Model::load(test::fixture_model("f16_plain"));  // 2 layers, 4 heads, 32 positions
  const ModelConfig& c = model->config();
  // n_pos: a multiple of the block, not a multiple, below max_side, one token, the whole context.
  for (int n : {1, 2, 10, 16, 29, 32}) {
    const auto cache = model->run(some_tokens(n));
    for (int max_side : {1, 3, 4, 5, 7, 8, 64}) {
      for (int l = 0; l < c.n_layers; ++l)
        for (int h = 0; h < c.n_heads; ++h) {
          INFO("n_pos " << n << ", max_side " << max_side << ", L" << l << "H" << h);
          const PooledGrid g = pooled_pattern(*cache, l, h, max_side);
          check_same_grid(g, naive_pooled_pattern(*cache, l, h, max_side));
          CHECK(g.rows <= max_side);
          if (n <= max_side) CHECK(g.rows == n);  // one cell per position
        }
    }
  }

  // 10 positions in cells of 3: queries 0-2 | 3-5 | 6-8 | 9. The diagonal cells are never masked;
  // above them a cell is masked exactly when its first key is after its block's last query.
  const auto cache = model->run(some_tokens(10));
  const PooledGrid g = pooled_pattern(*cache, 1, 2, 4);
  REQUIRE(g.rows == 4);
  REQUIRE(g.block_rows == 3);
  auto at = [&](int i, int j) { return g.values[static_cast<size_t>(i * g.cols + j)]; };
  CHECK(at(0, 0) == 1.0f);  // query 0 attends only to itself
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) CHECK(std::isnan(at(i, j)) == (j > i));
  for (int i = 0; i < 4; ++i) CHECK(at(i, i) > 0.0f);

  CHECK_THROWS_AS(pooled_pattern(*cache, c.n_layers, 0), Error);
  CHECK_THROWS_AS(pooled_pattern(*cache, 0, c.n_heads), Error);
  CHECK_THROWS_AS(pooled_pattern(*cache, -1, 0), Error);
  CHECK_THROWS_AS(pooled_pattern(*cache, 0, 0, 0), Error);
}

TEST_CASE("pooled_signed keeps the entry of largest magnitude, the first on ties", "[view_data]") {
  RowMatrixXf m(3, 4);
  m << 1, -2, 0, 0,  //
      2, 0, 0, 0,    //
      0, 5, -5, 0;
  const PooledGrid g = pooled_signed(m, 2, 2);  // blocks of 2 x 2, the last row of blocks one row tall
  CHECK(g.rows == 2);
  CHECK(g.cols == 2);
  CHECK(g.block_rows == 2);
  CHECK(g.block_cols == 2);
  CHECK(g.values == std::vector<float>{-2, 0, 5, -5});  // -2 before 2; an all-zero block; 5 before -5
  check_same_grid(g, naive_pooled_signed(m, 2, 2));

  // A matrix that fits is copied cell for cell.
  const PooledGrid same = pooled_signed(m);
  CHECK(same.block_rows == 1);
  CHECK(same.block_cols == 1);
  CHECK(same.values == std::vector<float>(m.data(), m.data() + m.size()));

  // Random matrices with many ties (small integers) and zero blocks, cut into uneven blocks.
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> value(-3, 3);
  for (auto [rows, cols] : {std::pair{300, 10}, std::pair{17, 513}, std::pair{257, 257}, std::pair{5, 7}}) {
    RowMatrixXf r(rows, cols);
    for (Eigen::Index i = 0; i < r.size(); ++i) r.data()[i] = value(rng) * (i % 11 < 4 ? 0.0f : 0.5f);
    for (auto [max_rows, max_cols] : {std::pair{256, 256}, std::pair{3, 2}, std::pair{1, 1}, std::pair{7, 100}}) {
      INFO(rows << " x " << cols << " into at most " << max_rows << " x " << max_cols);
      const PooledGrid p = pooled_signed(r, max_rows, max_cols);
      CHECK(p.rows <= max_rows);
      CHECK(p.cols <= max_cols);
      check_same_grid(p, naive_pooled_signed(r, max_rows, max_cols));
    }
  }
  CHECK(pooled_signed(RowMatrixXf(0, 4)).values.empty());
}

TEST_CASE("abs_quantile on known data", "[view_data]") {
  RowMatrixXf a(2, 2), b(1, 1);
  a << -1, 2, 3, -4;
  b << 5;
  const std::vector<RowMatrixXf> small = {a, b};  // |x| = 1 2 3 4 5
  CHECK(abs_quantile(small, 0.0) == 1.0f);
  CHECK(abs_quantile(small, 0.5) == 3.0f);
  CHECK(abs_quantile(small, 0.8) == 4.0f);  // index floor(0.8 * 4) = 3
  CHECK(abs_quantile(small, 1.0) == 5.0f);
  CHECK(abs_quantile({}, 0.5) == 0.0f);
  CHECK(abs_quantile({RowMatrixXf(0, 3)}, 0.5) == 0.0f);

  // 20,000 entries (more than 2^14): every second one is sampled, counting across both matrices,
  // so the largest sampled |x| is 19998, and the median of the 10,000 samples is sample 4999.
  RowMatrixXf first(100, 100), second(1, 10000);
  for (int i = 0; i < 10000; ++i) first.data()[i] = -static_cast<float>(i);
  for (int i = 0; i < 10000; ++i) second.data()[i] = static_cast<float>(10000 + i);
  const std::vector<RowMatrixXf> big = {first, second};
  CHECK(abs_quantile(big, 1.0) == 19998.0f);
  CHECK(abs_quantile(big, 0.0) == 0.0f);
  CHECK(abs_quantile(big, 0.5) == 9998.0f);
  CHECK(abs_quantile(big, 0.995) == 2.0f * static_cast<float>(static_cast<int>(0.995 * 9999)));
  // Exactly 2^14 entries: all of them.
  RowMatrixXf exact(1, 1 << 14);
  for (int i = 0; i < (1 << 14); ++i) exact.data()[i] = static_cast<float>(i);
  CHECK(abs_quantile({exact}, 1.0) == static_cast<float>((1 << 14) - 1));
}

TEST_CASE("analyze_position equals the analyses it bundles, with the position clamped", "[view_data]") {
  const auto model = Model::load(test::fixture_model("f32_prefixed"));
  const auto cache = model->run(some_tokens(9));
  const int n = cache->n_pos();
  struct Case {
    int pos;
    std::optional<int32_t> target;
    int top_k;
    int expected_pos;
  };
  for (const Case& k : {Case{-5, std::nullopt, 10, 0}, Case{3, std::nullopt, 5, 3}, Case{1000, 42, 10, n - 1},
                        Case{n - 1, 7, 1, n - 1}, Case{4, std::nullopt, 0, 4}, Case{2, std::nullopt, 100000, 2}}) {
    INFO("pos " << k.pos << ", top_k " << k.top_k);
    const PositionAnalysis a = analyze_position(*cache, k.pos, k.target, k.top_k);
    const int pos = k.expected_pos;
    CHECK(a.pos == pos);
    const std::vector<Prediction> top = top_predictions(*cache, pos, k.top_k);
    CHECK(same_predictions(a.top, top));
    CHECK(a.top.size() == static_cast<size_t>(std::clamp(k.top_k, 0, model->config().d_vocab)));
    CHECK(a.target_is_prediction == !k.target.has_value());
    const int32_t target = k.target ? *k.target : (top.empty() ? 0 : top.front().id);
    CHECK(a.target == target);
    CHECK(a.write_norms == head_write_norms(*cache, pos));
    const ResidualDecomposition parts = decompose_residual(*cache, pos);
    CHECK(a.parts.pos == pos);
    CHECK(a.parts.labels == parts.labels);
    CHECK(a.parts.components == parts.components);
    CHECK(a.parts.residual == parts.residual);
    const LogitAttribution dla = direct_logit_attribution(*cache, parts, target);
    CHECK(a.dla.target == target);
    CHECK(a.dla.pos == pos);
    CHECK(a.dla.per_component == dla.per_component);
    CHECK(a.dla.per_head == dla.per_head);
    CHECK(a.dla.logit == dla.logit);
  }
  CHECK_THROWS_AS(analyze_position(*cache, 0, 291, 5), Error);  // a target outside the vocabulary
}

TEST_CASE("analyze_layer equals concat_vs_sum and its colour ranges, with the layer clamped", "[view_data]") {
  const auto model = Model::load(test::fixture_model("bf16_prefixed"));
  const auto cache = model->run(some_tokens(12));
  const int n_layer = cache->n_layer();
  for (auto [asked, expected] : {std::pair{-3, 0}, std::pair{0, 0}, std::pair{1, 1}, std::pair{99, n_layer - 1}}) {
    INFO("layer " << asked);
    const LayerAnalysis a = analyze_layer(*cache, asked);
    CHECK(a.layer == expected);
    const ConcatVsSum cs = concat_vs_sum(*cache, expected);
    CHECK(a.cs.layer == expected);
    CHECK(a.cs.via_concat == cs.via_concat);
    CHECK(a.cs.via_sum == cs.via_sum);
    REQUIRE(a.cs.head_results.size() == cs.head_results.size());
    const float out = std::max(cs.via_concat.cwiseAbs().maxCoeff(), cs.via_sum.cwiseAbs().maxCoeff());
    CHECK(a.output_range == (out > 0.0f ? out : 1.0f));
    const float q = abs_quantile(cs.head_results, 0.995);
    CHECK(a.head_range == (q > 0.0f ? q : a.output_range));
    CHECK(a.head_range > 0.0f);
    REQUIRE(a.head_results_pooled.size() == cs.head_results.size());
    for (size_t h = 0; h < cs.head_results.size(); ++h) {
      CHECK(a.cs.head_results[h] == cs.head_results[h]);
      check_same_grid(a.head_results_pooled[h], pooled_signed(cs.head_results[h], 256, 256));
    }
  }
}

TEST_CASE("overview_of_run: next-token predictions and one thumbnail per head", "[view_data]") {
  const auto model = Model::load(test::fixture_model("full_context"));  // 2 layers, 3 heads, 16 positions
  const ModelConfig& c = model->config();
  for (int n : {1, 7, 16}) {
    const auto cache = model->run(some_tokens(n));
    for (int side : {64, 3}) {
      INFO("n_pos " << n << ", thumbnail_side " << side);
      const RunOverview o = overview_of_run(*cache, 10, side);
      CHECK(same_predictions(o.next, top_predictions(*cache, n - 1, 10)));
      CHECK(o.next.size() == 10);
      REQUIRE(o.thumbnails.size() == static_cast<size_t>(c.n_layers * c.n_heads));
      for (int l = 0; l < c.n_layers; ++l)
        for (int h = 0; h < c.n_heads; ++h) {
          const PooledGrid& t = o.thumbnails[static_cast<size_t>(l * c.n_heads + h)];
          CHECK(t.rows == ceil_div(n, ceil_div(n, side)));
          check_same_grid(t, pooled_pattern(*cache, l, h, side));
        }
    }
  }
  // The default side is the GUI's thumbnail size.
  const auto cache = model->run(some_tokens(5));
  CHECK(overview_of_run(*cache, 3).thumbnails.front().rows == 5);
}
