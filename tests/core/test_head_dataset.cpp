// scan --heads (core/analysis/head_dataset.h): each head described over a data set. Checked
// against the same quantities computed here directly from each prompt's cache in double (the
// distance profile, the token totals, the entropy histogram, the output norm through the full
// product z_h W_O[h]), and for exact mergeability: shards, resume and random splits give one
// process's statistics bit for bit, and the sample is exactly the smallest keys of the whole set.

#include <catch2/catch.hpp>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "core/analysis/head_dataset.h"
#include "core/analysis/scan.h"
#include "core/error.h"
#include "core/io/base64.h"
#include "core/io/scan_io.h"
#include "core/model/cache.h"
#include "core/model/model.h"
#include "core/model/weights.h"
#include "core/session/session.h"
#include "test_support.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::shared_ptr<const hs::Model> tiny_model() {
  static const auto m = hs::Model::load(hs::builtin_model_dir());
  return m;
}

const std::vector<std::string> kProse = {
    "The cat sat on the mat, and the cat slept.",
    "Once upon a time there was a little girl who liked to play in the park.",
    "She saw a big dog. The big dog saw her too.",
    "Tom and Lily went to the shop. Tom bought an apple and Lily bought an apple.",
    "Hi.",
    "The sun was warm and the sky was blue, so they played outside all day long.",
    "Ben had a red ball. He threw the red ball to his friend, who threw it back.",
};

std::vector<std::shared_ptr<hs::ActivationCache>> runs(const std::vector<std::string>& texts) {
  std::vector<std::shared_ptr<hs::ActivationCache>> out;
  hs::RunOptions ro;
  ro.threads = 1;
  for (const std::string& t : texts) out.push_back(tiny_model()->run(tiny_model()->encode(t, true), ro));
  return out;
}

fs::path scratch(const std::string& name) { return hs::test::scratch_dir() / name; }

void write_lines(const fs::path& p, const std::vector<std::string>& lines) {
  std::ofstream out(p, std::ios::binary);
  for (const auto& l : lines) out << l << "\n";
}

json dataset_read_json(const fs::path& p) { return json::parse(hs::test::read_text(p)); }

// The state without its one floating-point accumulator (the output norm, merged to rounding).
json integer_state(json state) {
  state.erase("output_norm");
  return state;
}

}  // namespace

TEST_CASE("head statistics equal the same quantities computed from each prompt's cache", "[scan][heads]") {
  const auto m = tiny_model();
  const auto caches = runs(kProse);
  const hs::ModelConfig& c = m->config();
  const int L = c.n_layers, H = c.n_heads, dh = c.d_head;
  hs::HeadDatasetStats stats(L, H, c.n_ctx, 1000, 8);
  for (size_t i = 0; i < caches.size(); ++i) stats.add_prompt(*m, static_cast<int64_t>(i), *caches[i], true);

  int64_t queries = 0;
  for (const auto& cache : caches) queries += cache->n_pos() - 1;
  CHECK(stats.queries() == queries);
  const double width = std::log(static_cast<double>(c.n_ctx)) / hs::HeadDatasetStats::kEntropyBins;
  CHECK(stats.entropy_bin_width() == Approx(width).epsilon(1e-15));

  double worst_profile = 0, worst_mass = 0, worst_norm = 0;
  for (int l = 0; l < L; ++l)
    for (int h = 0; h < H; ++h) {
      std::vector<double> profile(static_cast<size_t>(c.n_ctx), 0.0);
      std::map<int32_t, double> key_mass, query_mass;
      std::map<int32_t, int64_t> key_count, query_count;
      std::vector<int64_t> entropy(hs::HeadDatasetStats::kEntropyBins, 0);
      double norm_sum = 0;
      for (const auto& cache : caches) {
        const auto& tok = cache->tokens();
        const int T = cache->n_pos();
        const hs::RowMatrixXf z = cache->layer(l).z.to_matrix();
        const hs::RowMatrixXf result = z.middleCols(h * dh, dh) * cache->weights()->W_O(l, h);  // [pos, d_model]
        for (int p = 1; p < T; ++p) ++key_count[tok[static_cast<size_t>(p)]];
        for (int q = 1; q < T; ++q) {
          ++query_count[tok[static_cast<size_t>(q)]];
          const auto row = cache->pattern_row(l, h, q);
          double e = 0, off_sink = 0;
          for (int k = 0; k <= q; ++k) {
            const double a = row[k];
            profile[static_cast<size_t>(q - k)] += a;
            if (k > 0) {
              key_mass[tok[static_cast<size_t>(k)]] += a;
              off_sink += a;
            }
            if (a > 0) e -= a * std::log(a);
          }
          query_mass[tok[static_cast<size_t>(q)]] += off_sink;
          ++entropy[static_cast<size_t>(std::min(static_cast<int>(e / width), hs::HeadDatasetStats::kEntropyBins - 1))];
          norm_sum += result.row(q).cast<double>().norm();
        }
      }
      const std::vector<double> got = stats.distance_profile(l, h);
      double total = 0, mean_d = 0;
      for (size_t d = 0; d < got.size(); ++d) {
        worst_profile = std::max(worst_profile, std::abs(got[d] - profile[d] / static_cast<double>(queries)));
        total += got[d];
        mean_d += static_cast<double>(d) * profile[d] / static_cast<double>(queries);
      }
      CHECK(total == Approx(1.0).margin(1e-6));
      CHECK(stats.mean_distance(l, h) == Approx(mean_d).margin(1e-6));
      const int64_t* eh = stats.entropy_histogram(l, h);
      for (int b = 0; b < hs::HeadDatasetStats::kEntropyBins; ++b) CHECK(eh[b] == entropy[static_cast<size_t>(b)]);
      const double norm_mean = norm_sum / static_cast<double>(queries);
      worst_norm = std::max(worst_norm, std::abs(stats.mean_output_norm(l, h) - norm_mean) / norm_mean);

      // Every token the head reads from, with its total and count, largest first.
      const auto keys = stats.key_tokens(l, h, 1 << 20);
      REQUIRE(keys.size() == key_mass.size());
      for (size_t i = 0; i < keys.size(); ++i) {
        worst_mass = std::max(worst_mass, std::abs(keys[i].mass - key_mass.at(keys[i].token)));
        CHECK(keys[i].count == key_count.at(keys[i].token));
        CHECK(keys[i].text == m->tokenizer().display(keys[i].token));
        if (i > 0) CHECK(keys[i - 1].mass >= keys[i].mass);
      }
      const auto qs = stats.query_tokens(l, h, 5);
      CHECK(qs.size() == 5);
      for (const auto& t : qs) {
        worst_mass = std::max(worst_mass, std::abs(t.mass - query_mass.at(t.token)));
        CHECK(t.count == query_count.at(t.token));
      }
    }
  INFO("profile " << worst_profile << ", token mass " << worst_mass << ", output norm (relative) " << worst_norm);
  // Each weight is rounded to 2^-32 once: a total over n weights is off by at most n * 2^-33.
  CHECK(worst_profile < 1e-8);
  CHECK(worst_mass < 1e-7);
  // The norm through the Gram matrix in double against the float32 product's norm.
  CHECK(worst_norm < 1e-5);
}

TEST_CASE("head statistics: the sample is the smallest keys and deciles split it by output norm", "[scan][heads]") {
  const auto m = tiny_model();
  const auto caches = runs(kProse);
  const int capacity = 23;
  hs::HeadDatasetStats stats(m->config().n_layers, m->config().n_heads, m->config().n_ctx, capacity, 6);
  for (size_t i = 0; i < caches.size(); ++i) stats.add_prompt(*m, static_cast<int64_t>(i) * 3, *caches[i], true);
  // Every (prompt, position >= 1) of the set, and the sample of one with its positions in order.
  hs::HeadDatasetStats everything(m->config().n_layers, m->config().n_heads, m->config().n_ctx, 1 << 12, 6);
  for (size_t i = 0; i < caches.size(); ++i) everything.add_prompt(*m, static_cast<int64_t>(i) * 3, *caches[i], true);
  const auto& all = everything.samples();
  int64_t eligible = 0;
  for (const auto& cache : caches) eligible += cache->n_pos() - 1;
  REQUIRE(static_cast<int64_t>(all.size()) == eligible);
  REQUIRE(stats.samples().size() == static_cast<size_t>(capacity));
  for (int i = 0; i < capacity; ++i) {
    const hs::HeadSample& s = stats.samples()[static_cast<size_t>(i)];
    CHECK(s.hash == all[static_cast<size_t>(i)].hash);
    CHECK(s.index == all[static_cast<size_t>(i)].index);
    CHECK(s.position == all[static_cast<size_t>(i)].position);
    // The window: up to 6 tokens ending at the query position, as the prompt has them.
    const auto& cache = caches[static_cast<size_t>(s.index / 3)];
    CHECK(s.first == std::max(0, s.position - 5));
    CHECK(s.tokens == std::vector<int32_t>(cache->tokens().begin() + s.first, cache->tokens().begin() + s.position + 1));
  }
  const int l = 3, h = 2;
  const auto deciles = stats.deciles(l, h);
  REQUIRE(deciles.size() == 10);
  size_t members = 0;
  float previous_high = 0;
  for (const auto& d : deciles) {
    members += d.examples.size();
    CHECK(d.examples.size() >= 2);  // 23 samples: 2 or 3 a decile
    CHECK(d.norm_low >= previous_high);
    previous_high = d.norm_high;
    for (const auto& e : d.examples) {
      CHECK(e.norm >= d.norm_low);
      CHECK(e.norm <= d.norm_high);
      // The example's pattern is the cache's row over its window.
      const auto& cache = caches[static_cast<size_t>(e.sample->index / 3)];
      const auto row = cache->pattern_row(l, h, e.sample->position);
      REQUIRE(e.pattern.size() == e.sample->tokens.size());
      for (size_t k = 0; k < e.pattern.size(); ++k) CHECK(e.pattern[k] == row[e.sample->first + static_cast<int>(k)]);
    }
  }
  CHECK(members == static_cast<size_t>(capacity));
}

TEST_CASE("head statistics: random splits merged equal one pass bit for bit", "[scan][heads]") {
  const auto m = tiny_model();
  const auto caches = runs(kProse);
  const hs::ModelConfig& c = m->config();
  hs::HeadDatasetStats whole(c.n_layers, c.n_heads, c.n_ctx, 17, 5);
  for (size_t i = 0; i < caches.size(); ++i) whole.add_prompt(*m, static_cast<int64_t>(i), *caches[i], true);
  std::mt19937 rng(7);
  for (int trial = 0; trial < 4; ++trial) {
    const int parts = 2 + trial;
    std::vector<hs::HeadDatasetStats> split(static_cast<size_t>(parts), hs::HeadDatasetStats(c.n_layers, c.n_heads, c.n_ctx, 17, 5));
    for (size_t i = 0; i < caches.size(); ++i)
      split[rng() % static_cast<size_t>(parts)].add_prompt(*m, static_cast<int64_t>(i), *caches[i], true);
    hs::HeadDatasetStats merged = split[static_cast<size_t>(parts - 1)];
    for (int p = parts - 2; p >= 0; --p) merged.merge(split[static_cast<size_t>(p)]);
    CHECK(integer_state(merged.state()) == integer_state(whole.state()));
    for (int l = 0; l < c.n_layers; ++l)
      for (int h = 0; h < c.n_heads; ++h)
        CHECK(merged.mean_output_norm(l, h) == Approx(whole.mean_output_norm(l, h)).epsilon(1e-12));
  }
  // A prompt given twice (shards that overlap) is refused, and so is another sampling.
  hs::HeadDatasetStats twice = whole;
  CHECK_THROWS_AS(twice.merge(whole), hs::Error);
  CHECK_THROWS_AS(twice.merge(hs::HeadDatasetStats(c.n_layers, c.n_heads, c.n_ctx, 18, 5)), hs::Error);

  // The state reads back to the same statistics.
  const hs::HeadDatasetStats back = hs::HeadDatasetStats::from_state(json::parse(whole.state().dump()), c.n_layers, c.n_heads, c.n_ctx);
  CHECK(back.state() == whole.state());
}

TEST_CASE("cli scan --heads: shards merged and a resumed run equal one process", "[scan][heads][cli]") {
  const fs::path input = scratch("heads.txt"), one = scratch("heads_one.json"), merged = scratch("heads_merged.npz");
  write_lines(input, kProse);
  fs::remove(one);
  const std::string common = " scan --heads --threads 1 --input " + hs::test::quote(input.string());
  hs::test::CliRun r = hs::test::run_cli(common + " -o " + hs::test::quote(one.string()));
  REQUIRE(r.code == 0);
  std::string shards;
  for (int i = 0; i < 3; ++i) {
    const fs::path out = scratch("heads_shard" + std::to_string(i) + ".json");
    REQUIRE(hs::test::run_cli(common + " --shard " + std::to_string(i) + "/3 -o " + hs::test::quote(out.string())).code == 0);
    shards += " " + hs::test::quote(out.string());
  }
  r = hs::test::run_cli("merge -o " + hs::test::quote(merged.string()) + shards);
  REQUIRE(r.code == 0);
  const json a = dataset_read_json(one), b = dataset_read_json(scratch("heads_merged.npz.json"));
  CHECK(integer_state(a["state"]["heads"]) == integer_state(b["state"]["heads"]));
  // The summary's every integer total, list and example is the same; only the norms' means may
  // differ in the last bits.
  json sa = a["heads"], sb = b["heads"];
  const hs::ModelConfig& c = tiny_model()->config();
  REQUIRE(sa["heads"].size() == static_cast<size_t>(c.n_layers * c.n_heads));
  for (json* s : {&sa, &sb})
    for (json& head : (*s)["heads"]) head.erase("output_norm");
  CHECK(sa == sb);
  const json h32 = a["heads"]["heads"][3 * c.n_heads + 2];
  CHECK(h32["label"] == "L3H2");
  CHECK(h32["deciles"].size() == 10);
  CHECK(h32["top_key_tokens"].size() == 20);

  // Stopped after two prompts and resumed: the same statistics.
  const fs::path part = scratch("heads_part.json");
  fs::remove(part);
  REQUIRE(hs::test::run_cli(common + " --stop-after 2 -o " + hs::test::quote(part.string())).code == 0);
  REQUIRE(hs::test::run_cli(common + " --resume -o " + hs::test::quote(part.string())).code == 0);
  CHECK(dataset_read_json(part)["state"] == a["state"]);
  // A scan without --heads cannot resume one with it (the settings differ).
  r = hs::test::run_cli(" scan --threads 1 --stop-after 1 --input " + hs::test::quote(input.string()) + " -o " +
                        hs::test::quote(scratch("heads_no.json").string()));
  REQUIRE(r.code == 0);
  r = hs::test::run_cli(common + " --resume -o " + hs::test::quote(scratch("heads_no.json").string()));
  CHECK(r.code != 0);
  CHECK(r.err.find("heads") != std::string::npos);
}

TEST_CASE("scan outputs whose head statistics were edited are refused with the reason", "[scan][heads][errors]") {
  const auto m = tiny_model();
  hs::ScanOptions o;
  o.repeat_random = 6;
  o.limit = 3;
  o.threads = 1;
  o.heads = true;
  hs::ScanState s = hs::new_scan_state(*m, o, hs::scan_settings(*m, o));
  hs::run_scan(*m, o, s);
  const std::vector<std::string> labels(static_cast<size_t>(m->config().n_layers * m->config().n_heads), "L?H?");
  const json good = hs::scan_to_json(s, labels);
  REQUIRE_NOTHROW(hs::scan_from_json(good, "good.json"));
  const auto refused = [&](const std::function<void(json&)>& edit, const std::string& says) {
    json j = good;
    edit(j);
    INFO(says);
    try {
      hs::scan_from_json(j, "edited.json");
      FAIL("accepted");
    } catch (const hs::Error& e) {
      CHECK(std::string(e.what()).find(says) != std::string::npos);
    }
  };
  refused([](json& j) { j["state"].erase("heads"); }, "has none");
  refused([](json& j) { j["settings"].erase("heads"); }, "do not ask for");
  refused([](json& j) { j["state"]["heads"]["distance"] = "AAAA"; }, "\"distance\" does not hold");
  refused([](json& j) { j["state"]["heads"]["key_mass"] = "A!AA"; }, "\"key_mass\"");
  refused([](json& j) { j["state"]["heads"]["samples"][0]["hash"] = 12345u; }, "hash is not its key's");
  refused([](json& j) { j["state"]["heads"]["samples"][0]["hash"] = -1; }, "has no hash");
  refused([](json& j) { j["state"]["heads"]["samples"][0]["position"] = 0; }, "position");
  refused([](json& j) { j["state"]["heads"]["tokens"][1] = j["state"]["heads"]["tokens"][0]; }, "listed twice");
  refused([](json& j) { j["state"]["heads"]["window"] = 1 << 30; }, "window");
  refused([](json& j) { j["settings"]["heads"]["samples"] = 3; }, "sampling");
}

TEST_CASE("base64 reads back what it wrote and refuses what is not base64", "[scan][heads]") {
  std::mt19937 rng(3);
  for (size_t n = 0; n < 40; ++n) {
    std::vector<uint8_t> bytes(n);
    for (auto& b : bytes) b = static_cast<uint8_t>(rng());
    const std::string text = hs::base64_encode(bytes.data(), bytes.size());
    CHECK(text.size() % 4 == 0);
    CHECK(hs::base64_decoded_size(text) == static_cast<int64_t>(n));
    CHECK(hs::base64_decode(text, "x") == bytes);
  }
  CHECK(hs::base64_encode("Man", 3) == "TWFu");
  CHECK(hs::base64_encode("Ma", 2) == "TWE=");
  CHECK(hs::base64_encode("M", 1) == "TQ==");
  CHECK_THROWS_AS(hs::base64_decode("TWE", "x"), hs::Error);
  CHECK_THROWS_AS(hs::base64_decode("T=Fu", "x"), hs::Error);
  CHECK_THROWS_AS(hs::base64_decode("TW=u", "x"), hs::Error);
  CHECK_THROWS_AS(hs::base64_decode("TWE=TWFu", "x"), hs::Error);
  CHECK_THROWS_AS(hs::base64_decode("TW\nu", "x"), hs::Error);
}
