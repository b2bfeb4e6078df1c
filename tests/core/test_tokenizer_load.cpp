// load_tokenizer (core/tokenizer/load.h): which files of a model folder make which tokenizer, and
// the tokenizer's own BOS. The tokenizers themselves are tested in test_tokenizer.cpp.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tokenizer/byte_level_bpe.h"
#include "core/tokenizer/load.h"
#include "test_support.h"

namespace fs = std::filesystem;

namespace {

const std::string kText = "The cat sat on the mat! <|endoftext|> 12 \xC3\xA9t\xC3\xA9\n\nthe end";

// An empty folder of its own, removed with the object.
struct TempDir {
  fs::path path;
  TempDir() {
    static int counter = 0;
    path = hs::test::scratch_dir() / ("tokenizer_load_" + std::to_string(++counter));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

void write(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary);
  out << text;
}

// A folder with the f32_prefixed fixture's vocab.json and merges.txt.
void copy_bpe_files(const fs::path& to) {
  const fs::path from = hs::test::fixture_model("f32_prefixed");
  fs::copy_file(from / "vocab.json", to / "vocab.json");
  fs::copy_file(from / "merges.txt", to / "merges.txt");
}

}  // namespace

TEST_CASE("load_tokenizer reads vocab.json + merges.txt as GPT-2 byte-level BPE", "[tokenizer][load]") {
  const fs::path dir = hs::test::fixture_model("f32_prefixed");
  const std::shared_ptr<const hs::Tokenizer> tok = hs::load_tokenizer(dir);
  const hs::ByteLevelBpeTokenizer direct = hs::ByteLevelBpeTokenizer::load(dir / "vocab.json", dir / "merges.txt");
  CHECK(tok->kind() == "GPT-2 byte-level BPE");
  CHECK(tok->vocab_size() == direct.vocab_size());
  CHECK(tok->end_of_text_id() == direct.end_of_text_id());
  CHECK(tok->encode(kText) == direct.encode(kText));
  CHECK(tok->decode(tok->encode(kText)) == kText);
  CHECK(tok->display(220) == direct.display(220));
  CHECK(tok->bos_token_id() == std::nullopt);  // the fixture has no tokenizer_config.json
}

TEST_CASE("load_tokenizer falls back to tokenizer.json's BPE model", "[tokenizer][load]") {
  const fs::path fixture = hs::test::fixture_model("f32_prefixed");
  const hs::ByteLevelBpeTokenizer direct =
      hs::ByteLevelBpeTokenizer::load(fixture / "vocab.json", fixture / "merges.txt");
  // tokenizer.json spells a merge "a b" (older files) or ["a", "b"] (newer ones); use both.
  nlohmann::json merges = nlohmann::json::array();
  std::ifstream in(fixture / "merges.txt");
  std::string line;
  for (int n = 0; std::getline(in, line);) {
    if (line.empty() || line.rfind("#version", 0) == 0) continue;
    const size_t space = line.find(' ');
    if (n++ % 2 == 0) merges.push_back(line);
    else merges.push_back({line.substr(0, space), line.substr(space + 1)});
  }
  const nlohmann::json vocab = nlohmann::json::parse(hs::test::read_text(fixture / "vocab.json"));
  TempDir dir;
  write(dir.path / "tokenizer.json",
        nlohmann::json{{"version", "1.0"}, {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}}.dump());
  const auto tok = hs::load_tokenizer(dir.path);
  CHECK(tok->kind() == "GPT-2 byte-level BPE");
  CHECK(tok->vocab_size() == direct.vocab_size());
  CHECK(tok->encode(kText) == direct.encode(kText));

  // vocab.json + merges.txt win when both kinds are present.
  write(dir.path / "tokenizer.json", "not JSON");
  copy_bpe_files(dir.path);
  CHECK(hs::load_tokenizer(dir.path)->encode(kText) == direct.encode(kText));
}

TEST_CASE("load_tokenizer refuses a folder without a tokenizer it can read", "[tokenizer][load]") {
  TempDir dir;
  CHECK_THROWS_WITH(hs::load_tokenizer(dir.path),
                    dir.path.string() + ": no tokenizer: expected vocab.json and merges.txt (or tokenizer.json) beside "
                                        "model.safetensors. Copy them from the model's original folder.");
  write(dir.path / "vocab.json", "{}");  // merges.txt is missing too: not a pair
  CHECK_THROWS_WITH(hs::load_tokenizer(dir.path), Catch::Contains("no tokenizer"));
  write(dir.path / "tokenizer.json", "{\"model\": ");
  CHECK_THROWS_WITH(hs::load_tokenizer(dir.path),
                    (dir.path / "tokenizer.json").string() + ": not valid JSON (parse error at line 1, column 11: syntax "
                                                             "error while parsing value - unexpected end of input; "
                                                             "expected '[', '{', or a literal).");
  write(dir.path / "tokenizer.json", R"({"model": {"type": "Unigram", "vocab": []}})");
  CHECK_THROWS_WITH(hs::load_tokenizer(dir.path), Catch::Contains("model.type \"Unigram\" is not a tokenizer HeadScope reads"));
  write(dir.path / "tokenizer.json", R"({"model": {"vocab": {}, "merges": [1]}})");
  CHECK_THROWS_WITH(hs::load_tokenizer(dir.path), Catch::Contains("neither \"a b\" nor [\"a\", \"b\"]"));
}

TEST_CASE("load_tokenizer reads the tokenizer's own BOS as Hugging Face does", "[tokenizer][load]") {
  TempDir dir;
  copy_bpe_files(dir.path);
  const fs::path config = dir.path / "tokenizer_config.json", map = dir.path / "special_tokens_map.json";
  CHECK(hs::load_tokenizer(dir.path)->bos_token_id() == std::nullopt);

  write(config, R"({"bos_token": "<|endoftext|>"})");
  CHECK(hs::load_tokenizer(dir.path)->bos_token_id() == 290);
  write(config, R"({"bos_token": {"content": "he", "lstrip": false}})");
  CHECK(hs::load_tokenizer(dir.path)->bos_token_id() == 257);
  // tokenizer_config.json first; special_tokens_map.json when the first names nothing usable.
  write(map, R"({"bos_token": "in"})");
  CHECK(hs::load_tokenizer(dir.path)->bos_token_id() == 257);
  for (const char* unusable : {R"({"bos_token": "not a token"})", R"({"bos_token": null})", R"({"eos_token": "he"})",
                               R"([1, 2])", "{ damaged"}) {
    INFO(unusable);
    write(config, unusable);
    CHECK(hs::load_tokenizer(dir.path)->bos_token_id() == 259);
  }
  // Neither file usable: no BOS of its own (Model::bos_id then falls back to <|endoftext|>).
  fs::remove(map);
  CHECK(hs::load_tokenizer(dir.path)->bos_token_id() == std::nullopt);
}

TEST_CASE("cli info names the tokenizer's kind", "[tokenizer][load][cli]") {
  const hs::test::CliRun r =
      hs::test::run_cli("info --model " + hs::test::quote(hs::test::fixture_model("f16_plain").string()));
  REQUIRE(r.code == 0);
  CHECK(nlohmann::json::parse(r.out)["tokenizer"] == "GPT-2 byte-level BPE");
}
