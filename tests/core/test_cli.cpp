// headscope-cli end to end: the contract of DESIGN.md, its errors, and that a failed run leaves
// no output file.

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/io/npz_reader.h"
#include "core/model/hooks.h"
#include "core/model/intervention.h"
#include "core/model/model.h"
#include "core/tensor/safetensors.h"
#include "test_support.h"

namespace fs = std::filesystem;

namespace {

using Result = hs::test::CliRun;
using hs::test::quote;

Result cli(const std::string& args) { return hs::test::run_cli(args); }

std::string fixture(const char* name) { return quote(hs::test::fixture_model(name).string()); }

fs::path scratch(const std::string& name) {
  return hs::test::scratch_dir() / name;
}

}  // namespace

TEST_CASE("cli info prints the architecture as JSON", "[cli]") {
  const Result r = cli("info --model " + fixture("f16_plain"));
  REQUIRE(r.code == 0);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["n_layer"] == 2);
  CHECK(j["n_head"] == 4);
  CHECK(j["d_model"] == 32);
  CHECK(j["d_mlp"] == 48);
  CHECK(j["d_vocab"] == 291);
  CHECK(j["tied_unembedding"] == false);
}

TEST_CASE("cli tokenize never adds BOS", "[cli]") {
  const Result r = cli("tokenize --model " + fixture("f32_prefixed") + " --text 'The cat sat on the mat!'");
  REQUIRE(r.code == 0);
  const auto j = nlohmann::json::parse(r.out);
  // The fixture README gives these ids for BOS + this text.
  CHECK(j["ids"] == nlohmann::json({51, 257, 273, 270, 267, 270, 220, 262, 258, 280, 270, 0}));
  CHECK(j["tokens"].size() == j["ids"].size());
  CHECK(j["labels"][1] == "he");
}

TEST_CASE("cli run writes JSON and NPZ with every key", "[cli]") {
  const fs::path json_out = scratch("run.json"), npz_out = scratch("run.npz");
  Result r = cli("run --model " + fixture("f32_prefixed") + " --text 'The cat sat' -o " + quote(json_out.string()));
  REQUIRE(r.code == 0);
  const auto j = nlohmann::json::parse(hs::test::read_text(json_out));
  const auto model = hs::Model::load(hs::test::fixture_model("f32_prefixed"));
  CHECK(j["tokens"][0] == 290);  // BOS prepended
  const int S = static_cast<int>(j["tokens"].size());
  for (const std::string& key : model->run(std::vector<int32_t>(static_cast<size_t>(S), 1))->keys()) CHECK(j.contains(key));
  CHECK(j["blocks.0.attn.hook_attn_scores"][0][0][1].is_null());  // masked
  CHECK(j["logits"].size() == static_cast<size_t>(S));

  r = cli("run --model " + fixture("f32_prefixed") + " --tokens 290,51,257 --no-bos -o " + quote(npz_out.string()));
  REQUIRE(r.code == 0);
  const std::string npz = hs::test::read_text(npz_out);
  CHECK(npz.substr(0, 4) == std::string("PK\x03\x04", 4));
  CHECK(npz.find("blocks.1.attn.hook_pattern.npy") != std::string::npos);
  CHECK(npz.find("{'descr': '<f4', 'fortran_order': False, 'shape': (4, 3, 3), }") != std::string::npos);
}

TEST_CASE("cli errors: one line on stderr, non-zero exit, no output file", "[cli][errors]") {
  const fs::path out = scratch("never.json");
  fs::remove(out);
  const std::string m = " --model " + fixture("f32_prefixed");
  const struct {
    std::string args;
    std::string message;
  } cases[] = {
      {"run" + m + " --tokens 290,51,99999 -o " + quote(out.string()), "outside the vocabulary"},
      {"run" + m + " --tokens 290,x -o " + quote(out.string()), "not one"},
      {"run" + m + " --text 'hi' -o " + quote(out.string() + ".txt"), ".json or .npz"},
      {"run" + m + " -o " + quote(out.string()), "exactly one of --text"},
      {"run" + m + " --text 'hi'", "needs -o"},
      {"run --model /nonexistent/model --text hi -o " + quote(out.string()), "no such folder"},
      {"run" + m + " --text " + quote(std::string(200, 'x')) + " -o " + quote(out.string()), "context"},
      {"run" + m + " --text hi -o /nonexistent-dir/out.json", "does not exist"},
      {"run" + m + " --text \"$(printf '\\377')\" -o " + quote(out.string()), "UTF-8"},
      {"frobnicate", "unknown command"},
      {"info --bogus", "unknown option"},
      {"generate" + m + " --text hi", "-n N"},
  };
  for (const auto& c : cases) {
    INFO(c.args);
    const Result r = cli(c.args);
    CHECK(r.code != 0);
    CHECK(r.err.find(c.message) != std::string::npos);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    CHECK(!fs::exists(out));
  }
}

TEST_CASE("cli help and version", "[cli]") {
  for (const char* cmd : {"--help", "info --help", "tokenize --help", "run --help", "heads --help", "generate --help"}) {
    const Result r = cli(cmd);
    INFO(cmd);
    CHECK(r.code == 0);
    CHECK(r.out.find("Usage") != std::string::npos);
  }
  CHECK(cli("--version").out.find("headscope-cli ") == 0);
}

TEST_CASE("cli generate continues the text", "[cli]") {
  const Result r = cli("generate --model " + fixture("f32_prefixed") + " --text 'The cat' -n 5");
  REQUIRE(r.code == 0);
  CHECK(r.out.rfind("The cat", 0) == 0);
  CHECK(r.out.size() > std::string("The cat\n").size());
}

TEST_CASE("cli lens writes [n_layers + 1, pos, d_vocab] log-probs to NPZ and JSON", "[cli][lens]") {
  const fs::path npz_out = scratch("lens.npz"), json_out = scratch("lens.json");
  const std::string tokens = "290,51,257,273,270,267,270,220,262,258,280,270,0";  // the fixture's own
  Result r = cli("lens --model " + fixture("f32_prefixed") + " --tokens " + tokens + " -o " + quote(npz_out.string()));
  REQUIRE(r.code == 0);
  CHECK(r.err.empty());
  const auto arrays = hs::read_npz_file(npz_out);
  REQUIRE(arrays.size() == 2);
  CHECK(arrays[0].name == "lens.logprobs");
  CHECK(arrays[0].tensor.shape == std::vector<int64_t>{3, 13, 291});
  CHECK(arrays[1].name == "tokens");
  // The float64 reference of the same tokens (tests/fixtures/analyses), to 1e-4 relative.
  const auto ref = hs::SafetensorsFile::open(hs::test::source_dir() / "tests/fixtures/analyses/f32_prefixed/lens.safetensors");
  const hs::test::Comparison c = hs::test::compare(ref->to_f32(*ref->find("lens.logprobs")), arrays[0].tensor.data);
  CHECK(c.relative <= 1e-4);

  r = cli("lens --model " + fixture("f32_prefixed") + " --text 'The cat' -o " + quote(json_out.string()));
  REQUIRE(r.code == 0);
  const auto j = nlohmann::json::parse(hs::test::read_text(json_out));
  CHECK(j["tokens"][0] == 290);  // BOS prepended
  const size_t S = j["tokens"].size();
  CHECK(j["streams"] == nlohmann::json({"blocks.0.hook_resid_pre", "blocks.1.hook_resid_pre", "blocks.1.hook_resid_post"}));
  REQUIRE(j["lens.logprobs"].size() == 3);
  CHECK(j["lens.logprobs"][2].size() == S);
  CHECK(j["lens.logprobs"][2][0].size() == 291);
  double total = 0.0;  // a distribution over the vocabulary
  for (const auto& v : j["lens.logprobs"][1][S - 1]) total += std::exp(v.get<double>());
  CHECK(total == Approx(1.0).epsilon(1e-5));
}

TEST_CASE("cli circuits writes a head's spectra and copying score", "[cli][circuits]") {
  const fs::path out = scratch("circuits.json");
  Result r = cli("circuits --model " + fixture("f16_plain") + " --head 1.3 -o " + quote(out.string()));
  REQUIRE(r.code == 0);
  auto j = nlohmann::json::parse(hs::test::read_text(out));
  const auto ref = nlohmann::json::parse(
      hs::test::read_text(hs::test::source_dir() / "tests/fixtures/analyses/f16_plain/circuits.json"));
  // A head after layer 0 reads the extended embedding by default (docs/circuits.md).
  const nlohmann::json* head = nullptr;
  for (const auto& h : ref["heads_extended"])
    if (h["layer"] == 1 && h["head"] == 3) head = &h;
  REQUIRE(head != nullptr);
  for (const char* key : {"qk_singular_values", "ov_singular_values", "ov_eigenvalues_real", "ov_eigenvalues_imag"}) {
    INFO(key);
    REQUIRE(j[key].size() == 8);  // d_head
    double scale = 0.0, diff = 0.0;
    for (size_t i = 0; i < 8; ++i) {
      scale = std::max(scale, std::abs((*head)[key][i].get<double>()));
      diff = std::max(diff, std::abs((*head)[key][i].get<double>() - j[key][i].get<double>()));
    }
    CHECK(diff <= 1e-4 * std::max(scale, 1.0));
  }
  for (size_t i = 1; i < 8; ++i) {
    CHECK(j["qk_singular_values"][i] <= j["qk_singular_values"][i - 1]);
    CHECK(j["ov_eigenvalues_real"][i] <= j["ov_eigenvalues_real"][i - 1]);
  }
  CHECK(std::abs(j["copying_score"].get<double>() - (*head)["copying_score"].get<double>()) <= 1e-4);
  CHECK(j["token_vectors"] == "extended");
  CHECK(!j.contains("qk_scores"));
  // --embedding raw: the raw embedding rows, as the reference's "heads".
  REQUIRE(cli("circuits --model " + fixture("f16_plain") + " --head 1.3 --embedding raw -o " + quote(out.string())).code == 0);
  const auto raw = nlohmann::json::parse(hs::test::read_text(out));
  CHECK(raw["token_vectors"] == "raw");
  for (const auto& h : ref["heads"])
    if (h["layer"] == 1 && h["head"] == 3)
      CHECK(std::abs(raw["copying_score"].get<double>() - h["copying_score"].get<double>()) <= 1e-4);
  // A layer-0 head runs before layer 0's MLP, and a wrong name says which names there are.
  Result bad = cli("circuits --model " + fixture("f16_plain") + " --head 0.1 --embedding extended -o " + quote(out.string()));
  CHECK(bad.code == 1);
  CHECK(bad.err.find("layer 0's heads read the raw embedding") != std::string::npos);
  bad = cli("circuits --model " + fixture("f16_plain") + " --head 1.3 --embedding cooked -o " + quote(out.string()));
  CHECK(bad.code == 2);
  CHECK(bad.err.find("use raw (the embedding rows), extended") != std::string::npos);

  r = cli("circuits --model " + fixture("f32_prefixed") + " --head L0H1 --tokens 290,51,257,51 --top-k 3 -o " +
          quote(out.string()));
  REQUIRE(r.code == 0);
  j = nlohmann::json::parse(hs::test::read_text(out));
  CHECK(j["tokens"] == nlohmann::json({290, 51, 257, 51}));
  CHECK(j["qk_scores"].size() == 4);
  CHECK(j["qk_scores"][0].size() == 4);
  CHECK(j["qk_scores"][1] == j["qk_scores"][3]);  // the same token, the same row: no positions
  CHECK(j["ov_top_ids"][0].size() == 3);
  CHECK(j["ov_self_ranks"].size() == 4);
}

TEST_CASE("cli lens and circuits refuse bad input with one clear line", "[cli][errors]") {
  const fs::path out = scratch("never_analysis.json");
  fs::remove(out);
  const std::string m = " --model " + fixture("f32_prefixed"), o = " -o " + quote(out.string());
  const struct {
    std::string args;
    std::string message;
    int code;
  } cases[] = {
      {"circuits" + m + o, "headscope-cli: circuits needs --head LAYER.HEAD (e.g. --head 0.3).\n", 2},
      {"circuits" + m + " --head 1.2", "headscope-cli: circuits needs -o OUT.json.\n", 2},
      {"circuits" + m + " --head x" + o,
       "headscope-cli: --head expects LAYER.HEAD like 0.3 (layers 0..1, heads 0..3), got \"x\".\n", 2},
      {"circuits" + m + " --head 1" + o,
       "headscope-cli: --head expects LAYER.HEAD like 0.3 (layers 0..1, heads 0..3), got \"1\".\n", 2},
      {"circuits" + m + " --head 1." + o,
       "headscope-cli: --head expects LAYER.HEAD like 0.3 (layers 0..1, heads 0..3), got \"1.\".\n", 2},
      {"circuits" + m + " --head -1.0" + o,
       "headscope-cli: --head -1.0: layer -1 does not exist; the model has 2 layers (0..1).\n", 2},
      {"circuits" + m + " --head 2.0" + o,
       "headscope-cli: --head 2.0: layer 2 does not exist; the model has 2 layers (0..1).\n", 2},
      {"circuits" + m + " --head 1.4" + o,
       "headscope-cli: --head 1.4: head 4 does not exist; the model has 4 heads per layer (0..3).\n", 2},
      {"circuits" + m + " --head 1.2 -o " + quote(out.string() + ".npz"),
       "headscope-cli: -o " + out.string() + ".npz: the output must end in .json.\n", 2},
      {"circuits" + m + " --head 1.2 --text hi --tokens 1" + o,
       "headscope-cli: circuits takes at most one of --text TEXT or --tokens 1,2,3.\n", 2},
      {"circuits" + m + " --head 1.2 --tokens 290,291" + o,
       "headscope-cli: error: token id 291 is outside the vocabulary (0..290).\n", 1},
      {"circuits" + m + " --head 1.2 -o /nonexistent-dir/out.json",
       "headscope-cli: error: /nonexistent-dir/out.json: cannot write: the folder /nonexistent-dir does not exist.\n", 1},
      {"lens" + m + o, "headscope-cli: lens needs exactly one of --text TEXT or --tokens 1,2,3.\n", 2},
      {"lens" + m + " --text hi", "headscope-cli: lens needs -o OUT.npz or -o OUT.json.\n", 2},
      {"lens" + m + " --text hi -o " + quote(out.string() + ".csv"),
       "headscope-cli: -o " + out.string() + ".csv: the output must end in .npz or .json.\n", 2},
      {"lens" + m + " --text hi -o /nonexistent-dir/out.npz",
       "headscope-cli: error: /nonexistent-dir/out.npz: cannot write: the folder /nonexistent-dir does not exist.\n", 1},
      {"lens" + m + " --tokens 290,999" + o, "outside the vocabulary", 1},
  };
  for (const auto& c : cases) {
    INFO(c.args);
    const Result r = cli(c.args);
    CHECK(r.code == c.code);
    if (c.message.back() == '\n') CHECK(r.err == c.message);
    else CHECK(r.err.find(c.message) != std::string::npos);
    CHECK(r.out.empty());
    CHECK(!fs::exists(out));
  }
  // A folder that cannot be written to: the same refusal as every export (R48).
  if (::geteuid() != 0) {
    const fs::path locked = scratch("locked_analysis");
    fs::create_directories(locked);
    fs::permissions(locked, fs::perms::owner_read | fs::perms::owner_exec);
    const Result r = cli("lens" + m + " --text hi -o " + quote((locked / "out.npz").string()));
    CHECK(r.code == 1);
    CHECK(r.err.find("Permission denied") != std::string::npos);
    fs::permissions(locked, fs::perms::owner_all);
  }
  for (const char* cmd : {"lens --help", "circuits --help"}) {
    INFO(cmd);
    const Result r = cli(cmd);
    CHECK(r.code == 0);
    CHECK(r.out.find("Usage: headscope-cli " + std::string(cmd).substr(0, std::string(cmd).find(' '))) == 0);
  }
  const Result help = cli("--help");
  CHECK(help.out.find("headscope-cli lens ") != std::string::npos);
  CHECK(help.out.find("headscope-cli circuits ") != std::string::npos);
}

// ---- the command table (app/cli/commands.h): every list of commands and options comes from it

namespace {

std::vector<std::string> table_commands() {
  const Result r = cli("--list-commands");
  REQUIRE(r.code == 0);
  std::vector<std::string> names;
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);) names.push_back(line);
  REQUIRE(names.size() >= 10);
  return names;
}

// The option names of a command's --help "Options:" list ("-o, --output OUT" gives "-o").
std::vector<std::string> help_options(const std::string& help) {
  std::vector<std::string> names;
  std::istringstream in(help.substr(help.find("\nOptions:\n")));
  for (std::string line; std::getline(in, line);)
    if (line.rfind("  -", 0) == 0) names.push_back(line.substr(2, line.find_first_of(" ,", 2) - 2));
  return names;
}

}  // namespace

TEST_CASE("cli without a command prints the main help, listing every command", "[cli]") {
  const Result r = cli("");
  CHECK(r.code == 0);
  CHECK(r.err.empty());
  CHECK(r.out == cli("--help").out);
  CHECK(r.out.find("Usage:") != std::string::npos);
  for (const std::string& name : table_commands()) {
    INFO(name);
    CHECK(r.out.find("  headscope-cli " + name + " ") != std::string::npos);  // its usage line
    CHECK(r.out.find("\n  " + name + "  ") != std::string::npos);             // its summary line
  }
}

TEST_CASE("cli: an unknown word is an error naming every command, not a fall-through", "[cli][errors]") {
  for (const char* word : {"frobnicate", "gen", "--text"}) {
    INFO(word);
    const Result r = cli(std::string(word) + " hi");
    CHECK(r.code == 2);
    CHECK(r.out.empty());
    CHECK(r.err.rfind("headscope-cli: unknown command \"" + std::string(word) + "\"; commands are ", 0) == 0);
    for (const std::string& name : table_commands()) CHECK(r.err.find(name) != std::string::npos);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  }
}

TEST_CASE("cli: every command's --help works, and an unknown option names that command's options", "[cli][errors]") {
  for (const std::string& name : table_commands()) {
    INFO(name);
    const Result help = cli(name + " --help");
    CHECK(help.code == 0);
    CHECK(help.out.rfind("Usage: headscope-cli " + name + " ", 0) == 0);
    CHECK(cli(name + " -h").out == help.out);
    const std::vector<std::string> options = help_options(help.out);
    CHECK(!options.empty());
    const Result r = cli(name + " --bogus");
    CHECK(r.code == 2);
    CHECK(r.out.empty());
    CHECK(r.err.rfind("headscope-cli: unknown option \"--bogus\" for `" + name + "`, which takes ", 0) == 0);
    for (const std::string& o : options) CHECK(r.err.find(o) != std::string::npos);
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  }
  // An option of another command is unknown here (no flag is shared by accident).
  CHECK(cli("info --ablate 1.0").err.find("unknown option \"--ablate\" for `info`") != std::string::npos);
}

TEST_CASE("README's command line section lists every command of the table", "[cli][docs]") {
  const std::string readme = hs::test::read_text(hs::test::source_dir() / "README.md");
  const size_t begin = readme.find("\n## Command line\n");
  REQUIRE(begin != std::string::npos);
  const std::string section = readme.substr(begin, readme.find("\n## ", begin + 1) - begin);
  for (const std::string& name : table_commands()) {
    INFO(name);
    CHECK(section.find("headscope-cli " + name + " ") != std::string::npos);
  }
}

using hs::test::write_npy;

TEST_CASE("cli hooks lists every hook point, and run --edit and --steer edit the run as the core does", "[cli][edits]") {
  const std::string model = fixture("llama_gqa");
  const auto m = hs::Model::load(hs::test::fixture_model("llama_gqa"));
  const fs::path listing = scratch("hooks.json");
  Result r = cli("hooks --model " + model + " -o " + quote(listing.string()));
  REQUIRE(r.code == 0);
  const auto j = nlohmann::json::parse(hs::test::read_text(listing));
  CHECK(j["hooks"].size() == hs::hook_listing(&m->config()).size());
  // Every key of a run is one of the listed hooks (per-layer ones as blocks.{l}.NAME).
  const auto cache = m->run(std::vector<int32_t>{1, 5, 9});
  for (const std::string& key : cache->keys()) {
    std::string generic = key;
    if (key.rfind("blocks.", 0) == 0) generic = "blocks.{l}." + key.substr(key.find('.', 7) + 1);
    bool listed = false;
    for (const auto& h : j["hooks"]) listed |= h["name"] == generic && h["exists"] == true;
    INFO(key);
    CHECK(listed);
  }
  r = cli("hooks --model " + model);
  REQUIRE(r.code == 0);
  CHECK(r.out.find("mlp.hook_post") != std::string::npos);

  // --edit: the CLI's file holds the core's edited run.
  const fs::path edited = scratch("edited.json");
  const std::string edits = "mlp.hook_post:1.5:zero,attn.hook_z:0.1:zero@2";
  r = cli("run --model " + model + " --tokens 1,5,9,4 --edit " + edits + " -o " + quote(edited.string()));
  INFO(r.err);
  REQUIRE(r.code == 0);
  hs::RunOptions o;
  o.interventions = hs::parse_edits(edits);
  const auto core_edited = m->run(std::vector<int32_t>{1, 5, 9, 4}, o);
  const auto je = nlohmann::json::parse(hs::test::read_text(edited));
  CHECK(je["blocks.1.mlp.hook_post"][0][5] == 0.0);
  CHECK(std::abs(je["logits"][3][7].get<double>() - core_edited->get("logits").data[3 * m->config().d_vocab + 7]) <= 1e-6);

  // --steer: a vector from a .npy file; one of the wrong width is refused naming both widths.
  const fs::path vec = scratch("steer.npy"), steered = scratch("steered.json");
  std::vector<float> v(static_cast<size_t>(m->config().d_model), 0.0f);
  v[3] = 1.0f;
  write_npy(vec, v);
  r = cli("run --model " + model + " --tokens 1,5,9 --steer blocks.1.hook_resid_pre:" + vec.string() + ":2.5 -o " +
          quote(steered.string()));
  INFO(r.err);
  REQUIRE(r.code == 0);
  const auto js = nlohmann::json::parse(hs::test::read_text(steered));
  const auto plain = m->run(std::vector<int32_t>{1, 5, 9});
  const float before = plain->layer(1).resid_pre.row(2)(3);
  CHECK(std::abs(js["blocks.1.hook_resid_pre"][2][3].get<double>() - (before + 2.5)) <= 1e-5);
  write_npy(vec, std::vector<float>(5, 1.0f));
  r = cli("run --model " + model + " --tokens 1,5,9 --steer blocks.1.hook_resid_pre:" + vec.string() + ":2.5 -o " +
          quote(steered.string()));
  CHECK(r.code == 2);
  CHECK(r.err.find("5") != std::string::npos);
  r = cli("run --model " + model + " --tokens 1,5,9 --edit attn.hook_attn_scores:0.1:zero -o " + quote(steered.string()));
  CHECK(r.code != 0);
}
