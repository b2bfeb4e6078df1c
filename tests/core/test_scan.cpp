// headscope-cli scan and merge (core/analysis/scan.h): exact mergeable accumulators, the aggregates
// against the per-prompt analyses computed directly, bad lines by reason, resume, and shards merged
// into the result of one process. All on the built-in model and files of a few lines.

#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <array>

#include "core/analysis/dla.h"
#include "core/analysis/head_detectors.h"
#include "core/analysis/head_scores.h"
#include "core/analysis/patching.h"
#include "core/analysis/residual.h"
#include "core/analysis/scan.h"
#include "core/model/model.h"
#include "core/session/session.h"
#include "test_support.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

fs::path scratch(const std::string& name) {
  return hs::test::scratch_dir() / name;
}

void write_lines(const fs::path& p, const std::vector<std::string>& lines) {
  std::ofstream out(p, std::ios::binary);
  for (const auto& l : lines) out << l << "\n";
}

std::shared_ptr<const hs::Model> builtin() {
  static const auto m = hs::Model::load(hs::builtin_model_dir());
  return m;
}

// Prose lines of different lengths, some with repeated words so duplicate and induction scores exist.
const std::vector<std::string> kProse = {
    "The cat sat on the mat, and the cat slept.",
    "Once upon a time there was a little girl who liked to play in the park.",
    "She saw a big dog. The big dog saw her too.",
    "Tom and Lily went to the shop. Tom bought an apple and Lily bought an apple.",
    "Hi.",
    "The sun was warm and the sky was blue, so they played outside all day long.",
};

hs::ScanState scan_file(const fs::path& input, hs::ScanOptions o, const hs::ScanControl& control = {}) {
  const auto m = builtin();
  o.input = input;
  o.threads = 1;  // a busy machine makes threaded small runs wait on each other
  hs::ScanState s = hs::new_scan_state(*m, o, hs::scan_settings(*m, o));
  hs::run_scan(*m, o, s, control);
  return s;
}

// |a - b| <= rel * max(|a|, |b|) + abs.
bool close(double a, double b, double rel, double abs_tol = 0.0) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return std::abs(a - b) <= rel * std::max(std::abs(a), std::abs(b)) + abs_tol;
}

using Result = hs::test::CliRun;
using hs::test::quote;
Result scan_cli(const std::string& args) { return hs::test::run_cli(args); }

json read_json(const fs::path& p) { return json::parse(hs::test::read_text(p)); }

// Every aggregate's mean, std and count agree to `rel` (relative, on the mean's scale).
void require_same_aggregates(const json& a, const json& b, double rel) {
  REQUIRE(a["aggregates"].size() == b["aggregates"].size());
  for (auto it = a["aggregates"].begin(); it != a["aggregates"].end(); ++it) {
    const json& x = it.value();
    const json& y = b["aggregates"][it.key()];
    INFO(it.key());
    REQUIRE(x["count"] == y["count"]);
    const json fx = x["mean"].flatten(), fy = y["mean"].flatten(), sx = x["std"].flatten(), sy = y["std"].flatten();
    REQUIRE(fx.size() == fy.size());
    for (auto e = fx.begin(); e != fx.end(); ++e) {
      const json& v = fy[e.key()];
      if (e.value().is_null()) {
        CHECK(v.is_null());
        continue;
      }
      CHECK(close(e.value().get<double>(), v.get<double>(), rel, 1e-12));
      CHECK(close(sx[e.key()].get<double>(), sy[e.key()].get<double>(), rel, 1e-9));
    }
  }
}

}  // namespace

TEST_CASE("scan accumulators: random splits merged equal one pass", "[scan]") {
  std::mt19937_64 rng(7);
  std::normal_distribution<double> value(3.0, 2.0);
  std::vector<double> xs(1000);
  for (double& x : xs) x = value(rng) * 1e3;
  hs::MomentGrid whole(1, 2);
  for (double x : xs) {
    whole.add(0, 0, x);
    whole.add(0, 1, -x);
  }
  whole.add(0, 1, std::numeric_limits<double>::quiet_NaN());  // no score: not counted
  for (int trial = 0; trial < 20; ++trial) {
    // Split into a random number of random parts, accumulate each, merge in a random order.
    const int parts = 2 + static_cast<int>(rng() % 7);
    std::vector<hs::MomentGrid> grids(static_cast<size_t>(parts), hs::MomentGrid(1, 2));
    for (double x : xs) {
      const size_t k = rng() % static_cast<size_t>(parts);
      grids[k].add(0, 0, x);
      grids[k].add(0, 1, -x);
    }
    std::shuffle(grids.begin(), grids.end(), rng);
    hs::MomentGrid merged(1, 2);
    for (const auto& g : grids) merged.merge(g);
    for (int c = 0; c < 2; ++c) {
      CHECK(merged.count(0, c) == 1000);
      CHECK(close(merged.mean(0, c), whole.mean(0, c), 1e-12));
      CHECK(close(merged.variance(0, c), whole.variance(0, c), 1e-12));
    }
  }
  // The naive two-pass definition.
  double sum = 0.0;
  for (double x : xs) sum += x;
  const double mean = sum / 1000.0;
  double ss = 0.0;
  for (double x : xs) ss += (x - mean) * (x - mean);
  CHECK(close(whole.mean(0, 0), mean, 1e-12));
  CHECK(close(whole.variance(0, 0), ss / 1000.0, 1e-12));
  // The state reads back bit for bit through JSON text.
  hs::MomentGrid back = hs::MomentGrid::from_state(json::parse(whole.state().dump()), "test");
  CHECK(back.mean(0, 0) == whole.mean(0, 0));
  CHECK(back.m2(0, 1) == whole.m2(0, 1));
  CHECK(back.count(0, 1) == whole.count(0, 1));
  CHECK_THROWS_AS(back.merge(hs::MomentGrid(2, 2)), hs::Error);
}

TEST_CASE("scan aggregates equal the per-prompt analyses averaged", "[scan]") {
  const auto m = builtin();
  const fs::path input = scratch("prose.txt");
  write_lines(input, kProse);
  std::vector<std::string> rows;
  hs::ScanControl control;
  control.per_prompt = [&](const std::string& row) { rows.push_back(row); };
  const hs::ScanState s = scan_file(input, {}, control);
  REQUIRE(s.complete);
  REQUIRE(s.prompts == static_cast<int64_t>(kProse.size()));
  REQUIRE(rows.size() == kProse.size());
  CHECK(s.bad.empty());

  const int L = m->config().n_layers, H = m->config().n_heads;
  // Direct: each prompt's scores with head_detectors, DLA with decompose_residual +
  // direct_logit_attribution per position, entropy and loss from the pattern and the logits.
  std::vector<std::vector<double>> sum(5, std::vector<double>(static_cast<size_t>(L * H), 0.0));
  std::vector<std::vector<int>> count(5, std::vector<int>(static_cast<size_t>(L * H), 0));
  std::vector<double> loss_sum(16, 0.0);
  std::vector<int> loss_count(16, 0);
  for (const std::string& text : kProse) {
    const std::vector<int32_t> tokens = m->encode(text, true);
    hs::RunOptions one_thread;
    one_thread.threads = 1;
    const auto cache = m->run(tokens, one_thread);
    const int T = cache->n_pos();
    const hs::PromptHeadScores scores = hs::score_heads_on_prompt(*cache, true);
    std::vector<hs::LogitAttribution> dla;
    for (int p = 0; p + 1 < T; ++p)
      dla.push_back(hs::direct_logit_attribution(*cache, hs::decompose_residual(*cache, p), tokens[static_cast<size_t>(p + 1)]));
    for (int l = 0; l < L; ++l)
      for (int h = 0; h < H; ++h) {
        const size_t i = static_cast<size_t>(l * H + h);
        const float per_detector[3] = {scores.previous_token.scores(l, h), scores.duplicate_token.scores(l, h),
                                       scores.induction.scores(l, h)};
        for (int d = 0; d < 3; ++d)
          if (std::isfinite(per_detector[d])) {
            sum[static_cast<size_t>(d)][i] += per_detector[d];
            ++count[static_cast<size_t>(d)][i];
          }
        double entropy = 0.0;
        for (int q = 1; q < T; ++q) {
          const hs::RowMatrixXf row = cache->head_pattern(l, h).row(q).head(q + 1);
          for (int k = 0; k <= q; ++k)
            if (row(0, k) > 0) entropy -= row(0, k) * std::log(static_cast<double>(row(0, k)));
        }
        sum[3][i] += entropy / (T - 1);
        ++count[3][i];
        double d = 0.0;
        for (const auto& a : dla) d += a.per_head(l, h);
        sum[4][i] += d / (T - 1);
        ++count[4][i];
      }
    for (int p = 0; p + 1 < T && p < 16; ++p) {
      const auto row = cache->logits.row(p).cast<double>();
      const double lse = std::log((row.array() - row.maxCoeff()).exp().sum()) + row.maxCoeff();
      loss_sum[static_cast<size_t>(p)] += lse - row(tokens[static_cast<size_t>(p + 1)]);
      ++loss_count[static_cast<size_t>(p)];
    }
  }
  const char* names[5] = {"previous_token", "duplicate_token", "induction", "attention_entropy", "dla_next_token"};
  // Detector scores are the same floats both ways, summed in double: only the order of the
  // additions differs. Entropy and DLA are computed another way here (full pattern rows; every
  // part of the residual through the frozen norm): float rounding.
  const double tol[5] = {1e-9, 1e-9, 1e-9, 1e-5, 1e-4};
  for (int d = 0; d < 5; ++d) {
    INFO(names[d]);
    const hs::MomentGrid& g = s.grids.at(names[d]);
    for (int l = 0; l < L; ++l)
      for (int h = 0; h < H; ++h) {
        const size_t i = static_cast<size_t>(l * H + h);
        REQUIRE(g.count(l, h) == count[static_cast<size_t>(d)][i]);
        if (count[static_cast<size_t>(d)][i] > 0)
          CHECK(close(g.mean(l, h), sum[static_cast<size_t>(d)][i] / count[static_cast<size_t>(d)][i], tol[d], tol[d]));
      }
  }
  // Some heads have scores on some prompts only ("Hi." has no repeated token).
  CHECK(s.grids.at("induction").count(0, 0) < static_cast<int64_t>(kProse.size()));
  const hs::MomentGrid& lg = s.grids.at("loss_per_position");
  for (int p = 0; p < 16; ++p) {
    REQUIRE(lg.count(p, 0) == loss_count[static_cast<size_t>(p)]);
    if (loss_count[static_cast<size_t>(p)] > 0)
      CHECK(close(lg.mean(p, 0), loss_sum[static_cast<size_t>(p)] / loss_count[static_cast<size_t>(p)], 1e-5));
  }
  const json first = json::parse(rows[0]);
  CHECK(first["line"] == 1);
  CHECK(first["kind"] == "text");
  CHECK(first["induction"].size() == static_cast<size_t>(L));
}

TEST_CASE("scan --repeat-random draws the fixed scores' sequences and scores each prompt", "[scan]") {
  const auto m = builtin();
  hs::ScanOptions o;
  o.repeat_random = 20;
  o.limit = 6;
  o.seed = 3;
  o.threads = 1;
  std::vector<std::string> rows;
  hs::ScanControl control;
  control.per_prompt = [&](const std::string& row) { rows.push_back(row); };
  hs::ScanState s = hs::new_scan_state(*m, o, hs::scan_settings(*m, o));
  hs::run_scan(*m, o, s, control);
  REQUIRE(s.prompts == 6);
  REQUIRE(rows.size() == 6);
  // The splitmix64 stream drawn in order, sequence after sequence, as head_scores.cpp draws it
  // for `headscope-cli heads` (docs/head-scores.md); BOS is the built-in model's last id.
  uint64_t state = 3;
  const int32_t bos = m->bos_id();
  const uint64_t vocab = static_cast<uint64_t>(std::min(m->config().d_vocab, m->tokenizer().vocab_size()));
  std::vector<double> induction_sum(static_cast<size_t>(m->config().n_layers * m->config().n_heads), 0.0);
  hs::RunOptions one_thread;
  one_thread.threads = 1;
  for (int b = 0; b < 6; ++b) {
    std::vector<int32_t> r;
    for (int i = 0; i < 20; ++i) {
      state += 0x9E3779B97F4A7C15ull;
      uint64_t z = state;
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      z ^= z >> 31;
      int32_t t = static_cast<int32_t>(z % (vocab - 1));
      if (t >= bos) ++t;
      r.push_back(t);
    }
    std::vector<int32_t> seq = {bos};
    seq.insert(seq.end(), r.begin(), r.end());
    seq.insert(seq.end(), r.begin(), r.end());
    REQUIRE(hs::repeat_random_prompt(*m, 3, 20, b) == seq);
    REQUIRE(json::parse(rows[static_cast<size_t>(b)])["tokens"].get<std::vector<int32_t>>() == seq);
    const hs::DetectorScores d = hs::detect_heads(*m->run(seq, one_thread), hs::HeadDetector::Induction);
    for (int l = 0; l < d.scores.rows(); ++l)
      for (int h = 0; h < d.scores.cols(); ++h) induction_sum[static_cast<size_t>(l * d.scores.cols() + h)] += d.scores(l, h);
  }
  for (int l = 0; l < m->config().n_layers; ++l)
    for (int h = 0; h < m->config().n_heads; ++h)
      CHECK(close(s.grids.at("induction").mean(l, h), induction_sum[static_cast<size_t>(l * m->config().n_heads + h)] / 6, 1e-9));
}

TEST_CASE("scan counts bad lines by reason and goes on", "[scan][errors]") {
  const auto m = builtin();
  std::string long_line;
  for (int i = 0; i < 300; ++i) long_line += " cat";  // more tokens than the 256 of the context
  const fs::path text = scratch("bad.txt");
  write_lines(text, {"The cat sat.", "bad \xff\xfe bytes", "", "   ", long_line, "A dog ran.", "cut \xe2\x82 short"});
  hs::ScanState s = scan_file(text, {});
  CHECK(s.prompts == 2);
  CHECK(s.bad["invalid_utf8"].count == 2);
  CHECK(s.bad["invalid_utf8"].first_lines == std::vector<int64_t>{2, 7});
  CHECK(s.bad["empty"].count == 2);
  CHECK(s.bad["empty"].first_lines == std::vector<int64_t>{3, 4});
  CHECK(s.bad["too_long"].count == 1);
  CHECK(s.bad["too_long"].first_lines == std::vector<int64_t>{5});

  // With --max-tokens the long line is cut and counted, not refused.
  hs::ScanOptions cut;
  cut.max_tokens = 32;
  s = scan_file(text, cut);
  CHECK(s.prompts == 3);
  CHECK(s.truncated == 1);
  CHECK(s.bad.count("too_long") == 0);

  const fs::path jsonl = scratch("bad.jsonl");
  write_lines(jsonl, {
                         R"({"text": "The cat sat."})",
                         R"({"text": "unterminated)",
                         R"([1, 2])",
                         R"({"prompt": "no text field"})",
                         R"({"clean": "The cat sat on the", "corrupt": "The dog", "answer": " mat", "wrong": " cat"})",
                         R"({"clean": "The girl saw a", "corrupt": "The boy saw a", "answer": " tree and", "wrong": " ball"})",
                         R"({"clean": "The cat", "answer": " mat"})",
                         R"({"text": ""})",
                     });
  s = scan_file(jsonl, {});
  CHECK(s.prompts == 1);
  CHECK(s.bad["bad_json"].count == 2);
  CHECK(s.bad["bad_json"].first_lines == std::vector<int64_t>{2, 3});
  CHECK(s.bad["no_text"].first_lines == std::vector<int64_t>{4});
  CHECK(s.bad["patch_lengths_differ"].first_lines == std::vector<int64_t>{5});
  CHECK(s.bad["answer_not_one_token"].first_lines == std::vector<int64_t>{6});
  CHECK(s.bad["patch_fields_missing"].first_lines == std::vector<int64_t>{7});
  CHECK(s.bad["empty"].first_lines == std::vector<int64_t>{8});

  CHECK_THROWS_WITH(scan_file(scratch("does-not-exist.txt"), {}), Catch::Contains("cannot read the input"));
}

TEST_CASE("scan patch rows: the mean normalized effect of each row's sweep", "[scan]") {
  const auto m = builtin();
  const fs::path jsonl = scratch("patch.jsonl");
  const std::vector<std::array<std::string, 4>> rows = {
      {"The girl saw a tree. The girl saw a", "The boy saw a ball. The boy saw a", " tree", " ball"},
      {"When Mary and John went to the park, John gave a ball to", "When Mary and John went to the park, Mary gave a ball to",
       " Mary", " John"},
  };
  std::vector<std::string> lines;
  for (const auto& r : rows) lines.push_back(json{{"clean", r[0]}, {"corrupt", r[1]}, {"answer", r[2]}, {"wrong", r[3]}}.dump());
  lines.push_back(json{{"text", "A line of text as well."}}.dump());
  write_lines(jsonl, lines);
  const hs::ScanState s = scan_file(jsonl, {});
  INFO(json(s.bad.size()).dump());
  REQUIRE(s.patch_rows == 2);

  // Stopped inside a row's sweep (the first check is before the row, the next inside it): the
  // row is not counted and a resume does it again, equal to the uninterrupted scan.
  {
    hs::ScanOptions o;
    o.input = jsonl;
    o.threads = 1;
    hs::ScanState part = hs::new_scan_state(*m, o, hs::scan_settings(*m, o));
    int checks = 0;
    hs::ScanControl stop_inside;
    stop_inside.stop = [&] { return ++checks > 1; };
    hs::run_scan(*m, o, part, stop_inside);
    CHECK_FALSE(part.complete);
    CHECK(part.next_index == 0);
    CHECK(part.patch_rows == 0);
    CHECK(part.grids.at("patching_z").count(0, 0) == 0);
    hs::run_scan(*m, o, part);
    REQUIRE(part.complete);
    CHECK(hs::scan_to_json(part, {}) == hs::scan_to_json(s, {}));
  }
  CHECK(s.prompts == 1);
  const int L = m->config().n_layers, H = m->config().n_heads, n_ctx = m->config().n_ctx;
  // Per cell: the sum and the count of the rows' normalized effects (the rows differ in length,
  // so later positions have fewer rows).
  std::vector<double> resid_sum(static_cast<size_t>(L * n_ctx), 0.0), z_sum(static_cast<size_t>(L * H), 0.0);
  std::vector<int> resid_count(resid_sum.size(), 0);
  for (const auto& r : rows) {
    const hs::PatchingInputs in = hs::patching_inputs(*m, r[0], r[1], r[2], r[3]);
    hs::RunOptions one_thread;
    one_thread.threads = 1;
    hs::SweepControl sweep;
    sweep.threads = 1;
    const auto clean = m->run(in.clean, one_thread), corrupt = m->run(in.corrupt, one_thread);
    const hs::PatchingResult a = hs::patching_sweep(*clean, *corrupt, in.answer, in.wrong, hs::HookPoint::ResidPre, sweep);
    const hs::PatchingResult b = hs::patching_sweep(*clean, *corrupt, in.answer, in.wrong, hs::HookPoint::Z, sweep);
    for (int l = 0; l < L; ++l) {
      for (int p = 0; p < a.normalized.cols(); ++p) {
        resid_sum[static_cast<size_t>(l * n_ctx + p)] += a.normalized(l, p);
        ++resid_count[static_cast<size_t>(l * n_ctx + p)];
      }
      for (int h = 0; h < H; ++h) z_sum[static_cast<size_t>(l * H + h)] += b.normalized(l, h);
    }
  }
  for (int l = 0; l < L; ++l) {
    for (int h = 0; h < H; ++h)
      CHECK(close(s.grids.at("patching_z").mean(l, h), z_sum[static_cast<size_t>(l * H + h)] / 2, 1e-6, 1e-7));
    for (int p = 0; p < n_ctx; ++p) {
      const size_t i = static_cast<size_t>(l * n_ctx + p);
      REQUIRE(s.grids.at("patching_resid_pre").count(l, p) == resid_count[i]);
      if (resid_count[i] > 0) CHECK(close(s.grids.at("patching_resid_pre").mean(l, p), resid_sum[i] / resid_count[i], 1e-6, 1e-7));
    }
  }
}

TEST_CASE("cli scan: stopped, resumed, equal to one uninterrupted run", "[scan][cli]") {
  const fs::path input = scratch("resume.txt"), whole = scratch("whole.json"), part = scratch("part.json");
  const fs::path rows_whole = scratch("whole.jsonl"), rows_part = scratch("part.jsonl");
  write_lines(input, kProse);
  for (const fs::path& p : {whole, part}) fs::remove(p);
  const std::string common = " scan --threads 1 --input " + quote(input.string()) + " --max-tokens 64";
  Result r = scan_cli(common + " --per-prompt " + quote(rows_whole.string()) + " -o " + quote(whole.string()));
  REQUIRE(r.code == 0);
  r = scan_cli(common + " --per-prompt " + quote(rows_part.string()) + " --stop-after 2 -o " + quote(part.string()));
  REQUIRE(r.code == 0);
  CHECK(r.err.find("--resume") != std::string::npos);
  json j = read_json(part);
  CHECK(j["complete"] == false);
  CHECK(j["counts"]["prompts"] == 2);
  // Starting again over an incomplete output is refused; other settings cannot resume it.
  r = scan_cli(common + " -o " + quote(part.string()));
  CHECK(r.code != 0);
  CHECK(r.err.find("incomplete scan") != std::string::npos);
  r = scan_cli("scan --threads 1 --input " + quote(input.string()) + " --max-tokens 32 --resume -o " + quote(part.string()));
  CHECK(r.code != 0);
  CHECK(r.err.find("max_tokens") != std::string::npos);
  // Resume twice: after two more, then to the end.
  r = scan_cli(common + " --per-prompt " + quote(rows_part.string()) + " --resume --stop-after 2 -o " + quote(part.string()));
  REQUIRE(r.code == 0);
  r = scan_cli(common + " --per-prompt " + quote(rows_part.string()) + " --resume -o " + quote(part.string()));
  REQUIRE(r.code == 0);
  j = read_json(part);
  const json w = read_json(whole);
  CHECK(j["complete"] == true);
  // The same prompts in the same order: the accumulators are equal bit for bit.
  CHECK(j["state"] == w["state"]);
  CHECK(j["aggregates"] == w["aggregates"]);
  CHECK(j["counts"] == w["counts"]);
  CHECK(hs::test::read_text(rows_part) == hs::test::read_text(rows_whole));
}

TEST_CASE("cli scan: shards merged equal one process", "[scan][cli]") {
  const fs::path input = scratch("shards.txt"), one = scratch("one.json"), merged = scratch("merged.json");
  std::vector<std::string> lines = kProse;
  lines.push_back("\xc3\x28 invalid");
  lines.insert(lines.end(), kProse.begin(), kProse.begin() + 3);
  write_lines(input, lines);
  const std::string common = " scan --threads 1 --input " + quote(input.string());
  REQUIRE(scan_cli(common + " -o " + quote(one.string())).code == 0);
  std::string shard_files;
  for (int i = 0; i < 3; ++i) {
    const fs::path out = scratch("shard" + std::to_string(i) + ".json");
    REQUIRE(scan_cli(common + " --shard " + std::to_string(i) + "/3 -o " + quote(out.string())).code == 0);
    shard_files += " " + quote(out.string());
  }
  Result r = scan_cli("merge -o " + quote(merged.string()) + shard_files);
  REQUIRE(r.code == 0);
  const json a = read_json(one), b = read_json(merged);
  require_same_aggregates(a, b, 1e-6);
  CHECK(a["counts"] == b["counts"]);
  CHECK(a["bad_lines"] == b["bad_lines"]);
  CHECK(b["merged_shards"] == json({0, 1, 2}));

  // Missing or mismatched shards are refused by name.
  r = scan_cli("merge -o " + quote(scratch("bad_merge.json").string()) + " " + quote(scratch("shard0.json").string()));
  CHECK(r.code != 0);
  CHECK(r.err.find("1/3, 2/3 is missing") != std::string::npos);
  const fs::path other = scratch("other.json");
  REQUIRE(scan_cli(common + " --limit 5 --shard 1/3 -o " + quote(other.string())).code == 0);
  r = scan_cli("merge -o " + quote(scratch("bad_merge.json").string()) + " " + quote(scratch("shard0.json").string()) + " " +
          quote(other.string()) + " " + quote(scratch("shard2.json").string()));
  CHECK(r.code != 0);
  CHECK(r.err.find("limit") != std::string::npos);
}

TEST_CASE("scan outputs that were edited are refused before they are used", "[scan][errors]") {
  const auto m = builtin();
  const fs::path input = scratch("edited.txt");
  write_lines(input, {"The cat sat. The cat sat."});
  hs::ScanOptions o;
  const hs::ScanState s = scan_file(input, o);
  const json good = hs::scan_to_json(s, {});
  CHECK(hs::scan_from_json(good, "good.json").prompts == 1);
  auto refused = [&](const std::function<void(json&)>& edit, const std::string& why) {
    json j = good;
    edit(j);
    CHECK_THROWS_WITH(hs::scan_from_json(j, "edited.json"), Catch::Contains("edited.json") && Catch::Contains(why));
  };
  refused([](json& j) { j["state"]["grids"]["induction"]["rows"] = 1; }, "rows x cols");
  refused([](json& j) { j["state"]["grids"]["induction"]["rows"] = -4; }, "\"rows\" is -4; expected an integer from 0");
  refused([](json& j) {
    j["state"]["grids"]["induction"] = j["state"]["grids"]["loss_per_position"];
  }, "wrong shape");
  refused([](json& j) { j["shard"]["index"] = 5; }, "does not exist");
  refused([](json& j) { j["shape"]["n_layers"] = 99; }, "does not match");
  refused([](json& j) { j["state"]["grids"]["induction"]["count"][0] = -1; }, "\"count\" entry is -1");
  refused([](json& j) { j.erase("counts"); }, "not a readable scan output");
  refused([](json& j) { j["format"] = "other"; }, "not a scan output");
  // tools/fuzz/fuzz_scan_output: numbers that nlohmann's get<int>() cast (undefined behaviour for a
  // float out of range) or wrapped (4294967297 read as shard count 1) are refused by value.
  refused([](json& j) { j["version"] = 1e30; }, "it is version 1e+30");
  refused([](json& j) { j["state"]["grids"]["induction"]["rows"] = 1e30; }, "\"rows\" is 1e+30");
  refused([](json& j) { j["shard"]["count"] = 4294967297; }, "its shard count is 4294967297; expected an integer");
  refused([](json& j) { j["shape"]["n_heads"] = 4.0; }, "its n_heads is 4.0");
  refused([](json& j) { j["counts"]["prompts"] = -5; }, "its count of prompts is -5");
  refused([](json& j) { j["counts"]["next_index"] = 9007199254740993; }, "its next index is 9007199254740993");
  refused([](json& j) { j["bad_lines"] = {{"empty", {{"count", 1}, {"first_lines", json::array({0})}}}}; }, "line is 0");
}

TEST_CASE("merging edited scan outputs refuses what would overflow or allocate per claimed shard", "[scan][errors]") {
  const auto m = builtin();
  const fs::path input = scratch("merge_edited.txt");
  write_lines(input, {"The cat sat. The cat sat."});
  hs::ScanOptions o;
  const hs::ScanState s = scan_file(input, o);
  const json good = hs::scan_to_json(s, {});
  auto shard = [&](int index, int count, const std::function<void(json&)>& edit) {
    json j = good;
    j["shard"] = {{"index", index}, {"count", count}};
    edit(j);
    return hs::scan_from_json(j, "shard" + std::to_string(index) + ".json");
  };
  // tools/fuzz/fuzz_scan_output: a shard count of two billion made merge allocate 8 GB before it
  // found the missing shards; now it lists the first ten and counts the rest.
  CHECK_THROWS_WITH(hs::merge_scans({shard(0, 2000000000, [](json&) {})}, {"shard0.json"}),
                    "shard 1/2000000000, 2/2000000000, 3/2000000000, 4/2000000000, 5/2000000000, 6/2000000000, "
                    "7/2000000000, 8/2000000000, 9/2000000000, 10/2000000000 and 1999999989 more is missing; merge "
                    "needs every shard of the run.");
  // Counts at the 2^53 a file may hold: their sum overflowed int64 in the merge (signed overflow).
  const int64_t max_count = int64_t{1} << 53;
  auto huge_prompts = [&](json& j) { j["counts"]["prompts"] = max_count; };
  CHECK_THROWS_WITH(hs::merge_scans({shard(0, 2, huge_prompts), shard(1, 2, huge_prompts)}, {"a.json", "b.json"}),
                    Catch::Contains("more than 2^53 prompts"));
  auto huge_cell = [&](json& j) { j["state"]["grids"]["induction"]["count"][0] = max_count; };
  CHECK_THROWS_WITH(hs::merge_scans({shard(0, 2, huge_cell), shard(1, 2, huge_cell)}, {"a.json", "b.json"}),
                    Catch::Contains("more than 2^53 values in one cell"));
  // Ordinary shards still merge.
  const hs::ScanState merged = hs::merge_scans({shard(1, 2, [](json&) {}), shard(0, 2, [](json&) {})}, {"b", "a"});
  CHECK(merged.prompts == 2 * s.prompts);
}
