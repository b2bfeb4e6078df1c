// GPT-2 byte-level BPE (core/tokenizer). Three layers of evidence:
//  1. a small tokenizer of our own (tests/fixtures/tokenizer/small_*) with ids derived by hand;
//  2. the real GPT-2 files, when ../shared/gpt2-tokenizer exists, against ids written by an
//     independent Python implementation (tests/fixtures/tokenizer/gpt2_reference_tokenizer.py);
//  3. the fast BPE merge against the literal GPT-2 loop on random words and merge lists.
#include <catch2/catch.hpp>

#include "test_support.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/tokenizer/bpe.h"
#include "core/tokenizer/byte_level.h"
#include "core/tokenizer/pretokenizer.h"
#include "core/tokenizer/byte_level_bpe.h"

namespace {

using hs::ByteLevelBpeTokenizer;
using Ids = std::vector<int32_t>;

const std::filesystem::path kTokenizerFixtures = std::filesystem::path(HEADSCOPE_SOURCE_DIR) / "tests/fixtures/tokenizer";
const std::filesystem::path kGpt2Dir = std::filesystem::path(HEADSCOPE_SHARED_DIR) / "gpt2-tokenizer";

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

const ByteLevelBpeTokenizer& small_tokenizer() {
  static const ByteLevelBpeTokenizer tokenizer =
      ByteLevelBpeTokenizer::load(kTokenizerFixtures / "small_vocab.json", kTokenizerFixtures / "small_merges.txt");
  return tokenizer;
}

bool have_gpt2() { return std::filesystem::exists(kGpt2Dir / "vocab.json") && std::filesystem::exists(kGpt2Dir / "merges.txt"); }

const ByteLevelBpeTokenizer& gpt2_tokenizer() {
  static const ByteLevelBpeTokenizer tokenizer =
      ByteLevelBpeTokenizer::load(kGpt2Dir / "vocab.json", kGpt2Dir / "merges.txt");
  return tokenizer;
}

// The 256 single-byte entries of a vocabulary (ids 0..255 = byte value) as JSON members, for
// hand-made broken files.
std::string byte_entries(int skip_byte = -1) {
  std::string json;
  for (int b = 0; b < 256; ++b) {
    if (b == skip_byte) continue;
    std::string spelling;
    hs::tokenizer_detail::append_utf8(spelling, hs::tokenizer_detail::byte_to_codepoint()[b]);
    if (!json.empty()) json += ", ";
    json += nlohmann::json(spelling).dump() + ": " + std::to_string(b);
  }
  return json;
}

std::string vocab_with(const std::string& extra_members, int skip_byte = -1) {
  std::string json = "{" + byte_entries(skip_byte);
  if (!extra_members.empty()) json += ", " + extra_members;
  return json + "}";
}

// The message of the hs::Error that `f` throws ("" when it throws none).
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const hs::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("bytes_to_unicode is GPT-2's table", "[tokenizer]") {
  using hs::tokenizer_detail::byte_of_codepoint;
  using hs::tokenizer_detail::byte_to_codepoint;
  const auto& table = byte_to_codepoint();
  // Printable Latin-1 stands for itself.
  CHECK(table['!'] == U'!');
  CHECK(table['~'] == U'~');
  CHECK(table[0xA1] == U'\u00A1');
  CHECK(table[0xAC] == U'\u00AC');
  CHECK(table[0xAE] == U'\u00AE');
  CHECK(table[0xFF] == U'\u00FF');
  // The rest, in byte order, from U+0100: 0x00-0x20 (33 bytes), 0x7F-0xA0 (34), 0xAD.
  CHECK(table[0x00] == U'\u0100');
  CHECK(table['\n'] == U'\u010A');  // Ċ
  CHECK(table[' '] == U'\u0120');   // Ġ
  CHECK(table[0x7F] == U'\u0121');
  CHECK(table[0xA0] == U'\u0142');
  CHECK(table[0xAD] == U'\u0143');
  for (int b = 0; b < 256; ++b) CHECK(byte_of_codepoint(table[b]) == b);
  CHECK(byte_of_codepoint(U'\u0144') == -1);
  CHECK(byte_of_codepoint(U' ') == -1);
  CHECK(byte_of_codepoint(U'\u4E2D') == -1);
}

TEST_CASE("small tokenizer: ids derived by hand", "[tokenizer]") {
  const ByteLevelBpeTokenizer& tok = small_tokenizer();
  // Ids 0-255 are the bytes, 256 + k is merge line k (see make_small_tokenizer.py), 288 is EOT.
  CHECK(tok.vocab_size() == 289);
  REQUIRE(tok.end_of_text_id() == 288);
  CHECK(tok.id_of("\xC4\xA0") == 32);  // "Ġ" is the space byte
  CHECK(tok.id_of("hello") == 259);
  CHECK(tok.id_of("\xC4\xA0" "world") == 264);
  CHECK(tok.id_of("nope") == std::nullopt);

  CHECK(tok.encode("").empty());
  // "hello": h e l l o -> he l l o -> he ll o -> hell o -> hello.
  // " world": Ġw o r l d -> Ġw or l d -> Ġwor l d -> Ġwor ld -> Ġworld.
  CHECK(tok.encode("hello world") == Ids{259, 264});
  // No merge starts with "H"; "l l" still applies and "e ll" is not a merge.
  CHECK(tok.encode("Hello") == Ids{'H', 'e', 257, 'o'});
  // "a a" merges left to right, so five a's are aa aa a, then "aa aa" -> aaaa.
  CHECK(tok.encode("aaaaa") == Ids{271, 'a'});
  CHECK(tok.encode("aaaa") == Ids{271});
  // "ab a" ranks before "a b", yet "abab" is ab ab: GPT-2 merges every "a b" first and only then
  // looks at the pairs this made; (ab, ab) is not a merge. "aba" -> ab a -> aba.
  CHECK(tok.encode("abab") == Ids{273, 273});
  CHECK(tok.encode("aba") == Ids{272});
  // Contractions are their own pre-tokens; they are lowercase only.
  CHECK(tok.encode("it's") == Ids{'i', 't', 267});
  CHECK(tok.encode("they'll") == Ids{'t', 256, 'y', 269});
  CHECK(tok.encode("x'll") == Ids{'x', 269});
  CHECK(tok.encode("'S") == Ids{'\'', 'S'});
  CHECK(tok.encode("don't") == Ids{286, 268});
  CHECK(tok.encode(" don't") == Ids{287, 268});
  // Numbers: 1 2 3 4 5 6 -> 12 3 ... -> 123 4 5 6.
  CHECK(tok.encode("123456") == Ids{275, '4', '5', '6'});
  // Whitespace before a non-space leaves its last character to the next pre-token:
  // "a\n\nb" is a, \n, \n, b (the second \n alone cannot be followed by a non-space), while a
  // trailing "\n\n" stays whole and merges.
  CHECK(tok.encode("a\n\nb") == Ids{'a', '\n', '\n', 'b'});
  CHECK(tok.encode("a\n\n") == Ids{'a', 276});
  CHECK(tok.encode("a   b") == Ids{'a', 277, ' ', 'b'});
  CHECK(tok.encode("  the") == Ids{' ', 266});
  // é is C3 A9 = "Ã©". "café": Ã© first, then ca, fÃ©, cafÃ©.
  CHECK(tok.encode("caf\xC3\xA9") == Ids{281});
  // " café": "ca fÃ©" (rank 25) comes before "Ġ ca" (rank 26), so the space stays apart.
  CHECK(tok.encode(" caf\xC3\xA9") == Ids{' ', 281});
  CHECK(tok.encode("!!!") == Ids{284, '!'});
  // The special token takes no spaces from its neighbours.
  CHECK(tok.encode(" <|endoftext|> x") == Ids{' ', 288, ' ', 'x'});
  CHECK(tok.encode("<|endoftext|>") == Ids{288});
  CHECK(tok.encode("<|endoftext|><|endoftext|>") == Ids{288, 288});
  // Not the special token: "<|", "endoftext", "|", where only "d o" (285) applies.
  CHECK(tok.encode("<|endoftext|") == Ids{'<', '|', 'e', 'n', 285, 'f', 't', 'e', 'x', 't', '|'});
}

TEST_CASE("pre-tokenization follows GPT-2's pattern", "[tokenizer]") {
  using hs::tokenizer_detail::pretokenize;
  using Pieces = std::vector<std::string_view>;
  CHECK(pretokenize("").empty());
  CHECK(pretokenize("Hello world") == Pieces{"Hello", " world"});
  CHECK(pretokenize("I'm they'RE") == Pieces{"I", "'m", " they", "'", "RE"});
  CHECK(pretokenize("a   b") == Pieces{"a", "  ", " b"});
  CHECK(pretokenize("a  ") == Pieces{"a", "  "});
  CHECK(pretokenize("x\t\ty") == Pieces{"x", "\t", "\t", "y"});
  CHECK(pretokenize("3.14 12345") == Pieces{"3", ".", "14", " 12345"});
  CHECK(pretokenize("!!!?... ?!") == Pieces{"!!!?...", " ?!"});
  CHECK(pretokenize("caf\xC3\xA9 na\xC3\xAFve") == Pieces{"caf\xC3\xA9", " na\xC3\xAFve"});
  CHECK(pretokenize("e\xCC\x81") == Pieces{"e", "\xCC\x81"});  // a combining mark is not a letter
  // \s is Unicode White_Space, as in Python's `regex`: U+0085 and U+00A0 are spaces...
  CHECK(pretokenize("a\xC2\x85" "b") == Pieces{"a", "\xC2\x85", "b"});
  CHECK(pretokenize("c\xC2\xA0\xC2\xA0" "d") == Pieces{"c", "\xC2\xA0", "\xC2\xA0", "d"});
  // ...U+001C..U+001F are not (str.isspace() says they are), nor is U+180E (PCRE2's \s says it is).
  CHECK(pretokenize("a\x1C" "b") == Pieces{"a", "\x1C", "b"});
  CHECK(pretokenize("a \xE1\xA0\x8E") == Pieces{"a", " \xE1\xA0\x8E"});
}

TEST_CASE("fast BPE merge equals GPT-2's literal loop", "[tokenizer]") {
  using namespace hs::tokenizer_detail;
  std::mt19937 rng(20240601);
  for (int trial = 0; trial < 300; ++trial) {
    // Random merge lists over a few symbols, in any order (not only orders BPE training makes),
    // so that merged pairs often rank below the merge that made them.
    const int alphabet = 2 + trial % 4;
    MergeTable merges;
    int32_t next_id = alphabet;
    std::vector<int32_t> symbols(alphabet);
    for (int s = 0; s < alphabet; ++s) symbols[s] = s;
    const int merge_count = 1 + static_cast<int>(rng() % 12);
    std::vector<std::pair<int32_t, int32_t>> pairs;
    for (int k = 0; k < merge_count; ++k) {
      const int32_t left = symbols[rng() % symbols.size()];
      const int32_t right = symbols[rng() % symbols.size()];
      pairs.emplace_back(left, right);
      symbols.push_back(next_id++);
    }
    std::shuffle(pairs.begin(), pairs.end(), rng);
    for (int k = 0; k < merge_count; ++k) merges.insert_or_assign(pairs[k].first, pairs[k].second, Merge{k, alphabet + k});
    for (int w = 0; w < 20; ++w) {
      std::vector<int32_t> word(1 + rng() % 80);
      for (auto& s : word) s = static_cast<int32_t>(rng() % alphabet);
      std::vector<int32_t> expected = word, heap = word, dispatched = word;
      bpe_merge_reference(expected, merges);
      bpe_merge_heap(heap, merges);
      bpe_merge(dispatched, merges);
      REQUIRE(heap == expected);
      REQUIRE(dispatched == expected);
    }
  }
}

TEST_CASE("invalid UTF-8 is refused with its byte offset", "[tokenizer]") {
  const ByteLevelBpeTokenizer& tok = small_tokenizer();
  struct Case {
    std::string text;
    std::string where;
  };
  const std::vector<Case> cases = {
      {"abc\x80", "at byte 3 (0x80)"},                     // lone continuation byte
      {"abcdefg\xFF", "at byte 7 (0xff)"},                 // never valid
      {"ab\xE6\x97", "at byte 2 (0xe6)"},                  // truncated at the end
      {"\xE6\x97" "abc", "at byte 0 (0xe6)"},              // truncated in the middle
      {"x\xC0\xAF", "at byte 1 (0xc0)"},                   // overlong '/'
      {"x\xE0\x80\xAF", "at byte 1 (0xe0)"},               // overlong, three bytes
      {"x\xF0\x80\x80\xAF", "at byte 1 (0xf0)"},           // overlong, four bytes
      {"ok \xED\xA0\x80", "at byte 3 (0xed)"},             // surrogate U+D800
      {"ok \xED\xBF\xBF", "at byte 3 (0xed)"},             // surrogate U+DFFF
      {"\xF4\x90\x80\x80", "at byte 0 (0xf4)"},            // U+110000
      {"\xF5\x80\x80\x80", "at byte 0 (0xf5)"},            // above U+10FFFF
      {"caf\xC3\xA9 \xC3", "at byte 6 (0xc3)"},            // valid é, then a cut one
  };
  for (const Case& c : cases) {
    const std::string message = error_of([&] { tok.encode(c.text); });
    INFO(message);
    CHECK_THAT(message, Catch::Contains("text is not valid UTF-8 " + c.where + "; HeadScope reads text as UTF-8"));
  }
  CHECK_THAT(error_of([&] { tok.encode("ok \xED\xA0\x80"); }), Catch::Contains("surrogate"));
  CHECK_THAT(error_of([&] { tok.encode("x\xC0\xAF"); }), Catch::Contains("overlong"));
  // The largest code point and the edges of the ranges around the surrogates are fine.
  CHECK_NOTHROW(tok.encode("\xF4\x8F\xBF\xBF \xED\x9F\xBF \xEE\x80\x80 \xEF\xBF\xBF"));
  CHECK(tok.decode(tok.encode("\xF4\x8F\xBF\xBF \xED\x9F\xBF")) == "\xF4\x8F\xBF\xBF \xED\x9F\xBF");
}

TEST_CASE("display labels are readable UTF-8", "[tokenizer]") {
  const ByteLevelBpeTokenizer& tok = small_tokenizer();
  CHECK(tok.display('a') == "a");
  CHECK(tok.display(' ') == "\u2423");   // ␣
  CHECK(tok.display('\n') == "\u21B5");  // ↵
  CHECK(tok.display('\t') == "\u21E5");  // ⇥
  CHECK(tok.display('\r') == "\u240D");  // ␍
  CHECK(tok.display(0) == "\u2039" "00\u203A");  // ‹00›
  CHECK(tok.display(0x1B) == "\u2039" "1B\u203A");
  CHECK(tok.display(0x7F) == "\u2039" "7F\u203A");
  CHECK(tok.display(0xC3) == "\u2039" "C3\u203A");  // half of a character
  CHECK(tok.display(0xA9) == "\u2039" "A9\u203A");
  CHECK(tok.display(259) == "hello");
  CHECK(tok.display(264) == "\u2423world");
  CHECK(tok.display(276) == "\u21B5\u21B5");
  CHECK(tok.display(277) == "\u2423\u2423");
  CHECK(tok.display(281) == "caf\xC3\xA9");
  CHECK(tok.display(288) == "<|endoftext|>");
  CHECK_THROWS_AS(tok.display(289), hs::Error);
  CHECK_THROWS_AS(tok.display(-1), hs::Error);

  using hs::tokenizer_detail::display_label;
  CHECK(display_label("\xC2\x85") == "\u2039" "C2 85\u203A");  // a C1 control
  CHECK(display_label("\xE6\x97\xA5") == "\xE6\x97\xA5");
  CHECK(display_label("\xE6\x97") == "\u2039" "E6 97\u203A");  // one group, not two
  CHECK(display_label("\x97\xA5") == "\u2039" "97 A5\u203A");
  CHECK(display_label("a\x97\x01" "b") == "a\u2039" "97 01\u203A" "b");
  CHECK(display_label("a b\r\n") == "a\u2423b\u240D\u21B5");
  CHECK(display_label("\xC2\xA0") == "\xC2\xA0");  // no-break space: printable, shown as is
}

TEST_CASE("a character split across tokens is named in each of its tokens", "[tokenizer]") {
  const ByteLevelBpeTokenizer& tok = small_tokenizer();
  using Labels = std::vector<std::string>;
  // 日 is E6 97 A5: three byte tokens, each showing the character and the byte it holds.
  CHECK(hs::display_in_context(tok, Ids{'a', 0xE6, 0x97, 0xA5, 'b'}) ==
        Labels{"a", "\xE6\x97\xA5\u2039" "E6\u203A", "\xE6\x97\xA5\u2039" "97\u203A", "\xE6\x97\xA5\u2039" "A5\u203A", "b"});
  // Bytes that never complete a character stay hex; a split C1 control (C2 85) too.
  CHECK(hs::display_in_context(tok, Ids{0xE6, 0x97, 'b'}) == Labels{"\u2039" "E6\u203A", "\u2039" "97\u203A", "b"});
  CHECK(hs::display_in_context(tok, Ids{0xC2, 0x85}) == Labels{"\u2039" "C2\u203A", "\u2039" "85\u203A"});
  // A token with a whole character and the start of the next: only the split part is marked.
  CHECK(hs::display_in_context(tok, Ids{281, 0xC3, 0xA9}) ==
        Labels{"caf\xC3\xA9", "\xC3\xA9\u2039" "C3\u203A", "\xC3\xA9\u2039" "A9\u203A"});
  CHECK(hs::display_in_context(tok, Ids{}).empty());
  CHECK_THROWS_AS(hs::display_in_context(tok, Ids{-1}), hs::Error);
}

TEST_CASE("decode(encode(text)) gives the text back", "[tokenizer]") {
  const std::vector<std::string> texts = {
      "",
      " ",
      "hello world",
      "  leading and trailing  ",
      "a\n\n b\t\tc  \n",
      "\r\n\r\n",
      "I'm sure they'RE here, don't",
      "12345 3.14 1,000",
      "!!!?... (a) [b]",
      "caf\xC3\xA9 na\xC3\xAFve",
      "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E",
      "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7",
      "e\xCC\x81",
      "x <|endoftext|> y<|endoftext|>",
      "<|endoftext|",
      std::string("nul\0byte", 8),
      "\x01\x02\x1F\x7F",
      std::string(500, 'a') + " " + std::string(300, ' ') + "b",
  };
  const ByteLevelBpeTokenizer& small = small_tokenizer();
  for (const std::string& text : texts) {
    INFO(text);
    CHECK(small.decode(small.encode(text)) == text);
    if (have_gpt2()) CHECK(gpt2_tokenizer().decode(gpt2_tokenizer().encode(text)) == text);
  }
  CHECK_THROWS_WITH(small.decode(Ids{1, 2, 289}), Catch::Contains("289") && Catch::Contains("outside the vocabulary"));
  CHECK(small.token_bytes(32) == " ");
  CHECK(small.token_bytes(276) == "\n\n");
}

TEST_CASE("encode is safe to call from several threads", "[tokenizer]") {
  const ByteLevelBpeTokenizer& tok = small_tokenizer();
  const std::string text = "hello world, they'll say caf\xC3\xA9 <|endoftext|> aaaaa abab 123456\n\n";
  const Ids expected = tok.encode(text);
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int k = 0; k < 200; ++k) mismatches[t] += tok.encode(text) != expected;
    });
  }
  for (auto& thread : threads) thread.join();
  CHECK(mismatches == std::vector<int>(4, 0));
}

TEST_CASE("long words and long runs are not quadratic", "[tokenizer]") {
  const ByteLevelBpeTokenizer& tok = small_tokenizer();
  // One 400 KB pre-token: the heap merge handles it; the quadratic loop would take minutes.
  const Ids letters = tok.encode(std::string(400'000, 'a'));
  CHECK(letters == Ids(100'000, 271));
  const Ids spaces = tok.encode(std::string(400'000, ' '));
  CHECK(spaces == Ids(200'000, 277));
  std::string mixed;
  for (int k = 0; k < 20'000; ++k) mixed += "ab  \n!!";
  CHECK(tok.decode(tok.encode(mixed)) == mixed);
}

TEST_CASE("tokenizer files: variations that are accepted", "[tokenizer]") {
  const std::string vocab = vocab_with(R"("ab": 256, "bc": 257, "abc": 258)");
  // A later duplicate of a merge line takes the later rank, as a Python dict (Hugging Face) does:
  // here "a b" ranks after "b c", so "abc" is a + bc.
  const ByteLevelBpeTokenizer dup = ByteLevelBpeTokenizer::from_strings(vocab, "a b\nb c\na b\n");
  CHECK(dup.encode("abc") == Ids{'a', 257});
  CHECK(ByteLevelBpeTokenizer::from_strings(vocab, "a b\nb c\n").encode("abc") == Ids{256, 'c'});
  // No #version line, CRLF line ends, blank lines, no final newline.
  CHECK(ByteLevelBpeTokenizer::from_strings(vocab, "a b\r\n\r\nb c").encode("abc") == Ids{256, 'c'});
  CHECK(ByteLevelBpeTokenizer::from_strings(vocab, "\xEF\xBB\xBF#version: 0.2\r\nb c\r\n").encode("abc") ==
        Ids{'a', 257});
  // An empty merge list: every byte is a token.
  const ByteLevelBpeTokenizer bytes_only = ByteLevelBpeTokenizer::from_strings(vocab, "");
  CHECK(bytes_only.encode("abc") == Ids{'a', 'b', 'c'});
  CHECK(bytes_only.end_of_text_id() == std::nullopt);
  // Without <|endoftext|> in the vocabulary its text is ordinary text.
  CHECK(bytes_only.encode("<|endoftext|>").size() == 13);

  // Ids with gaps: vocab_size is max id + 1, and the gaps are not tokens.
  const ByteLevelBpeTokenizer sparse =
      ByteLevelBpeTokenizer::from_strings(vocab_with(R"("ab": 1000, "<|endoftext|>": 5000)"), "a b\n");
  CHECK(sparse.vocab_size() == 5001);
  CHECK(sparse.encode("ab<|endoftext|>") == Ids{1000, 5000});
  CHECK(sparse.token_bytes(1000) == "ab");
  CHECK_THROWS_WITH(sparse.token_bytes(300), Catch::Contains("300") && Catch::Contains("not in the vocabulary"));
  CHECK_THROWS_WITH(sparse.token_bytes(5001), Catch::Contains("outside the vocabulary"));
  // A token spelled with characters outside GPT-2's byte table stands for its own UTF-8 bytes.
  const ByteLevelBpeTokenizer added = ByteLevelBpeTokenizer::from_strings(vocab_with(R"("\u4e2d<pad>": 256)"), "");
  CHECK(added.token_bytes(256) == "\xE4\xB8\xAD<pad>");
  CHECK(added.id_of("\xE4\xB8\xAD<pad>") == 256);
}

TEST_CASE("broken tokenizer files give clear errors", "[tokenizer]") {
  const std::string merges = "#version: 0.2\na b\n";
  const std::string vocab = vocab_with(R"("ab": 256)");
  auto vocab_error = [&](const std::string& json) {
    return error_of([&] { ByteLevelBpeTokenizer::from_strings(json, merges, "test"); });
  };
  auto merges_error = [&](const std::string& text) {
    return error_of([&] { ByteLevelBpeTokenizer::from_strings(vocab, text, "test"); });
  };

  REQUIRE(vocab_error(vocab).empty());
  // JSON that is not JSON, or not the expected shape.
  CHECK_THAT(vocab_error("{\"a\": 1,"), Catch::Contains("vocab.json of test") && Catch::Contains("not valid JSON"));
  CHECK_THAT(vocab_error(""), Catch::Contains("not valid JSON"));
  CHECK_THAT(vocab_error("[1, 2]"), Catch::Contains("expected a JSON object") && Catch::Contains("found an array"));
  CHECK_THAT(vocab_error("42"), Catch::Contains("expected a JSON object") && Catch::Contains("found a number"));
  CHECK_THAT(vocab_error("\"x\""), Catch::Contains("found a string"));
  CHECK_THAT(vocab_error(vocab_with(R"("zz": "7")")), Catch::Contains("\"zz\"") && Catch::Contains("found a string"));
  CHECK_THAT(vocab_error(vocab_with(R"("zz": 7.5)")), Catch::Contains("\"zz\"") && Catch::Contains("not an integer"));
  CHECK_THAT(vocab_error(vocab_with(R"("zz": 1e3)")), Catch::Contains("not an integer"));
  CHECK_THAT(vocab_error(vocab_with(R"("zz": null)")), Catch::Contains("found null"));
  CHECK_THAT(vocab_error(vocab_with(R"("zz": {"a": 1})")), Catch::Contains("found an object"));
  CHECK_THAT(vocab_error(vocab_with(R"("zz": [300])")), Catch::Contains("found an array"));
  CHECK_THAT(vocab_error(vocab_with(R"("zz": -3)")), Catch::Contains("\"zz\"") && Catch::Contains("-3, a negative number"));
  CHECK_THAT(vocab_error(vocab_with(R"("zz": 1099511627776)")),
             Catch::Contains("1099511627776") && Catch::Contains("ids up to 9999999"));
  CHECK_THAT(vocab_error(vocab_with(R"("zz": 10000000)")), Catch::Contains("ids up to 9999999"));
  CHECK_THAT(vocab_error(vocab_with(R"("zz": 123456789012345678901234567890)")), Catch::Contains("not an integer"));
  // Deep nesting is refused at the second bracket, without building anything.
  CHECK_THAT(vocab_error(std::string(100'000, '[') + std::string(100'000, ']')), Catch::Contains("found an array"));
  CHECK_THAT(vocab_error("{\"a\": " + std::string(100'000, '{')), Catch::Contains("found an object"));
  // Duplicates.
  CHECK_THAT(vocab_error(vocab_with(R"("ab": 256, "zz": 256)")),
             Catch::Contains("\"ab\"") && Catch::Contains("\"zz\"") && Catch::Contains("both have id 256"));
  CHECK_THAT(vocab_error(vocab_with(R"("ab": 256, "ab": 257)")), Catch::Contains("\"ab\" appears twice"));
  // A vocabulary with none of the byte tokens is not byte-level BPE at all.
  CHECK_THAT(vocab_error("{}"), Catch::Contains("none of the 256 byte tokens"));

  // merges.txt: the line number, the line, and what is wrong.
  CHECK_THAT(merges_error("#version: 0.2\nab\n"),
             Catch::Contains("merges.txt of test: line 2") && Catch::Contains("found 1 part"));
  CHECK_THAT(merges_error("a b c\n"), Catch::Contains("line 1") && Catch::Contains("found 3 parts"));
  CHECK_THAT(merges_error("a b\na  b\n"), Catch::Contains("line 2") && Catch::Contains("found 3 parts"));
  CHECK_THAT(merges_error("a \n"), Catch::Contains("line 1") && Catch::Contains("empty token"));
  CHECK_THAT(merges_error("a\tb\n"), Catch::Contains("found 1 part") && Catch::Contains("a\\x09b"));
  CHECK_THAT(merges_error("a \xFF\n"), Catch::Contains("\\xff"));

  // load() names the path.
  CHECK_THAT(error_of([] { ByteLevelBpeTokenizer::load("/nonexistent/vocab.json", "/nonexistent/merges.txt"); }),
             Catch::Contains("/nonexistent/vocab.json"));
}

TEST_CASE("GPT-2: known ids", "[tokenizer][gpt2]") {
  if (!have_gpt2()) {
    WARN("skipped: " << kGpt2Dir.string() << " is absent (it holds GPT-2's vocab.json and merges.txt)");
    return;
  }
  const ByteLevelBpeTokenizer& tok = gpt2_tokenizer();
  CHECK(tok.vocab_size() == 50257);
  CHECK(tok.end_of_text_id() == 50256);
  // From GPT-2's own documentation and countless notebooks.
  CHECK(tok.encode("Hello world") == Ids{15496, 995});
  CHECK(tok.encode("hello world") == Ids{31373, 995});
  CHECK(tok.encode(" the") == Ids{262});
  CHECK(tok.encode("\n\n") == Ids{628});
  CHECK(tok.encode("The quick brown fox jumps over the lazy dog.") ==
        Ids{464, 2068, 7586, 21831, 18045, 625, 262, 16931, 3290, 13});
  // " <|endoftext|> x": the spaces stay with their neighbours (" " is 220, " x" is 2124).
  CHECK(tok.encode(" <|endoftext|> x") == Ids{220, 50256, 2124});
  CHECK(tok.display(220) == "\u2423");
  CHECK(tok.display(198) == "\u21B5");
  CHECK(tok.display(628) == "\u21B5\u21B5");
  CHECK(tok.display(995) == "\u2423world");
  CHECK(tok.display(33768) == "\u2039" "E6 97\u203A");  // the first two bytes of 日
  CHECK(tok.display(50256) == "<|endoftext|>");
  CHECK(tok.token_bytes(995) == " world");
}

TEST_CASE("GPT-2: hard texts match the independent Python reference", "[tokenizer][gpt2]") {
  if (!have_gpt2()) {
    WARN("skipped: " << kGpt2Dir.string() << " is absent (it holds GPT-2's vocab.json and merges.txt)");
    return;
  }
  const ByteLevelBpeTokenizer& tok = gpt2_tokenizer();
  const nlohmann::json fixture = nlohmann::json::parse(read_text(kTokenizerFixtures / "gpt2_expected.json"));
  REQUIRE(fixture.at("cases").size() >= 20);
  for (const auto& c : fixture.at("cases")) {
    const std::string name = c.at("name").get<std::string>();
    const std::string text = c.at("text").get<std::string>();
    const Ids expected = c.at("ids").get<Ids>();
    INFO("case " << name << ": " << text);
    CHECK(tok.encode(text) == expected);
    CHECK(tok.decode(expected) == text);
  }
}

TEST_CASE("symbols missing from vocab.json encode as the unknown token, as Hugging Face does", "[tokenizer]") {
  // Small test vocabularies (Hugging Face's tiny-random-gpt2 among them) lack some byte tokens
  // and have merges whose parts or results are not in vocab.json. GPT2Tokenizer merges strings
  // regardless and maps a final symbol it cannot find to unk_token, <|endoftext|>.
  const std::string vocab = vocab_with(R"("<|endoftext|>": 300, "ab": 256)", '\n');
  const auto tok = ByteLevelBpeTokenizer::from_strings(vocab, "#version: 0.2\na b\nq zz\na c\nac a\n", "test");
  const int32_t a = *tok.id_of("a"), b = *tok.id_of("b");
  CHECK(tok.encode("ab") == std::vector<int32_t>{256});
  CHECK(tok.encode("a\nb") == std::vector<int32_t>{a, 300, b});  // '\n' has no token
  CHECK(tok.encode("ac") == std::vector<int32_t>{300});          // "ac" is a merge result without an id
  CHECK(tok.encode("aca") == std::vector<int32_t>{300});         // ... that merges on into "aca"
  CHECK(tok.encode("\n") == std::vector<int32_t>{300});
  // Without <|endoftext|> there is nothing to stand in: a clear error, not a wrong id.
  const auto no_unk = ByteLevelBpeTokenizer::from_strings(vocab_with(R"("ab": 256)", '\n'), "a b\n", "test");
  CHECK(no_unk.encode("ab") == std::vector<int32_t>{256});
  CHECK_THROWS_WITH(no_unk.encode("a\nb"), Catch::Contains("lacks"));
}

TEST_CASE("Hugging Face's tiny-random-gpt2 tokenizer loads and encodes", "[tokenizer][shared]") {
  const auto dir = hs::test::shared_dir() / "models/tiny-random-gpt2";
  if (!std::filesystem::exists(dir / "vocab.json")) {
    WARN("skipped: " << dir << " is absent (optional real-world data)");
    return;
  }
  const auto tok = ByteLevelBpeTokenizer::load(dir / "vocab.json", dir / "merges.txt");
  CHECK(tok.vocab_size() == 1000);
  CHECK(tok.end_of_text_id() == 0);
  const auto ids = tok.encode("Hello world, it's me!");
  CHECK(!ids.empty());
  for (int32_t id : ids) CHECK((id >= 0 && id < 1000));
}
