// scan --units (core/analysis/unit_dataset.h): every unit described over a data set. Checked
// against a brute-force computation from each prompt's cache (counts, maxima, histogram bins, the
// top 20 by a full sort, the sample as the smallest keys of every active position), and for exact
// mergeability: shards merged and a resumed run give one process's state bit for bit, in the API
// and through the CLI (dashboard folders file for file).

#include <catch2/catch.hpp>

#include <algorithm>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <tuple>

#include "core/analysis/scan.h"
#include "core/analysis/unit_dataset.h"
#include "core/analysis/units.h"
#include "core/error.h"
#include "core/features/sae.h"
#include "core/io/splitmix64.h"
#include "core/io/unit_dashboards.h"
#include "core/model/cache.h"
#include "core/model/model.h"
#include "core/session/session.h"
#include "test_support.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::shared_ptr<const hs::Model> builtin() {
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

fs::path scratch(const std::string& name) { return hs::test::scratch_dir() / name; }

void write_lines(const fs::path& p, const std::vector<std::string>& lines) {
  std::ofstream out(p, std::ios::binary);
  for (const auto& l : lines) out << l << "\n";
}

std::string sae_dir() { return (hs::test::source_dir() / "resources/models/headscope-tiny/saes/resid_pre_2").string(); }

hs::ScanState scan(const fs::path& input, const std::string& units, int shard = 0, int shards = 1,
                   int64_t stop_after = -1, hs::ScanState* resume = nullptr) {
  hs::ScanOptions o;
  o.input = input;
  o.units = units;
  o.threads = 1;
  o.aggregates = {"induction"};
  o.shard_index = shard;
  o.shard_count = shards;
  hs::ScanState s = resume ? *resume : hs::new_scan_state(*builtin(), o, hs::scan_settings(*builtin(), o));
  hs::ScanControl c;
  c.stop_after = stop_after;
  hs::run_scan(*builtin(), o, s, c);
  return s;
}

uint64_t key(int64_t index, int p) {
  return hs::splitmix64_mix(hs::splitmix64_mix(static_cast<uint64_t>(index) + 0x9e3779b97f4a7c15ULL) ^
                            static_cast<uint64_t>(p));
}

}  // namespace

TEST_CASE("unit statistics equal a brute-force computation over every position", "[scan][units]") {
  const fs::path input = scratch("units_prose.txt");
  write_lines(input, kProse);
  for (const std::string& spec : {std::string("mlp"), "sae:" + sae_dir()}) {
    INFO(spec);
    const hs::ScanState s = scan(input, spec);
    const hs::UnitSource src = hs::resolve_unit_source(*builtin(), spec);
    REQUIRE(s.units.n_units() == src.n_units);
    struct Hit { float act; int64_t index; int p; };
    std::vector<std::vector<Hit>> hits(static_cast<size_t>(src.n_units));
    int64_t positions = 0;
    for (size_t i = 0; i < kProse.size(); ++i) {
      hs::RunOptions ro;
      ro.threads = 1;
      const auto cache = builtin()->run(builtin()->encode(kProse[i], true), ro);
      positions += cache->n_pos();
      for (const auto& g : src.groups) {
        const hs::RowMatrixXf a = src.activations(*cache, g);
        for (int p = 0; p < a.rows(); ++p)
          for (int c = 0; c < a.cols(); ++c)
            if (a(p, c) > 0.0f) hits[static_cast<size_t>(g.first_unit + c)].push_back({a(p, c), static_cast<int64_t>(i), p});
      }
    }
    CHECK(s.units.positions() == positions);
    int64_t checked_lists = 0;
    for (int64_t u = 0; u < src.n_units; ++u) {
      auto& h = hits[static_cast<size_t>(u)];
      REQUIRE(s.units.active(u) == static_cast<int64_t>(h.size()));
      float mx = 0.0f;
      std::vector<int64_t> bins(hs::UnitDatasetStats::kBins, 0);
      for (const Hit& x : h) mx = std::max(mx, x.act), ++bins[static_cast<size_t>(hs::UnitDatasetStats::bin_of(x.act))];
      REQUIRE(s.units.act_max(u) == mx);
      REQUIRE(std::equal(bins.begin(), bins.end(), s.units.histogram(u)));
      std::vector<Hit> by_act = h;
      std::sort(by_act.begin(), by_act.end(), [](const Hit& a, const Hit& b) {
        return a.act != b.act ? a.act > b.act : std::tie(a.index, a.p) < std::tie(b.index, b.p);
      });
      const auto& top = s.units.top(u);
      REQUIRE(top.size() == std::min<size_t>(by_act.size(), hs::UnitDatasetStats::kTopK));
      for (size_t k = 0; k < top.size(); ++k) {
        REQUIRE(top[k].act == by_act[k].act);
        REQUIRE(top[k].index == by_act[k].index);
        REQUIRE(top[k].position == by_act[k].p);
        REQUIRE(top[k].acts[static_cast<size_t>(top[k].position - top[k].first)] == top[k].act);
      }
      std::vector<Hit> by_key = h;
      std::sort(by_key.begin(), by_key.end(),
                [](const Hit& a, const Hit& b) { return key(a.index, a.p) < key(b.index, b.p); });
      const auto& sample = s.units.sample(u);
      REQUIRE(sample.size() == std::min<size_t>(by_key.size(), hs::UnitDatasetStats::kDefaultSamples));
      for (size_t k = 0; k < sample.size(); ++k) {
        REQUIRE(sample[k].index == by_key[k].index);
        REQUIRE(sample[k].position == by_key[k].p);
      }
      checked_lists += !top.empty();
    }
    CHECK(checked_lists > 0);
  }
}

TEST_CASE("unit statistics: shards merged and a resumed run equal one process bit for bit", "[scan][units]") {
  const fs::path input = scratch("units_merge.txt");
  write_lines(input, kProse);
  for (const std::string& spec : {std::string("mlp:1"), "sae:" + sae_dir()}) {
    INFO(spec);
    const hs::ScanState one = scan(input, spec);
    const json want = one.units.state();
    const hs::ScanState merged = hs::merge_scans({scan(input, spec, 0, 3), scan(input, spec, 1, 3), scan(input, spec, 2, 3)},
                                                 {"a", "b", "c"});
    CHECK(merged.units.state() == want);
    hs::ScanState part = scan(input, spec, 0, 1, 3);
    REQUIRE_FALSE(part.complete);
    // Through the JSON, as --resume reads it.
    hs::ScanState reread = hs::scan_from_json(hs::scan_to_json(part, {}), "part");
    const hs::ScanState resumed = scan(input, spec, 0, 1, -1, &reread);
    CHECK(resumed.units.state() == want);
  }
}

TEST_CASE("unit statistics stay bounded: the state does not grow with the number of prompts", "[scan][units]") {
  std::vector<std::string> many;
  for (int r = 0; r < 6; ++r) many.insert(many.end(), kProse.begin(), kProse.end());
  const fs::path few_in = scratch("units_few.txt"), many_in = scratch("units_many.txt");
  write_lines(few_in, std::vector<std::string>(kProse.begin(), kProse.end()));
  write_lines(many_in, many);
  const hs::ScanState few = scan(few_in, "mlp:0"), lots = scan(many_in, "mlp:0");
  CHECK(lots.units.positions() == 6 * few.units.positions());
  for (int64_t u = 0; u < lots.units.n_units(); ++u) {
    REQUIRE(lots.units.top(u).size() <= hs::UnitDatasetStats::kTopK);
    REQUIRE(lots.units.sample(u).size() <= static_cast<size_t>(hs::UnitDatasetStats::kDefaultSamples));
    for (const auto& e : lots.units.top(u)) REQUIRE(e.tokens.size() <= static_cast<size_t>(hs::UnitDatasetStats::kDefaultWindow));
  }
  // Six times the prompts: the state at most 2.5x (lists fill up to their caps, then stop growing).
  CHECK(lots.units.state().dump().size() < 2.5 * few.units.state().dump().size());
}

TEST_CASE("histogram bins are monotone and hold their values", "[scan][units]") {
  float prev = 0.0f;
  int prev_bin = 0;
  for (float x = 1e-6f; x < 1e6f; x *= 1.07f) {
    const int b = hs::UnitDatasetStats::bin_of(x);
    REQUIRE(b >= prev_bin);
    if (b > 0 && b < hs::UnitDatasetStats::kBins - 1) {
      REQUIRE(hs::UnitDatasetStats::bin_low(b) <= x);
      REQUIRE(x < hs::UnitDatasetStats::bin_low(b + 1));
    }
    prev = x;
    prev_bin = b;
  }
  (void)prev;
}

TEST_CASE("cli scan --units: dashboards in Neuronpedia's layout, shards merged equal one process", "[scan][units][cli]") {
  const fs::path input = scratch("units_cli.txt");
  write_lines(input, kProse);
  const std::string common = " scan --aggregates induction --threads 1 --units " + hs::test::quote("sae:" + sae_dir()) +
                             " --input " + hs::test::quote(input.string());
  const fs::path one = scratch("units_one.json");
  REQUIRE(hs::test::run_cli(common + " -o " + hs::test::quote(one.string())).code == 0);
  std::string shards;
  for (int i = 0; i < 2; ++i) {
    const fs::path out = scratch("units_shard" + std::to_string(i) + ".json");
    REQUIRE(hs::test::run_cli(common + " --shard " + std::to_string(i) + "/2 -o " + hs::test::quote(out.string())).code == 0);
    shards += " " + hs::test::quote(out.string());
  }
  const fs::path merged = scratch("units_merged.json");
  const hs::test::CliRun r = hs::test::run_cli("merge -o " + hs::test::quote(merged.string()) + shards);
  REQUIRE(r.code == 0);
  const fs::path a = scratch("units_one.units"), b = scratch("units_merged.units");
  const json index = json::parse(hs::test::read_text(a / "index.json"));
  CHECK(index["format"] == "headscope-unit-dashboards");
  CHECK(index["source"]["kind"] == "sae");
  REQUIRE(index["units"].size() == 2048);
  int64_t files = 0;
  for (const auto& e : fs::directory_iterator(a)) {
    ++files;
    REQUIRE(hs::test::read_text(e.path()) == hs::test::read_text(b / e.path().filename()));
  }
  CHECK(files == 2049);
  // A unit that fired: every field of the layout.
  int64_t fired = -1;
  for (const json& u : index["units"])
    if (u["frac_nonzero"].get<double>() > 0.0) fired = u["unit"].get<int64_t>();
  REQUIRE(fired >= 0);
  const json d = json::parse(hs::test::read_text(a / ("u" + std::to_string(fired) + ".json")));
  for (const char* k : {"index", "act_max", "frac_nonzero", "histogram", "top_logits", "bottom_logits",
                        "examples_quantiles", "examples_top"})
    CHECK(d.contains(k));
  CHECK(d["top_logits"].size() == 10);
  CHECK(d["examples_top"][0]["maxValue"] == d["act_max"]);
  // Each example is also a Neuronpedia activation record (schema.prisma's Activation).
  for (const json& e : d["examples_top"]) {
    const std::vector<float> values = e["values"].get<std::vector<float>>();
    CHECK(e["tokens"].size() == values.size());
    CHECK(e["minValue"].get<float>() == *std::min_element(values.begin(), values.end()));
    CHECK(e["maxValue"].get<float>() == values.at(e["maxValueTokenIndex"].get<size_t>()));
    CHECK(e["dataIndex"] == std::to_string(e["index"].get<int64_t>()));
    CHECK_FALSE(e.contains("binMin"));
  }
  REQUIRE_FALSE(d["examples_quantiles"].empty());
  for (const json& q : d["examples_quantiles"])
    for (const json& e : q["examples"]) {
      CHECK(e["binMin"] == q["act_low"]);
      CHECK(e["binMax"] == q["act_high"]);
      CHECK(e["maxValue"].get<float>() >= q["act_low"].get<float>());
      CHECK(e["maxValue"].get<float>() <= q["act_high"].get<float>());
    }
  CHECK(d["histogram"]["bin_edges"].size() == d["histogram"]["bar_heights"].size() + 1);

  // The app's reader (core/io/unit_dashboards.h) reads the folder back.
  const hs::UnitDashboardIndex x = hs::read_unit_dashboard_index(a);
  CHECK(x.units == 2048);
  CHECK(x.fingerprint() == builtin()->fingerprint());
  const hs::UnitDashboard rd = hs::read_unit_dashboard(x, fired);
  CHECK(rd.act_max == d["act_max"].get<float>());
  CHECK(rd.examples_top.size() == d["examples_top"].size());
  CHECK(rd.bar_heights.size() == d["histogram"]["bar_heights"].size());
  CHECK(rd.hook == "blocks.2.hook_resid_pre");
  CHECK_THROWS_AS(hs::read_unit_dashboard(x, 2048), hs::Error);
  CHECK_THROWS_AS(hs::parse_unit_dashboard("{\"unit\": 1}", "u1.json"), hs::Error);
  CHECK_THROWS_AS(hs::read_unit_dashboard_index(scratch("no_such_folder")), hs::Error);

  // Which of the window's units the folder describes (hs::dashboard_unit): this SAE's, on this
  // model; never another model's, SAE's, hook's or kind's.
  REQUIRE(x.groups.size() == 1);
  CHECK(x.groups[0].first == 0);
  CHECK(x.groups[0].width == 2048);
  const hs::SaeSet set = hs::load_sae_folder(sae_dir());
  REQUIRE(set.saes.size() == 1);
  const hs::Sae& sae = set.saes[0];
  hs::DashboardUnitsQuery q;
  q.kind = "sae";
  q.layer = sae.layer;
  q.width = sae.d_sae;
  q.hook_in = sae.hook_in;
  q.hook_out = sae.hook_out;
  q.architecture = sae.architecture;
  q.sae_name = fs::absolute(sae_dir()).lexically_normal().filename().string();
  const std::string fp = builtin()->fingerprint();
  CHECK(hs::dashboard_unit(x, fp, q, fired) == fired);
  CHECK(hs::dashboard_unit(x, fp, q, 2048) == -1);
  CHECK(hs::dashboard_unit(x, "another model", q, fired) == -1);
  hs::DashboardUnitsQuery other = q;
  other.sae_name = "another_sae";
  CHECK(hs::dashboard_unit(x, fp, other, fired) == -1);
  other = q;
  other.hook_in = other.hook_out = "blocks.1.hook_resid_pre";
  CHECK(hs::dashboard_unit(x, fp, other, fired) == -1);
  other = q;
  other.kind = "mlp";
  CHECK(hs::dashboard_unit(x, fp, other, fired) == -1);
  // An index whose groups do not add up to its units is refused.
  json broken = index;
  broken["source"]["units"] = 2049;
  CHECK_THROWS_AS(hs::parse_unit_dashboard_index(broken.dump(), "index.json"), hs::Error);
}

TEST_CASE("cli scan --units refuses an unknown source, a layer the model lacks and an SAE that does not fit", "[scan][units][cli][errors]") {
  const fs::path input = scratch("units_bad.txt");
  write_lines(input, kProse);
  const std::string common = " scan --input " + hs::test::quote(input.string()) + " -o " +
                             hs::test::quote(scratch("units_bad.json").string()) + " --units ";
  hs::test::CliRun r = hs::test::run_cli(common + "attn");
  CHECK(r.code != 0);
  CHECK(r.err.find("is not a unit source") != std::string::npos);
  r = hs::test::run_cli(common + "mlp:9");
  CHECK(r.code != 0);
  CHECK(r.err.find("has layers 0 .. 3") != std::string::npos);
  r = hs::test::run_cli(common + hs::test::quote("sae:" + scratch("no_such_sae").string()));
  CHECK(r.code != 0);
  CHECK_FALSE(fs::exists(scratch("units_bad.units")));
}

TEST_CASE("scan outputs whose unit statistics were edited are refused with the reason", "[scan][units][errors]") {
  const fs::path input = scratch("units_edit.txt");
  write_lines(input, kProse);
  const json good = hs::scan_to_json(scan(input, "mlp:0"), {});
  const auto refused = [&](const std::function<void(json&)>& edit, const std::string& reason) {
    json j = good;
    edit(j);
    try {
      (void)hs::scan_from_json(j, "edited.json");
      FAIL("accepted");
    } catch (const hs::Error& e) {
      INFO(e.what());
      CHECK(std::string(e.what()).find(reason) != std::string::npos);
    }
  };
  refused([](json& j) { j["settings"]["units"]["units"] = int64_t{1} << 40; }, "units");
  refused([](json& j) { j["state"]["units"]["active"] = "AAAA"; }, "do not hold");
  refused([](json& j) { j["state"]["units"].erase("top"); }, "malformed");
  refused([](json& j) { j["state"].erase("units"); }, "its settings ask for unit statistics");
  refused([](json& j) {
    json& top = j["state"]["units"]["top"];
    for (json& t : top)
      if (t.size() >= 2) { std::swap(t[0], t[1]); return; }
  }, "out of order");
}
