// headscope-cli end to end: the contract of DESIGN.md, its errors, and that a failed run leaves
// no output file.

#include <catch2/catch.hpp>
#include <cstdio>
#include <nlohmann/json.hpp>

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
  const fs::path d = fs::temp_directory_path() / ("hs_cli_test_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d / name;
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
