// The activation cache's position blocks (core/model/position_rows.h): a run that extends or edits
// an earlier prompt shares the earlier run's blocks before the first recomputed position, reads
// exactly what a fresh run computes, and leaves the earlier cache as it was.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include "core/analysis/view_data.h"
#include "core/model/model.h"
#include "core/model/position_block_stats.h"
#include "core/model/position_rows.h"
#include "forward_reference.h"
#include "test_support.h"

using namespace hs;
namespace fs = std::filesystem;

namespace {

RowMatrixXf random_rows(Eigen::Index rows, Eigen::Index cols, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  RowMatrixXf m(rows, cols);
  for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = u(gen);
  return m;
}

std::vector<int32_t> random_tokens(size_t n, int vocab, unsigned seed) {
  std::mt19937 gen(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = static_cast<int32_t>(gen() % static_cast<unsigned>(vocab));
  return t;
}

// A copy of a committed fixture with a longer context, so that prompts span several blocks. Only
// for rotary models, whose positions come from no table.
fs::path with_context(const std::string& fixture, int n_ctx, const fs::path& dir) {
  fs::remove_all(dir);
  fs::create_directories(dir.parent_path());
  fs::copy(test::fixture_model(fixture), dir, fs::copy_options::recursive);
  auto config = nlohmann::json::parse(test::read_text(dir / "config.json"));
  config["max_position_embeddings"] = n_ctx;
  std::ofstream(dir / "config.json") << config.dump(2);
  return dir;
}

// Every key of `cache`, as the views and exports read it.
std::vector<std::vector<float>> snapshot(const ActivationCache& cache) {
  std::vector<std::vector<float>> out;
  for (const std::string& key : cache.keys()) out.push_back(cache.get(key).data);
  return out;
}

// Blocks shared between two caches by one per-position activation of every layer, the patterns
// and the logits: all must share exactly the blocks before `keep` (whole blocks only).
void check_shared_blocks(const ActivationCache& a, const ActivationCache& b, int keep) {
  const Eigen::Index shared = keep / kPositionBlock;
  for (int l = 0; l < a.n_layer(); ++l) {
    for (Eigen::Index blk = 0; blk < shared; ++blk) {
      CHECK(a.layer(l).resid_pre.shares_block(b.layer(l).resid_pre, blk));
      CHECK(a.layer(l).mlp_out.shares_block(b.layer(l).mlp_out, blk));
      CHECK(a.layer(l).pattern.shares_block(b.layer(l).pattern, blk));
    }
    CHECK_FALSE(a.layer(l).resid_pre.shares_block(b.layer(l).resid_pre, shared));
    CHECK_FALSE(a.layer(l).pattern.shares_block(b.layer(l).pattern, shared));
  }
  for (Eigen::Index blk = 0; blk < shared; ++blk) CHECK(a.logits.shares_block(b.logits, blk));
  CHECK_FALSE(a.logits.shares_block(b.logits, shared));
}

}  // namespace

TEST_CASE("position rows: whole blocks before the kept rows are shared, the one they end in is copied",
          "[cache][blocks]") {
  const Eigen::Index B = kPositionBlock;
  const RowMatrixXf m = random_rows(3 * B + 5, 7, 1);
  const PositionRows first(m);
  REQUIRE(first.to_matrix() == m);
  for (const Eigen::Index keep : {Eigen::Index{0}, Eigen::Index{1}, B - 1, B, B + 3, 2 * B, 3 * B + 4}) {
    INFO("keep " << keep);
    PositionRows next;
    next.extend(&first, keep, 4 * B + 2, 7);
    const RowMatrixXf fresh = random_rows(next.rows() - keep, 7, 2);
    next.set_rows(keep, fresh);
    CHECK(next.middle_rows(0, keep) == m.topRows(keep));
    CHECK(next.middle_rows(keep, next.rows() - keep) == fresh);
    for (Eigen::Index b = 0; b < 4; ++b) CHECK(next.shares_block(first, b) == (b < keep / B));
    CHECK(first.to_matrix() == m);  // writing the new rows left the earlier rows as they were
  }
  // Block-wise reads see the rows in order, each block's part once.
  Eigen::Index seen = 5;
  first.for_each_block(5, first.rows(), [&](Eigen::Index i, const ConstStridedMatrixRef& rows) {
    CHECK(i == seen);
    CHECK(rows == m.middleRows(i, rows.rows()));
    seen += rows.rows();
  });
  CHECK(seen == first.rows());
  CHECK(first.middle_cols(2, 3) == m.middleCols(2, 3));
}

TEST_CASE("pattern rows: lower triangles in position blocks, shared like the rest", "[cache][blocks]") {
  const Eigen::Index B = kPositionBlock, S = 2 * B + 9;
  const int H = 3;
  PatternRows first;
  first.extend(nullptr, 0, S, H);
  for (int h = 0; h < H; ++h)
    for (Eigen::Index q = 0; q < S; ++q)
      for (Eigen::Index k = 0; k <= q; ++k) first.mutable_row(h, q)[k] = static_cast<float>(h * 100000 + q * 1000 + k);
  for (const Eigen::Index keep : {Eigen::Index{3}, B, B + 5, S - 1}) {
    INFO("keep " << keep);
    PatternRows next;
    next.extend(&first, keep, S + 4, H);
    for (int h = 0; h < H; ++h)
      for (Eigen::Index q = keep; q < S + 4; ++q)
        for (Eigen::Index k = 0; k <= q; ++k) next.mutable_row(h, q)[k] = -1.0f;
    for (int h = 0; h < H; ++h)
      for (Eigen::Index q = 0; q < S; ++q)
        for (Eigen::Index k = 0; k <= q; ++k) {
          CHECK(first.row(h, q)[k] == static_cast<float>(h * 100000 + q * 1000 + k));
          if (q < keep) CHECK(next.row(h, q)[k] == first.row(h, q)[k]);
        }
    for (Eigen::Index b = 0; b < 3; ++b) CHECK(next.shares_block(first, b) == (b < keep / B));
  }
}

TEST_CASE("a run that reuses a prefix shares its blocks and reads as a fresh run", "[forward][incremental][blocks]") {
  const fs::path dir = test::scratch_dir() / "blocks_llama";
  // GPT-2 (learned positions, the built-in model), Llama (rotary, grouped-query attention) and
  // GPT-NeoX (parallel blocks, partial rotary), at lengths of several blocks.
  const std::vector<fs::path> models = {test::source_dir() / "resources/models/headscope-tiny",
                                        with_context("llama_gqa", 160, dir / "llama"),
                                        with_context("neox_parallel", 160, dir / "neox")};
  for (const fs::path& m : models) {
    INFO(m.filename().string());
    const auto model = Model::load(m);
    const int V = model->config().d_vocab;
    const std::vector<int32_t> base_tokens = random_tokens(100, V, 3);
    const auto base = model->run(base_tokens);
    const auto before = snapshot(*base);

    std::vector<int32_t> longer = base_tokens;  // typing at the end: a new last token, then more
    longer.back() = (longer.back() + 1) % V;
    for (int32_t t : random_tokens(20, V, 4)) longer.push_back(t);
    std::vector<int32_t> edited = base_tokens;  // an edit in the middle
    edited[70] = (edited[70] + 1) % V;
    std::vector<int32_t> shorter(base_tokens.begin(), base_tokens.begin() + 64);

    for (const std::vector<int32_t>* next : {&longer, &edited, &shorter}) {
      const auto incremental = model->run(*next, RunOptions{}, base);
      const auto fresh = model->run(*next);
      const int expected_keep = next == &longer ? 99 : next == &edited ? 70 : 63;
      REQUIRE(incremental->reused_prefix == expected_keep);
      check_shared_blocks(*incremental, *base, expected_keep);
      for (const std::string& key : fresh->keys()) {
        INFO(key << " after reusing " << incremental->reused_prefix);
        const test::Comparison c = test::compare(fresh->get(key).data, incremental->get(key).data);
        CHECK(c.masks_agree);
        CHECK(c.relative <= 1e-5);
      }
    }
    // The earlier cache, still shown while the new runs were made, reads as it did.
    CHECK(snapshot(*base) == before);
  }
  fs::remove_all(dir);
}

TEST_CASE("blocked attention over several blocks equals the slow reference loops", "[forward][blocks]") {
  const fs::path dir = test::scratch_dir() / "blocks_reference";
  for (const fs::path& m : {test::source_dir() / "resources/models/headscope-tiny", with_context("qwen2_bias", 120, dir)}) {
    INFO(m.filename().string());
    const auto model = Model::load(m);
    const std::vector<int32_t> tokens = random_tokens(2 * kPositionBlock + 11, model->config().d_vocab, 5);
    const auto fast = model->run(tokens);
    const auto slow = test::forward_reference(model->weights(), tokens);
    for (const std::string& key : fast->keys()) {
      INFO(key);
      const test::Comparison c = test::compare(slow->get(key).data, fast->get(key).data);
      CHECK(c.masks_agree);
      CHECK(c.relative <= 1e-5);
    }
  }
  fs::remove_all(dir);
}

TEST_CASE("typing key after key at a long prompt holds one new block per activation, not a new copy",
          "[forward][incremental][blocks]") {
  const auto model = Model::load(test::source_dir() / "resources/models/headscope-tiny");
  std::vector<int32_t> tokens = random_tokens(200, model->config().d_vocab, 6);
  auto previous = model->run(tokens);
  const size_t full = previous->stored_bytes();
  for (int key = 0; key < 8; ++key) {
    tokens.back() = (tokens.back() + 1) % model->config().d_vocab;  // the last word grows
    if (key % 3 == 2) tokens.push_back(7);                          // and a new one starts
    const auto next = model->run(tokens, RunOptions{}, previous);
    // Memory a key adds: only the blocks from the first recomputed position on are new.
    size_t own = 0;
    const Eigen::Index keep = next->reused_prefix;
    for (int l = 0; l < next->n_layer(); ++l)
      for (Eigen::Index b = 0; b * kPositionBlock < next->n_pos(); ++b)
        if (!next->layer(l).resid_pre.shares_block(previous->layer(l).resid_pre, b)) ++own;
    CHECK(own == static_cast<size_t>(next->n_layer()) *
                     static_cast<size_t>((next->n_pos() - 1) / kPositionBlock - keep / kPositionBlock + 1));
    CHECK(next->stored_bytes() <= full + full / 4);
    previous = next;
  }
}

TEST_CASE("thumbnails pooled from an earlier run's rows of cells equal thumbnails pooled afresh", "[view_data][blocks]") {
  const auto model = Model::load(test::source_dir() / "resources/models/headscope-tiny");
  const int V = model->config().d_vocab;
  const std::vector<int32_t> base_tokens = random_tokens(181, V, 8);
  const auto base = model->run(base_tokens);
  const RunOverview earlier = overview_of_run(*base, 5, 64);
  std::vector<int32_t> longer = base_tokens;
  longer.back() = (longer.back() + 1) % V;
  longer.push_back(3);
  std::vector<int32_t> edited = base_tokens;
  edited[50] = (edited[50] + 1) % V;
  std::vector<int32_t> past_a_multiple = base_tokens;  // 193 tokens: four positions per cell, not three
  for (int32_t t : random_tokens(12, V, 9)) past_a_multiple.push_back(t);
  for (const std::vector<int32_t>* next : {&longer, &edited, &past_a_multiple}) {
    const auto run = model->run(*next, RunOptions{}, base);
    REQUIRE(run->reused_prefix > 0);
    const RunOverview reused = overview_of_run(*run, 5, 64, &earlier.thumbnails);
    const RunOverview fresh = overview_of_run(*run, 5, 64);
    REQUIRE(reused.thumbnails.size() == fresh.thumbnails.size());
    for (size_t i = 0; i < fresh.thumbnails.size(); ++i) {
      const PooledGrid& a = reused.thumbnails[i];
      const PooledGrid& b = fresh.thumbnails[i];
      REQUIRE(a.rows == b.rows);
      REQUIRE(a.cols == b.cols);
      CHECK(a.block_rows == b.block_rows);
      for (size_t v = 0; v < a.values.size(); ++v) {
        if (std::isnan(b.values[v])) CHECK(std::isnan(a.values[v]));
        else CHECK(a.values[v] == b.values[v]);
      }
    }
  }
}

TEST_CASE("a cache extended key after key keeps only its own blocks alive, not its predecessors'",
          "[forward][incremental][blocks][memory]") {
  // Typing holds one cache (and, while the next run is made, the one before it): every block of
  // the caches before those must have been freed. position_block_stats counts every block made
  // and freed, so a block kept alive by anything (a shared block holding a predecessor, a chain of
  // previous caches) shows as live bytes beyond what the current cache stores.
  const auto model = Model::load(test::source_dir() / "resources/models/headscope-tiny");
  const size_t before = position_block_stats().live_bytes;
  std::vector<int32_t> tokens = random_tokens(150, model->config().d_vocab, 10);
  auto previous = model->run(tokens);
  for (int key = 0; key < 90; ++key) {
    tokens.back() = (tokens.back() + 1) % model->config().d_vocab;  // the last word grows
    if (key % 4 == 3) tokens.push_back(11);                         // and a new one starts
    auto next = model->run(tokens, RunOptions{}, previous);
    REQUIRE(next->reused_prefix == static_cast<int>(tokens.size()) - (key % 4 == 3 ? 2 : 1));
    previous = std::move(next);
    // Blocks are the cache's stored activations (lower-triangle patterns included) and nothing
    // else; small blocks also count their shared pointer's few bytes of bookkeeping.
    const size_t live = position_block_stats().live_bytes - before;
    INFO("key " << key << ": " << live << " live bytes, the cache stores " << previous->stored_bytes());
    REQUIRE(live >= previous->stored_bytes() - static_cast<size_t>(previous->ln_final_scale.size()) * sizeof(float));
    REQUIRE(live <= previous->stored_bytes() + previous->stored_bytes() / 50);
  }
  previous.reset();
  CHECK(position_block_stats().live_bytes == before);
}

TEST_CASE("typing at the end reuses the pooled large blocks: the pool holds what the next key asks for",
          "[cache][blocks][memory]") {
  // A logits-like activation (a full block is 5 MB) and a pattern with many heads (blocks of
  // 1-3 MB), each extended row by row as typing at the end does, the previous one dropped. The
  // last block grows by a row a key; a large block is allocated at its full size, so the block the
  // previous key freed serves the next key's. Sized by rows, each key asked for a size the pool
  // had never seen, and the pool filled with sizes nobody asked for again (issue 21).
  const Eigen::Index B = kPositionBlock, cols = 40000;
  const int heads = 200;
  PositionRows rows;
  rows.extend(nullptr, 0, 3 * B + 2, cols);
  PatternRows pattern;
  pattern.extend(nullptr, 0, 3 * B + 2, heads);
  const size_t large_full = static_cast<size_t>(B * cols) * sizeof(float);
  size_t fresh_after_warmup = 0;
  int crossings = 0;  // keys whose prompt starts a new block: that block index is new to the pool
  for (int key = 0; key < 2 * B + 5; ++key) {
    PositionRows next;
    next.extend(&rows, rows.rows() - 1, rows.rows() + 1, cols);  // the last token changed, one more
    next.set_rows(rows.rows() - 1, RowMatrixXf::Constant(2, cols, static_cast<float>(key)));
    PatternRows next_pattern;
    next_pattern.extend(&pattern, pattern.rows() - 1, pattern.rows() + 1, heads);
    rows = std::move(next);
    pattern = std::move(next_pattern);
    REQUIRE(rows(rows.rows() - 1, cols - 1) == static_cast<float>(key));
    if (rows.rows() % B == 1) ++crossings;
    const PositionBlockStats s = position_block_stats();
    INFO("key " << key << ": " << s.pooled_blocks << " pooled blocks, " << s.pooled_bytes << " bytes, "
                << s.fresh_large_blocks << " fresh large blocks, " << crossings << " new blocks started");
    // Pooled: what the last key freed (its partial blocks), not 64 MB of sizes never asked for again.
    CHECK(s.pooled_bytes <= 4 * large_full);
    if (key == 1) fresh_after_warmup = s.fresh_large_blocks;
    // After the first keys, a large block is allocated afresh only when a new block index starts
    // (a pattern block's size depends on its index), not at every key.
    if (key > 1) CHECK(s.fresh_large_blocks - fresh_after_warmup <= static_cast<size_t>(4 * crossings + 2));
  }
  CHECK(crossings == 2);
}
