// llama2.c's tokenizer (core/tokenizer/llama2c_tokenizer.h). Three layers of evidence:
//  1. a tiny tokenizer built here, with ids derived by hand in the comments;
//  2. the fast merge against run.c's loop written out literally in this file, on random texts;
//  3. the real stories260K tokenizer (../shared/models/stories260K/tok512.bin) against llama2.c's
//     own run.c, compiled unchanged into tests/reference/llama2c_encode.c; skipped when absent.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tokenizer/llama2c_tokenizer.h"
#include "test_support.h"

namespace {

using hs::Llama2cTokenizer;
using Ids = std::vector<int32_t>;
namespace fs = std::filesystem;

struct Piece {
  std::string text;
  float score;
};

// A llama2.c tokenizer file: <unk>, BOS, EOS, the 256 byte tokens (ids 3..258), then `extra`.
std::string tokenizer_file(const std::vector<Piece>& extra, int32_t max_token_length = 16) {
  std::vector<Piece> pieces = {{"<unk>", 0}, {"\n<s>\n", 0}, {"\n</s>\n", 0}};
  const char* hex = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) pieces.push_back({std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">", 0});
  pieces.insert(pieces.end(), extra.begin(), extra.end());
  std::string bytes(reinterpret_cast<const char*>(&max_token_length), 4);
  for (const Piece& p : pieces) {
    const auto length = static_cast<int32_t>(p.text.size());
    bytes.append(reinterpret_cast<const char*>(&p.score), 4);
    bytes.append(reinterpret_cast<const char*>(&length), 4);
    bytes += p.text;
  }
  return bytes;
}

// Ids 259.. of the tiny tokenizer.
const std::vector<Piece> kTiny = {
    {" ", -1},    // 259
    {"a", -2},    // 260
    {"b", -3},    // 261
    {"ab", 5},    // 262
    {"ba", 5},    // 263  ties with "ab": the leftmost pair merges first
    {" a", 1},    // 264
    {"\xC3\xA9", -4},  // 265  é
    {" ab", 0.5},  // 266
};

const Llama2cTokenizer& tiny() {
  static const Llama2cTokenizer t = Llama2cTokenizer::from_bytes(tokenizer_file(kTiny), std::nullopt, "tiny.bin");
  return t;
}

template <typename F>
std::string llama2c_error_of(F&& f) {
  try {
    f();
  } catch (const hs::Error& e) {
    return e.what();
  }
  return "";
}

// run.c's encode(), written out literally over strings: the slow reference for the heap version.
Ids literal_encode(const Llama2cTokenizer& t, const std::string& text) {
  auto lookup = [&](const std::string& s) -> int32_t {
    const auto id = t.id_of(s);
    return id ? *id : -1;
  };
  auto piece = [&](int32_t id) {  // the file's string (token_bytes turns byte tokens into bytes)
    for (int b = 0; b < 256; ++b)
      if (id == b + 3) {
        const char* hex = "0123456789ABCDEF";
        return std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">";
      }
    return t.token_bytes(id);
  };
  Ids tokens;
  if (!text.empty()) tokens.push_back(lookup(" "));
  std::string buffer;
  for (size_t i = 0; i < text.size(); ++i) {
    if ((static_cast<uint8_t>(text[i]) & 0xC0) != 0x80) buffer.clear();
    buffer += text[i];
    if (i + 1 < text.size() && (static_cast<uint8_t>(text[i + 1]) & 0xC0) == 0x80 && buffer.size() < 4) continue;
    const int32_t id = buffer == std::string(1, '\0') ? -1 : lookup(buffer);
    if (id != -1) tokens.push_back(id);
    else
      for (const char c : buffer) tokens.push_back(static_cast<uint8_t>(c) + 3);
    buffer.clear();
  }
  while (true) {
    float best_score = -1e10f;
    int32_t best_id = -1;
    size_t best_idx = 0;
    for (size_t i = 0; i + 1 < tokens.size(); ++i) {
      const int32_t id = lookup(piece(tokens[i]) + piece(tokens[i + 1]));
      if (id != -1 && t.score(id) > best_score) {
        best_score = t.score(id);
        best_id = id;
        best_idx = i;
      }
    }
    if (best_id == -1) break;
    tokens[best_idx] = best_id;
    tokens.erase(tokens.begin() + static_cast<std::ptrdiff_t>(best_idx) + 1);
  }
  return tokens;
}

const fs::path kStoriesTokenizer = hs::test::shared_dir() / "models/stories260K/tok512.bin";

const std::vector<std::string> kHardTexts = {
    "Once upon a time, there was a little girl named Lily.",
    "",
    " ",
    "   \n\n\t",
    "  two leading spaces",
    "trailing spaces  ",
    "Hello, world!",
    "\n\nnew lines\n",
    "tab\there",
    "12345678",
    "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E",  // 日本語
    "na\xC3\xAFve caf\xC3\xA9",             // naïve café
    "emoji \xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7 done",  // a ZWJ family
    "e\xCC\x81 combining",                  // e + U+0301
    "<s> and </s> and <0x41> as text",
    "\\xff spelled out",
    "supercalifragilisticexpialidocious antidisestablishmentarianism",
    "Mixed \xD0\xBF\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5\xD1\x82 and \xCE\xB3\xCE\xB5\xCE\xB9\xCE\xB1 and \xD8\xB3\xD9\x84\xD8\xA7\xD9\x85",
    "The cat sat on the mat. The dog ran to the park and played with a ball all day long.",
};

}  // namespace

TEST_CASE("llama2.c tokenizer: a tiny vocabulary, ids by hand", "[tokenizer][llama2c]") {
  const Llama2cTokenizer& t = tiny();
  CHECK(t.kind() == "llama2.c SentencePiece BPE");
  CHECK(t.vocab_size() == 267);
  CHECK(t.bos_token_id() == 1);
  CHECK(t.adds_bos() == true);
  CHECK(t.end_of_text_id() == 2);
  CHECK(t.encode("").empty());  // no dummy space for an empty text
  // " ", "a", "b": "ab" (5) beats " a" (1); then " " + "ab" = " ab" (0.5).
  CHECK(t.encode("ab") == Ids{266});
  // " ", "b", "a", "b": "ba" and "ab" both score 5; the leftmost ("ba") merges; " ba" and "bab"
  // are not tokens.
  CHECK(t.encode("bab") == Ids{259, 263, 261});
  // "€" is not a token: its three bytes E2 82 AC fall back to ids byte + 3; "é" is one token.
  CHECK(t.encode("a\xC3\xA9\xE2\x82\xAC") == Ids{264, 265, 0xE2 + 3, 0x82 + 3, 0xAC + 3});
  // A NUL character is the byte token <0x00> (run.c's C string would end there).
  CHECK(t.encode(std::string("a\0", 2)) == Ids{264, 3});
  // Merges cross spaces: there is no pre-tokenization.
  CHECK(t.encode("a a") == Ids{264, 264});

  // decode: run.c strips the leading space of the token after BOS; byte tokens are their bytes.
  CHECK(t.decode(Ids{264, 265}) == " a\xC3\xA9");
  CHECK(t.decode(Ids{1, 264, 265}) == "\n<s>\na\xC3\xA9");
  CHECK(t.decode(Ids{0xE2 + 3, 0x82 + 3, 0xAC + 3}) == "\xE2\x82\xAC");
  CHECK(t.token_bytes(0x41 + 3) == "A");
  CHECK(t.token_bytes(264) == " a");
  CHECK(t.display(1) == "<s>");
  CHECK(t.display(2) == "</s>");
  CHECK(t.display(264) == "\xE2\x90\xA3" "a");  // ␣a
  CHECK(t.display(0xFF + 3) == "\u2039" "FF\u203A");  // ‹FF›
  // The byte tokens of € (E2 82 AC), in a prompt: each names the character.
  CHECK(hs::display_in_context(t, Ids{1, 0xE2 + 3, 0x82 + 3, 0xAC + 3}) ==
        std::vector<std::string>{"<s>", "\xE2\x82\xAC\u2039" "E2\u203A", "\xE2\x82\xAC\u2039" "82\u203A",
                                 "\xE2\x82\xAC\u2039" "AC\u203A"});
  CHECK(t.id_of(" ab") == 266);
  CHECK(t.id_of("\xE2\x96\x81" "ab") == std::nullopt);  // the file spells a space as a space
  CHECK(llama2c_error_of([&] { t.decode(Ids{267}); }) == "token id 267 is outside the vocabulary (ids 0 to 266).");
  CHECK(llama2c_error_of([&] { t.encode("a\xFF"); }) ==
        "text is not valid UTF-8 at byte 1 (0xff); HeadScope reads text as UTF-8 (this byte never occurs in UTF-8).");
}

TEST_CASE("llama2.c tokenizer: the heap merge equals run.c's loop on random texts", "[tokenizer][llama2c]") {
  // Letters that merge in the tiny vocabulary, a character it lacks, spaces and é.
  const std::vector<std::string> alphabet = {"a", "b", " ", "\xC3\xA9", "\xE2\x82\xAC", "x", "ab"};
  std::mt19937 rng(13);
  for (int round = 0; round < 500; ++round) {
    std::string text;
    const int length = static_cast<int>(rng() % 40);
    for (int i = 0; i < length; ++i) text += alphabet[rng() % alphabet.size()];
    INFO(text);
    REQUIRE(tiny().encode(text) == literal_encode(tiny(), text));
  }
  if (!fs::exists(kStoriesTokenizer)) {
    WARN("skipped the real vocabulary: " << kStoriesTokenizer.string() << " is absent");
    return;
  }
  const Llama2cTokenizer real = Llama2cTokenizer::load(kStoriesTokenizer, 512);
  const std::vector<std::string> words = {"the", " ", "cat", "Lily", "\n", "ing", "ed", "\xE2\x80\x8A", "!", "q", "zz"};
  for (int round = 0; round < 300; ++round) {
    std::string text;
    const int length = static_cast<int>(rng() % 30);
    for (int i = 0; i < length; ++i) text += words[rng() % words.size()];
    INFO(text);
    REQUIRE(real.encode(text) == literal_encode(real, text));
  }
}

TEST_CASE("llama2.c tokenizer: stories260K's tok512.bin against llama2.c's run.c", "[tokenizer][llama2c]") {
#ifndef HEADSCOPE_LLAMA2C_ENCODE
  WARN("skipped: ../shared/peers/llama2.c/run.c was absent when the tests were configured");
#else
  if (!fs::exists(kStoriesTokenizer)) {
    WARN("skipped: " << kStoriesTokenizer.string() << " is absent (optional real-world data)");
    return;
  }
  const auto tokenizer = hs::load_llama2c_tokenizer(kStoriesTokenizer, 512);
  CHECK(tokenizer->vocab_size() == 512);
  CHECK(hs::load_llama2c_tokenizer(kStoriesTokenizer)->vocab_size() == 512);  // the file holds exactly 512

  const fs::path texts_file = hs::test::scratch_dir() / "llama2c_texts";
  {
    std::ofstream out(texts_file, std::ios::binary);
    for (const std::string& text : kHardTexts) out << text << '\0';
  }
  const std::string command = hs::test::quote(HEADSCOPE_LLAMA2C_ENCODE) + " " +
                              hs::test::quote(kStoriesTokenizer.string()) + " 512 " + hs::test::quote(texts_file.string());
  std::string output;
  FILE* p = ::popen(command.c_str(), "r");
  REQUIRE(p != nullptr);
  char buffer[4096];
  for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, p)) > 0;) output.append(buffer, n);
  REQUIRE(::pclose(p) == 0);
  fs::remove(texts_file);

  std::istringstream lines(output);
  for (const std::string& text : kHardTexts) {
    std::string line;
    REQUIRE(std::getline(lines, line));
    Ids expected;
    std::istringstream numbers(line);
    for (int32_t id; numbers >> id;) expected.push_back(id);
    INFO("text: " << text);
    const Ids ours = tokenizer->encode(text);
    CHECK(ours == expected);
    // With BOS in front, run.c's decoding gives the text back exactly.
    Ids with_bos = {1};
    with_bos.insert(with_bos.end(), ours.begin(), ours.end());
    CHECK(tokenizer->decode(with_bos).substr(5) == text);
  }
  CHECK(tokenizer->encode("Once upon a time").size() < 8);  // merges happened
#endif
}

TEST_CASE("llama2.c tokenizer: broken files are refused with a message", "[tokenizer][llama2c]") {
  const std::string good = tokenizer_file(kTiny);
  auto load = [](const std::string& bytes, std::optional<int32_t> vocab_size = std::nullopt) {
    return llama2c_error_of([&] { Llama2cTokenizer::from_bytes(bytes, vocab_size, "t.bin"); });
  };
  CHECK(load(good).empty());
  CHECK(load("ab") == "t.bin: 2 bytes is too short for a llama2.c tokenizer (it starts with a 4-byte max_token_length).");
  CHECK(load(good.substr(0, good.size() - 1)) ==
        "t.bin: token 266 (at byte " + std::to_string(good.size() - 11) + "): the file is cut short inside the token's 3 bytes.");
  CHECK(load(good.substr(0, good.size() - 9)) ==
        "t.bin: token 266 (at byte " + std::to_string(good.size() - 11) + "): the file is cut short inside the token's score and length.");
  CHECK(load(good, 300) == "t.bin: holds 267 tokens but the checkpoint's vocab_size is 300. Are the tokenizer and the "
                           "checkpoint from the same model?");
  CHECK(load(good, 260).empty());  // as run.c: the checkpoint's count of tokens, the rest unread
  CHECK(load(good, 0) == "t.bin: the checkpoint's vocab_size is 0; it must be positive.");
  CHECK(load(tokenizer_file(kTiny, 2)) ==
        "t.bin: token 0 (at byte 4): is 5 bytes, longer than the file's max_token_length (2); the file is damaged.");
  std::string negative = good;
  const int32_t minus_one = -1;
  std::memcpy(negative.data() + 4 + 4, &minus_one, 4);
  CHECK(load(negative) == "t.bin: token 0 (at byte 4): has length -1; a length cannot be negative.");
  CHECK(load(tokenizer_file({{std::string("a\0b", 3), 0}, {" ", 0}})) ==
        "t.bin: token 259 (at byte 3628): contains a NUL byte; llama2.c reads tokens as C strings, so this is not its file.");
  CHECK(load(tokenizer_file({{"a", 0}})) ==
        "t.bin: has no token for a single space, which llama2.c's encoder puts before every text.");
  std::string swapped = good;
  const size_t at = swapped.find("<0x41>");
  swapped.replace(at, 6, "<0x42>");
  CHECK(load(swapped) == "t.bin: token 68 is \"<0x42>\" where llama2.c expects the byte token \"<0x41>\" (its byte "
                         "fallback uses id = byte + 3).");
  CHECK(load(good.substr(0, 142)) == "t.bin: has 10 tokens; a llama2.c tokenizer has <unk>, <s>, </s> and the "
                                             "256 byte tokens <0x00>..<0xFF> first.");
  CHECK(llama2c_error_of([] { Llama2cTokenizer::load("/nonexistent/tok.bin"); }) ==
        "/nonexistent/tok.bin: cannot read the llama2.c tokenizer (No such file or directory).");
}
