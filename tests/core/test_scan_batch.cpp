// The data-set scan's batched pass (forward_batch in core/model/forward.h): several prompts' rows
// stacked into the same matrix products, attention per prompt. Checked against forward() one
// prompt at a time, bit for bit, on a model of every layout the fixtures have (learned and rotary
// positions, grouped queries, q/k norms, sliding windows, soft-caps, parallel blocks), and the
// scan's batched path against its one-prompt path (--batch-tokens 1): the same state, bit for bit.
// --aggregates: the chosen aggregates equal a full scan's, the others stay empty.

#include <catch2/catch.hpp>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/analysis/scan.h"
#include "core/error.h"
#include "core/model/forward.h"
#include "core/model/model.h"
#include "core/session/session.h"
#include "test_support.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::shared_ptr<const hs::Model> batch_model() {
  static const auto m = hs::Model::load(hs::builtin_model_dir());
  return m;
}

bool same_bits(const float* a, const float* b, size_t n) { return std::memcmp(a, b, n * sizeof(float)) == 0; }

// Prompts of lengths that cross position blocks (32) and a window, with ids from the vocabulary.
std::vector<std::vector<int32_t>> prompts_for(const hs::Model& m) {
  const int32_t V = std::min(m.config().d_vocab, 64);
  std::vector<std::vector<int32_t>> out;
  for (int n : {1, 7, 33, 20, 70}) {
    if (n > m.config().n_ctx) continue;
    std::vector<int32_t> p;
    for (int i = 0; i < n; ++i) p.push_back(static_cast<int32_t>((i * 7 + n * 3) % V));
    out.push_back(p);
  }
  return out;
}

fs::path batch_scratch(const std::string& name) { return hs::test::scratch_dir() / name; }

// forward_batch on 2 threads against each prompt run alone on 1, bit for bit: patterns and z of
// every layer, and with logits the final norm's scales and the logits.
void check_batch_bits(const hs::Model& m, const std::vector<std::vector<int32_t>>& prompts, bool logits) {
  const hs::ModelConfig& c = m.config();
  hs::BatchRunOptions bo;
  bo.keep_z = true;
  bo.logits = logits;
  bo.threads = 2;
  const auto batch = hs::forward_batch(m.weights(), prompts, bo);
  REQUIRE(batch.size() == prompts.size());
  for (size_t b = 0; b < prompts.size(); ++b) {
    hs::RunOptions ro;
    ro.threads = 1;
    const auto alone = m.run(prompts[b], ro);
    const int T = static_cast<int>(prompts[b].size());
    REQUIRE(batch[b]->tokens() == prompts[b]);
    for (int l = 0; l < c.n_layers; ++l) {
      for (int h = 0; h < c.n_heads; ++h)
        for (int q = 0; q < T; ++q)
          REQUIRE(same_bits(batch[b]->pattern_row(l, h, q).data(), alone->pattern_row(l, h, q).data(),
                            static_cast<size_t>(q + 1)));
      const hs::RowMatrixXf z1 = batch[b]->layer(l).z.to_matrix(), z2 = alone->layer(l).z.to_matrix();
      REQUIRE(same_bits(z1.data(), z2.data(), static_cast<size_t>(z1.size())));
    }
    if (logits) {
      REQUIRE(same_bits(batch[b]->ln_final_scale.data(), alone->ln_final_scale.data(), static_cast<size_t>(T)));
      const hs::RowMatrixXf a = batch[b]->logits.to_matrix(), e = alone->logits.to_matrix();
      REQUIRE(same_bits(a.data(), e.data(), static_cast<size_t>(a.size())));
    }
  }
}

}  // namespace

TEST_CASE("forward_batch gives each prompt the bits forward gives it alone, on every layout", "[scan][batch]") {
  std::vector<fs::path> dirs = {hs::builtin_model_dir()};
  for (const char* name : {"gemma2_window", "gemma3_local_global", "llama_gqa", "neox_parallel", "qwen2_window",
                           "qwen3_qknorm", "bf16_prefixed"})
    dirs.push_back(hs::test::fixture_model(name));
  for (const fs::path& dir : dirs) {
    INFO(dir.filename().string());
    const auto m = hs::Model::load(dir);
    const auto prompts = prompts_for(*m);
    for (const bool logits : {false, true}) check_batch_bits(*m, prompts, logits);
  }
}

TEST_CASE("forward_batch over rows enough for its norms, activations and adds to share the threads keeps the bits",
          "[scan][batch]") {
  // A batch of at least 2^18 floats a matrix (core/model/ops.cpp, kParallelElements) splits the
  // norms' rows, the activation's elements and the residual adds between the threads; a prompt
  // alone, on one thread, does none of that. The built-in model (d_model 256, d_mlp 1024) needs
  // 1024 rows; the gated, RMSNorm llama_gqa fixture (d_model 32) 8192.
  for (const auto& [dir, rows] : {std::pair{hs::builtin_model_dir(), 1100}, std::pair{hs::test::fixture_model("llama_gqa"), 8300}}) {
    INFO(dir.filename().string());
    const auto m = hs::Model::load(dir);
    const int T = std::min(m->config().n_ctx, 128);
    const int32_t V = m->config().d_vocab;
    std::vector<std::vector<int32_t>> prompts;
    for (int n = 0, b = 0; n < rows; n += T, ++b) {
      std::vector<int32_t> p;
      for (int i = 0; i < T; ++i) p.push_back(static_cast<int32_t>((i * 31 + b * 17 + 5) % V));
      prompts.push_back(p);
    }
    check_batch_bits(*m, prompts, true);
  }
}

TEST_CASE("forward_batch stops at the last layer asked for", "[scan][batch]") {
  const auto m = batch_model();
  hs::BatchRunOptions bo;
  bo.layers = 2;
  const auto batch = hs::forward_batch(m->weights(), prompts_for(*m), bo);
  const auto alone = m->run(prompts_for(*m)[2]);
  CHECK(batch[2]->layer(1).pattern.rows() == 33);
  CHECK(batch[2]->layer(1).pattern.row(3, 30) == alone->pattern_row(1, 3, 30));
  CHECK(batch[2]->layer(2).pattern.empty());
  CHECK(batch[2]->layer(1).z.empty());  // not asked for
  CHECK(batch[2]->logits.rows() == 0);
  // A bad prompt is refused as forward() refuses it.
  std::vector<std::vector<int32_t>> bad = {{1, 2}, {m->config().d_vocab}};
  CHECK_THROWS_AS(hs::forward_batch(m->weights(), bad, bo), hs::Error);
}

TEST_CASE("forward_batch's last layer, computed without its values, has every head's pattern bits", "[scan][batch]") {
  // The layer a scan of patterns stops at multiplies its normalized rows by Q | K of W_qkv only,
  // into scratch whose V columns still hold the previous pass's: every head's pattern there (and
  // below) must be forward()'s, on every layout, grouped key/value heads among them.
  std::vector<fs::path> dirs = {hs::builtin_model_dir()};
  for (const char* name : {"gemma2_window", "llama_gqa", "neox_parallel", "qwen3_qknorm", "bf16_prefixed"})
    dirs.push_back(hs::test::fixture_model(name));
  for (const fs::path& dir : dirs) {
    INFO(dir.filename().string());
    const auto m = hs::Model::load(dir);
    const hs::ModelConfig& c = m->config();
    const auto prompts = prompts_for(*m);
    hs::BatchScratch scratch;
    hs::BatchRunOptions full;
    full.logits = true;
    hs::forward_batch(m->weights(), prompts, full, &scratch);  // the scratch's V columns now hold values
    for (int layers = 1; layers <= std::min(c.n_layers, 2); ++layers) {
      hs::BatchRunOptions bo;
      bo.layers = layers;
      bo.threads = 2;
      const auto batch = hs::forward_batch(m->weights(), prompts, bo, &scratch);
      for (size_t b = 0; b < prompts.size(); ++b) {
        const auto alone = m->run(prompts[b]);
        for (int l = 0; l < layers; ++l)
          for (int h = 0; h < c.n_heads; ++h)
            for (int q = 0; q < static_cast<int>(prompts[b].size()); ++q) {
              INFO("layers " << layers << " prompt " << b << " L" << l << "H" << h << " query " << q);
              REQUIRE(same_bits(batch[b]->pattern_row(l, h, q).data(), alone->pattern_row(l, h, q).data(),
                                static_cast<size_t>(q + 1)));
            }
        CHECK(batch[b]->layer(layers - 1).z.empty());
      }
    }
  }
}

TEST_CASE("scan: the batched pass and one prompt at a time give the same state bit for bit", "[scan][batch]") {
  const auto m = batch_model();
  const fs::path input = batch_scratch("batch.jsonl");
  {
    std::ofstream out(input, std::ios::binary);
    const char* lines[] = {
        R"({"text": "The cat sat on the mat, and the cat slept."})",
        R"({"text": "Once upon a time there was a little girl who liked to play in the park."})",
        R"({"clean": "The girl saw a tree. The girl saw a", "corrupt": "The boy saw a ball. The boy saw a", "answer": " tree", "wrong": " ball"})",
        R"({"text": "Hi."})",
        R"(not json)",
        R"({"text": "Tom and Lily went to the shop. Tom bought an apple and Lily bought an apple."})",
        R"({"text": "She saw a big dog. The big dog saw her too."})",
    };
    for (const char* l : lines) out << l << "\n";
  }
  std::vector<json> states;
  std::vector<std::string> rows;
  for (const int64_t batch : {int64_t{1}, int64_t{40}, int64_t{0}}) {
    hs::ScanOptions o;
    o.input = input;
    o.threads = 2;
    o.heads = true;
    o.batch_tokens = batch;
    hs::ScanState s = hs::new_scan_state(*m, o, hs::scan_settings(*m, o));
    std::string per_prompt;
    hs::ScanControl control;
    control.per_prompt = [&](const std::string& row) { per_prompt += row; };
    hs::run_scan(*m, o, s, control);
    CHECK(s.prompts == 5);
    CHECK(s.patch_rows == 1);
    states.push_back(hs::scan_to_json(s, {}));
    rows.push_back(per_prompt);
  }
  CHECK(states[1] == states[0]);
  CHECK(states[2] == states[0]);
  CHECK(rows[1] == rows[0]);
  CHECK(rows[2] == rows[0]);
}

TEST_CASE("scan --aggregates computes the chosen ones as a full scan does and leaves the others empty",
          "[scan][batch][cli]") {
  const auto m = batch_model();
  hs::ScanOptions o;
  o.repeat_random = 10;
  o.limit = 6;
  o.threads = 1;
  hs::ScanState full = hs::new_scan_state(*m, o, hs::scan_settings(*m, o));
  hs::run_scan(*m, o, full);
  o.aggregates = {"induction", "previous_token"};
  const json settings = hs::scan_settings(*m, o);
  CHECK(settings["aggregates"] == json({"previous_token", "induction"}));
  hs::ScanState some = hs::new_scan_state(*m, o, settings);
  std::string per_prompt;
  hs::ScanControl control;
  control.per_prompt = [&](const std::string& row) { per_prompt += row; };
  hs::run_scan(*m, o, some, control);
  for (const std::string& name : hs::scan_text_aggregate_names()) {
    INFO(name);
    const bool chosen = name == "induction" || name == "previous_token";
    const hs::MomentGrid& g = some.grids.at(name);
    for (int r = 0; r < g.rows(); ++r)
      for (int col = 0; col < g.cols(); ++col) {
        if (chosen) {
          CHECK(g.count(r, col) == full.grids.at(name).count(r, col));
          CHECK(g.mean(r, col) == full.grids.at(name).mean(r, col));
        } else {
          CHECK(g.count(r, col) == 0);
        }
      }
  }
  const json row = json::parse(per_prompt.substr(0, per_prompt.find('\n')));
  CHECK(row.contains("induction"));
  CHECK(!row.contains("dla_next_token"));
  CHECK(!row.contains("mean_loss"));
  // A scan of other aggregates cannot resume or merge with this one.
  CHECK_THROWS_WITH(hs::require_same_settings(hs::scan_settings(*m, o), full.settings, "full.json"),
                    Catch::Contains("aggregates"));
  o.aggregates = {"induction", "patching_z"};
  CHECK_THROWS_WITH(hs::scan_settings(*m, o), Catch::Contains("no aggregate \"patching_z\""));

  const hs::test::CliRun r = hs::test::run_cli("scan --repeat-random 5 --limit 2 --aggregates induction,entropy -o " +
                                               hs::test::quote(batch_scratch("agg.json").string()));
  CHECK(r.code != 0);
  CHECK(r.err.find("\"entropy\" is not an aggregate") != std::string::npos);
}
