// The catalogue of refused input (docs/refused-input.md), tested: each case builds the broken
// folder, file, text or argument, runs headscope-cli on it and compares stderr, character for
// character, with the message the catalogue gives (read from the document itself, so the two
// cannot drift apart). Every case also checks that nothing was written.
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>

#include "core/error.h"
#include "core/features/sae.h"
#include "core/model/config.h"
#include "core/model/model.h"
#include "core/session/session.h"
#include "core/tensor/safetensors.h"
#include "core/tokenizer/byte_level_bpe.h"
#include "test_support.h"

namespace fs = std::filesystem;

namespace {

// ---------------------------------------------------------------- the catalogue

const std::string& catalogue() {
  static const std::string text = hs::test::read_text(hs::test::source_dir() / "docs/refused-input.md");
  return text;
}

// The `index`-th code block after the heading "### <id>." (its lines, each ending in '\n').
std::string catalogue_message(const std::string& id, int index = 0) {
  const std::string& doc = catalogue();
  size_t at = doc.find("\n### " + id + ". ");
  REQUIRE(at != std::string::npos);
  const size_t next_heading = doc.find("\n### ", at + 1);
  for (int i = 0; i <= index; ++i) {
    at = doc.find("\n```\n", at + 1);
    REQUIRE(at != std::string::npos);
    REQUIRE(at < next_heading);
    if (i < index) at = doc.find("\n```\n", at + 1);  // skip to the closing fence
  }
  const size_t begin = at + 5, end = doc.find("\n```\n", begin);
  REQUIRE(end != std::string::npos);
  return doc.substr(begin, end - begin) + "\n";
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t p = 0; (p = s.find(from, p)) != std::string::npos; p += to.size()) s.replace(p, from.size(), to);
  return s;
}

using Subst = std::vector<std::pair<std::string, std::string>>;

std::string expected(const std::string& id, const Subst& subst, int index = 0) {
  std::string m = catalogue_message(id, index);
  for (const auto& [from, to] : subst) m = replace_all(m, from, to);
  return m;
}

// ---------------------------------------------------------------- running the CLI

using Cli = hs::test::CliRun;
using hs::test::quote;

int g_counter = 0;

Cli cli(const std::string& args, const std::string& prefix = "", const std::string& wrapper = "") {
  return hs::test::run_cli(args, prefix, wrapper);
}

// A scratch folder, removed (permissions restored first) at the end of the test.
struct Scratch {
  fs::path dir;
  Scratch() {
    dir = hs::test::scratch_dir() / ("refused_" + std::to_string(++g_counter));
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~Scratch() {
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(dir, ec); it != fs::recursive_directory_iterator(); it.increment(ec))
      fs::permissions(it->path(), fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(dir, ec);
  }
  // A copy of a fixture model folder, named "model" unless told otherwise.
  fs::path model(const std::string& fixture = "f32_prefixed", const std::string& name = "model") const {
    const fs::path d = dir / name;
    fs::create_directories(d);
    for (const auto& e : fs::directory_iterator(hs::test::fixture_model(fixture)))
      if (e.path().filename() != "reference.safetensors" && e.path().filename() != "fixture.json")
        fs::copy_file(e.path(), d / e.path().filename(), fs::copy_options::overwrite_existing);
    return d;
  }
  // Every file under the folder whose name marks it as an export's temporary.
  std::vector<fs::path> temporaries() const {
    std::vector<fs::path> found;
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(dir, ec); it != fs::recursive_directory_iterator(); it.increment(ec))
      if (it->path().filename().string().find(".tmp-") != std::string::npos) found.push_back(it->path());
    return found;
  }
};

void write_file(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

bool running_as_root() { return ::geteuid() == 0; }

// Checks a refusal: exit code, the exact message, and that no output or temporary appeared.
void check_refused(const Cli& r, const std::string& message, const Scratch& s, int code = 1) {
  INFO("stderr: " << r.err);
  CHECK(r.code == code);
  CHECK(r.err == message);
  CHECK(r.out.empty());
  CHECK(s.temporaries().empty());
}

// ---------------------------------------------------------------- safetensors files by hand

using hs::test::Entry;

std::vector<Entry> read_entries(const fs::path& p) {
  const auto f = hs::SafetensorsFile::open(p);
  std::vector<Entry> out;
  for (const auto& t : f->tensors()) {
    const auto raw = f->raw_bytes(t);
    out.push_back({t.name, t.dtype_text, t.shape, std::string(reinterpret_cast<const char*>(raw.data()), raw.size())});
  }
  return out;
}

using hs::test::build_safetensors;

// Any header text and data, with the header length as given (or the true one).
std::string raw_safetensors(const std::string& header, const std::string& data, std::optional<uint64_t> length = {}) {
  const uint64_t n = length.value_or(header.size());
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header + data;
}

Entry* find_entry(std::vector<Entry>& entries, const std::string& name) {
  for (Entry& e : entries)
    if (e.name == name) return &e;
  FAIL("no tensor " << name);
  return nullptr;
}

std::string edit_config(const fs::path& model, const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json j = nlohmann::json::parse(hs::test::read_text(model / "config.json"));
  edit(j);
  write_file(model / "config.json", j.dump(2));
  return j.dump();
}

// The ids of every case in the catalogue, and the ones the tests below cover.
const std::set<std::string> kTested = {
    "R01", "R02", "R03", "R04", "R05", "R06", "R07", "R08", "R09", "R10", "R11", "R12", "R13", "R14",
    "R15", "R16", "R17", "R18", "R19", "R20", "R21", "R22", "R23", "R24", "R25", "R26", "R27", "R28",
    "R29", "R30", "R31", "R32", "R33", "R34", "R35", "R36", "R37", "R38", "R39", "R40", "R41", "R42",
    "R43", "R44", "R45", "R46", "R47", "R48", "R49", "R50", "R51", "R52", "R53", "R54", "R55", "R56",
    "R57", "R60", "R61", "R62", "R63", "R64", "R65", "R66", "R70", "R71", "R72", "R73", "R74", "R75", "R76", "R77", "R78", "R80", "R81", "R82", "R83", "R84", "R85", "R86", "R87",
    "R90", "R91", "R92", "R93", "R94", "R95", "R96", "R97",
    "R110", "R111", "R112", "R113",
    "R120", "R121", "R122", "R123", "R124", "R125", "R126", "R127", "R128", "R129",
};

const char* kText = "The cat sat on the mat.";

}  // namespace

TEST_CASE("refused input: every case of the catalogue has a test", "[refused]") {
  std::set<std::string> in_doc;
  const std::regex heading(R"(\n### (R\d+)\. )");
  const std::string& doc = catalogue();
  for (auto it = std::sregex_iterator(doc.begin(), doc.end(), heading); it != std::sregex_iterator(); ++it)
    in_doc.insert((*it)[1]);
  CHECK(in_doc == kTested);
  CHECK(in_doc.size() >= 25);
}

TEST_CASE("refused input: model folders (R01-R08)", "[refused]") {
  Scratch s;
  SECTION("R01 no such folder") {
    const fs::path m = s.dir / "nope";
    check_refused(cli("info --model " + quote(m.string())), expected("R01", {{"<model>", m.string()}}), s);
  }
  SECTION("R02 a file instead of a folder") {
    const fs::path m = s.model();
    check_refused(cli("info --model " + quote((m / "config.json").string())), expected("R02", {{"<model>", m.string()}}), s);
  }
  SECTION("R03 pickle only") {
    const fs::path m = s.model();
    fs::remove(m / "model.safetensors");
    write_file(m / "pytorch_model.bin", "PK\x03\x04 pickle");
    check_refused(cli("info --model " + quote(m.string())), expected("R03", {{"<model>", m.string()}}), s);
  }
  SECTION("R04 sharded only") {
    const fs::path m = s.model();
    fs::remove(m / "model.safetensors");
    write_file(m / "model.safetensors.index.json", "{}");
    check_refused(cli("info --model " + quote(m.string())), expected("R04", {{"<model>", m.string()}}), s);
  }
  SECTION("R05 no weights") {
    const fs::path m = s.dir / "empty";
    fs::create_directories(m);
    check_refused(cli("info --model " + quote(m.string())), expected("R05", {{"<model>", m.string()}}), s);
  }
  SECTION("R06 model.safetensors is a folder") {
    const fs::path m = s.model();
    fs::remove(m / "model.safetensors");
    fs::create_directories(m / "model.safetensors");
    check_refused(cli("info --model " + quote(m.string())), expected("R06", {{"<model>", m.string()}}), s);
  }
  SECTION("R07 model.safetensors unreadable") {
    if (running_as_root()) {
      WARN("R07 skipped: the tests run as root, and chmod 000 does not keep root from reading a file.");
      return;
    }
    const fs::path m = s.model();
    fs::permissions(m / "model.safetensors", fs::perms::none);
    check_refused(cli("info --model " + quote(m.string())), expected("R07", {{"<model>", m.string()}}), s);
  }
  SECTION("R08 no tokenizer") {
    const fs::path m = s.model();
    fs::remove(m / "vocab.json");
    check_refused(cli("info --model " + quote(m.string())), expected("R08", {{"<model>", m.string()}}), s);
  }
}

TEST_CASE("refused input: config.json (R09-R18)", "[refused]") {
  Scratch s;
  const fs::path m = s.model();
  const Subst sub = {{"<model>", m.string()}};
  auto info = [&] { return cli("info --model " + quote(m.string())); };
  SECTION("R09 missing") {
    fs::remove(m / "config.json");
    check_refused(info(), expected("R09", sub), s);
  }
  SECTION("R10 a folder") {
    fs::remove(m / "config.json");
    fs::create_directories(m / "config.json");
    check_refused(info(), expected("R10", sub), s);
  }
  SECTION("R11 empty") {
    write_file(m / "config.json", "");
    check_refused(info(), expected("R11", sub), s);
  }
  SECTION("R12 not JSON") {
    write_file(m / "config.json", "{\"n_embd\": 32,\n");
    check_refused(info(), expected("R12", sub), s);
  }
  SECTION("R13 n_head does not divide n_embd") {
    edit_config(m, [](auto& j) { j["n_head"] = 5; });
    check_refused(info(), expected("R13", sub), s);
  }
  SECTION("R14 a zero size") {
    edit_config(m, [](auto& j) { j["n_layer"] = 0; });
    check_refused(info(), expected("R14", sub), s);
  }
  SECTION("R15 an absurd size") {
    edit_config(m, [](auto& j) { j["n_embd"] = 4294967296LL; });
    check_refused(info(), expected("R15", sub), s);
  }
  SECTION("R16 unknown model_type") {
    edit_config(m, [](auto& j) { j["model_type"] = "mamba"; });
    check_refused(info(), expected("R16", sub), s);
  }
  SECTION("R17 unknown activation") {
    edit_config(m, [](auto& j) { j["activation_function"] = "swiglu"; });
    check_refused(info(), expected("R17", sub), s);
  }
  SECTION("R18 a required size is missing") {
    edit_config(m, [](auto& j) { j.erase("n_embd"); });
    check_refused(info(), expected("R18", sub), s);
  }
}

TEST_CASE("refused input: safetensors headers (R19, R21-R29)", "[refused]") {
  Scratch s;
  const fs::path m = s.model();
  const Subst sub = {{"<model>", m.string()}};
  auto with_weights = [&](const std::string& bytes) {
    write_file(m / "model.safetensors", bytes);
    return cli("run --model " + quote(m.string()) + " --text hi -o " + quote((s.dir / "out.json").string()));
  };
  const std::string eight(8, '\0'), twelve(12, '\0');
  SECTION("R19 empty file") { check_refused(with_weights(""), expected("R19", sub), s); }
  SECTION("R21 header length near 2^64") {
    check_refused(with_weights(raw_safetensors("{}", "", ~uint64_t{0})), expected("R21", sub), s);
    const std::string near = expected("R21", sub);
    check_refused(with_weights(raw_safetensors("{}", "", ~uint64_t{0} - 7)),
                  replace_all(near, "18446744073709551615", "18446744073709551608"), s);
  }
  SECTION("R22 header not JSON") { check_refused(with_weights(raw_safetensors("{\"a\":", "")), expected("R22", sub), s); }
  SECTION("R23 header not an object") { check_refused(with_weights(raw_safetensors("[1, 2]", "")), expected("R23", sub), s); }
  SECTION("R24 offsets past the end") {
    check_refused(with_weights(raw_safetensors(R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", eight)),
                  expected("R24", sub), s);
  }
  SECTION("R25 reversed offsets") {
    check_refused(with_weights(raw_safetensors(R"({"a": {"dtype": "F32", "shape": [0], "data_offsets": [8, 4]}})", eight)),
                  expected("R25", sub), s);
  }
  SECTION("R26 overlapping tensors") {
    check_refused(with_weights(raw_safetensors(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                                                  "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
                                               twelve)),
                  expected("R26", sub), s);
  }
  SECTION("R27 element count overflows") {
    check_refused(with_weights(raw_safetensors(
                      R"({"a": {"dtype": "F32", "shape": [4294967296, 4294967296, 16], "data_offsets": [0, 4]}})",
                      std::string(4, '\0'))),
                  expected("R27", sub), s);
  }
  SECTION("R28 byte count does not match the shape") {
    check_refused(with_weights(raw_safetensors(R"({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", eight)),
                  expected("R28", sub), s);
  }
  SECTION("R29 unknown dtype") {
    check_refused(with_weights(raw_safetensors(R"({"a": {"dtype": "F4", "shape": [1], "data_offsets": [0, 4]}})",
                                               std::string(4, '\0'))),
                  expected("R29", sub), s);
  }
  CHECK(!fs::exists(s.dir / "out.json"));
}

// Whether `text` matches a catalogue line in which <n> stands for digits and <name> for a tensor
// name (anything but a quote). Hand-made rather than std::regex: it runs once per byte of a file.
bool matches_pattern(std::string_view text, std::string_view pattern) {
  while (!pattern.empty()) {
    if (pattern.starts_with("<n>")) {
      size_t digits = 0;
      while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
      if (digits == 0) return false;
      text.remove_prefix(digits), pattern.remove_prefix(3);
    } else if (pattern.starts_with("<name>")) {
      const size_t quote = text.find('"');
      if (quote == 0 || quote == std::string_view::npos) return false;
      text.remove_prefix(quote), pattern.remove_prefix(6);
    } else {
      if (text.empty() || text.front() != pattern.front()) return false;
      text.remove_prefix(1), pattern.remove_prefix(1);
    }
  }
  return text.empty();
}

// R20, in the library: every length, so it runs fast enough to cover each byte of the file.
TEST_CASE("refused input: model.safetensors truncated at every length (R20)", "[refused][slow]") {
  const std::string whole = hs::test::read_text(hs::test::fixture_model("f16_plain") / "model.safetensors");
  REQUIRE(whole.size() > 1000);
  // The catalogue's three messages, without the CLI's prefix.
  std::vector<std::string> patterns;
  const std::string block = expected("R20", {{"<model>", "NAME"}});
  for (size_t start = 0, nl; (nl = block.find('\n', start)) != std::string::npos; start = nl + 1)
    patterns.push_back(block.substr(start, nl - start).substr(std::string("headscope-cli: error: ").size()));
  REQUIRE(patterns.size() == 3);
  CHECK(matches_pattern("NAME/model.safetensors: file is 3 bytes, too short to be safetensors (it needs an 8-byte header "
                        "length). The file is truncated or not a safetensors file.",
                        patterns[0]));
  CHECK(!matches_pattern("NAME/model.safetensors: file is x bytes", patterns[0]));
  const auto* bytes = reinterpret_cast<const uint8_t*>(whole.data());
  // Every length parses the header again, which the sanitizers make slow. There, every length up to
  // the end of the header is kept (each changes the message), and of the data block a stride plus a
  // byte either side of each tensor's end; the Release build checks every length.
  uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, bytes, sizeof header_bytes);  // little-endian, as on every machine we build for
  const size_t data_start = 8 + header_bytes;
  const auto intact = hs::SafetensorsFile::from_bytes(std::span<const uint8_t>(bytes, whole.size()), "x");
  std::vector<size_t> lengths;
  for (size_t n = 0; n < whole.size(); ++n) {
    bool keep = !hs::test::kSanitized || n <= data_start || n % 97 == 0;
    for (const hs::TensorInfo& t : intact->tensors())
      keep = keep || (n + 1 >= data_start + t.end && n <= data_start + t.end + 1);
    if (keep) lengths.push_back(n);
  }
  std::vector<int> hits(3, 0);
  for (size_t n : lengths) {
    std::string message;
    try {
      (void)hs::SafetensorsFile::from_bytes(std::span<const uint8_t>(bytes, n), "NAME/model.safetensors");
    } catch (const hs::Error& e) {
      message = e.what();
    }
    if (message.empty()) FAIL("the file truncated to " << n << " bytes was accepted");
    bool matched = false;
    for (size_t k = 0; k < patterns.size() && !matched; ++k)
      if (matches_pattern(message, patterns[k])) matched = true, ++hits[k];
    if (!matched) FAIL("truncated to " << n << " bytes: unexpected message: " << message);
  }
  CHECK(hits[0] == 8);
  CHECK(hits[1] > 0);
  CHECK(hits[2] > 0);
  // The intact file still loads.
  CHECK_NOTHROW(hs::SafetensorsFile::from_bytes(std::span<const uint8_t>(bytes, whole.size()), "x"));
}

TEST_CASE("refused input: other model files truncated at every length never crash", "[refused][slow]") {
  const fs::path f = hs::test::fixture_model("f32_prefixed");
  const std::string config = hs::test::read_text(f / "config.json");
  const size_t config_end = config.find_last_not_of(" \n") + 1;  // cutting only trailing whitespace leaves valid JSON
  for (size_t n = 0; n < config_end; ++n) {
    INFO("config.json truncated to " << n << " bytes");
    CHECK_THROWS_AS(hs::parse_config(std::string_view(config).substr(0, n), "config.json"), hs::Error);
  }
  const std::string vocab = hs::test::read_text(f / "vocab.json"), merges = hs::test::read_text(f / "merges.txt");
  for (size_t n = 0; n < vocab.size(); ++n) {
    INFO("vocab.json truncated to " << n << " bytes");
    CHECK_THROWS_AS(hs::ByteLevelBpeTokenizer::from_strings(std::string_view(vocab).substr(0, n), merges), hs::Error);
  }
  // A merge list cut at a line boundary is a shorter, valid merge list; cut elsewhere it may
  // still parse. Either way: a tokenizer or hs::Error, and a tokenizer that round-trips text.
  for (size_t n = 0; n < merges.size(); ++n) {
    INFO("merges.txt truncated to " << n << " bytes");
    try {
      const hs::ByteLevelBpeTokenizer t =
          hs::ByteLevelBpeTokenizer::from_strings(vocab, std::string_view(merges).substr(0, n));
      const std::vector<int32_t> ids = t.encode(kText);
      CHECK(t.decode(ids) == kText);
    } catch (const hs::Error&) {
    }
  }
}

TEST_CASE("refused input: truncated model.safetensors through the CLI (R20)", "[refused]") {
  Scratch s;
  const fs::path m = s.model("f16_plain");
  const std::string whole = hs::test::read_text(m / "model.safetensors");
  const std::string name = (m / "model.safetensors").string();
  const size_t header_end = 8 + 2304;  // the fixture's header length (checked below)
  REQUIRE(whole.size() > header_end + 100);
  const std::string block = expected("R20", {{"<model>", m.string()}});
  const std::string too_short = block.substr(0, block.find('\n') + 1);
  for (size_t n : {size_t{0}, size_t{5}, size_t{8}, size_t{100}, header_end - 1, header_end, header_end + 1001,
                   whole.size() - 1}) {
    INFO("truncated to " << n << " bytes");
    write_file(m / "model.safetensors", whole.substr(0, n));
    const Cli r = cli("info --model " + quote(m.string()));
    CHECK(r.code == 1);
    if (n < 8) {
      CHECK(r.err == replace_all(too_short, "<n>", std::to_string(n)));
    } else if (n < header_end) {
      CHECK(r.err == "headscope-cli: error: " + name + ": header length is 2304 bytes but only " + std::to_string(n - 8) +
                         " bytes follow. The file is truncated; download it again.\n");
    } else {
      CHECK(r.err.rfind("headscope-cli: error: " + name + ": tensor \"", 0) == 0);
      CHECK(r.err.find("\": data_offsets end at byte ") != std::string::npos);
      CHECK(r.err.find(" but the data block has only " + std::to_string(n - header_end) +
                       " bytes. The file is truncated; download it again.\n") != std::string::npos);
    }
  }
}

TEST_CASE("refused input: weights that do not fit the config (R30-R34)", "[refused]") {
  Scratch s;
  const fs::path m = s.model();
  const Subst sub = {{"<model>", m.string()}};
  std::vector<Entry> entries = read_entries(m / "model.safetensors");
  auto info_with = [&](const std::vector<Entry>& e) {
    write_file(m / "model.safetensors", build_safetensors(e));
    return cli("info --model " + quote(m.string()));
  };
  SECTION("R30 integer weights") {
    find_entry(entries, "transformer.wte.weight")->dtype = "I32";
    check_refused(info_with(entries), expected("R30", sub), s);
  }
  SECTION("R31 a missing tensor") {
    std::erase_if(entries, [](const Entry& e) { return e.name == "transformer.ln_f.bias"; });
    check_refused(info_with(entries), expected("R31", sub), s);
  }
  SECTION("R32 an extra tensor") {
    entries.push_back({"transformer.h.0.attn.extra", "F32", {2}, std::string(8, '\0')});
    check_refused(info_with(entries), expected("R32", sub), s);
  }
  SECTION("R33 a config that disagrees with the weights") {
    edit_config(m, [](auto& j) { j["n_embd"] = 64; });
    check_refused(cli("info --model " + quote(m.string())), expected("R33", sub), s);
  }
  SECTION("R34 both naming schemes") {
    Entry copy = *find_entry(entries, "transformer.wte.weight");
    copy.name = "wte.weight";
    entries.push_back(copy);
    check_refused(info_with(entries), expected("R34", sub), s);
  }
}

TEST_CASE("refused input: NaN weights load with a warning (R35)", "[refused]") {
  Scratch s;
  const fs::path m = s.model();
  std::vector<Entry> entries = read_entries(m / "model.safetensors");
  Entry* wte = find_entry(entries, "transformer.wte.weight");
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(wte->bytes.data() + (51 * 32 + 3) * sizeof(float), &nan, sizeof nan);  // token 51 ("T")
  write_file(m / "model.safetensors", build_safetensors(entries));
  const fs::path out = s.dir / "out.json";

  const Cli run = cli("run --model " + quote(m.string()) + " --text " + quote(kText) + " -o " + quote(out.string()));
  INFO(run.err);
  CHECK(run.code == 0);
  CHECK(run.err == expected("R35", {{"<model>", m.string()}}));
  CHECK(fs::exists(out));

  // Every command says so; info also lists it.
  const std::string model_warning = expected("R35", {{"<model>", m.string()}}).substr(0, run.err.find('\n') + 1);
  const Cli info = cli("info --model " + quote(m.string()));
  CHECK(info.code == 0);
  CHECK(info.err == model_warning);
  const auto j = nlohmann::json::parse(info.out);
  REQUIRE(j["warnings"].size() == 1);
  CHECK(j["warnings"][0].get<std::string>().find("non-finite") != std::string::npos);
  const Cli tok = cli("tokenize --model " + quote(m.string()) + " --text hi");
  CHECK(tok.code == 0);
  CHECK(tok.err == model_warning);
}

TEST_CASE("refused input: NaN and infinite 16-bit weights are counted in the file's format (R35)", "[refused]") {
  // 16-bit matrices are packed from the file without a float32 copy, so their scan reads the
  // 16-bit values: all exponent bits set is NaN or infinity (the largest finite value is not).
  // The packed copy is checked first; the file is scanned for the count only when it has one, so
  // a joined QKV's part and the tied unembedding are named as the file names them.
  struct Case {
    const char* fixture;
    const char* tensor;
    const char* named;  // the tensor's name in the warning
    std::vector<uint16_t> bad, finite;
  };
  const std::vector<uint16_t> bf16_bad = {0x7fc0, 0xff80, 0x7f80}, bf16_finite = {0x7f7f, 0xff7f};
  const std::vector<uint16_t> f16_bad = {0x7c00, 0xfe00, 0x7c01}, f16_finite = {0x7bff, 0xfbff};
  for (const Case& c : {Case{"bf16_prefixed", "transformer.h.0.mlp.c_fc.weight", "h.0.mlp.c_fc.weight", bf16_bad, bf16_finite},
                        Case{"f16_plain", "h.0.mlp.c_fc.weight", "h.0.mlp.c_fc.weight", f16_bad, f16_finite},
                        Case{"llama_gqa", "model.layers.0.self_attn.k_proj.weight", "layers.0.self_attn.k_proj.weight",
                             f16_bad, f16_finite},
                        Case{"llama_tied_headdim", "embed_tokens.weight", "embed_tokens.weight", bf16_bad, bf16_finite}}) {
    INFO(c.fixture);
    Scratch s;
    const fs::path m = s.model(c.fixture);
    std::vector<Entry> entries = read_entries(m / "model.safetensors");
    Entry* e = find_entry(entries, c.tensor);
    const size_t n = e->bytes.size() / 2;
    const size_t at[] = {0, 5, n - 1, 2, n - 2};  // the first and last values, and some between
    for (size_t i = 0; i < 5; ++i) {
      const uint16_t v = i < 3 ? c.bad[i] : c.finite[i - 3];
      std::memcpy(e->bytes.data() + 2 * at[i], &v, 2);
    }
    write_file(m / "model.safetensors", build_safetensors(entries));
    const auto model = hs::Model::load(m);
    REQUIRE(model->weights()->warnings().size() == 1);
    CHECK(model->weights()->warnings()[0].find(std::string(": 3 non-finite value(s) (NaN or infinity) in ") + c.named +
                                               ";") != std::string::npos);
  }
}

TEST_CASE("refused input: tokenizer files (R36-R39)", "[refused]") {
  Scratch s;
  const fs::path m = s.model();
  const Subst sub = {{"<model>", m.string()}};
  auto info = [&] { return cli("info --model " + quote(m.string())); };
  SECTION("R36 empty vocab.json") {
    write_file(m / "vocab.json", "");
    check_refused(info(), expected("R36", sub), s);
  }
  SECTION("R37 vocab.json not a vocabulary") {
    write_file(m / "vocab.json", "[1, 2]");
    check_refused(info(), expected("R37", sub), s);
  }
  SECTION("R38 vocab.json is a folder") {
    fs::remove(m / "vocab.json");
    fs::create_directories(m / "vocab.json");
    check_refused(info(), expected("R38", sub), s);
  }
  SECTION("R39 a broken merges line") {
    write_file(m / "merges.txt", "a b c\n");
    check_refused(info(), expected("R39", sub), s);
  }
}

TEST_CASE("refused input: tokenizer.json (R90-R93)", "[refused]") {
  Scratch s;
  const fs::path m = s.model();
  fs::remove(m / "vocab.json");
  fs::remove(m / "merges.txt");
  const Subst sub = {{"<model>", m.string()}};
  auto info = [&] { return cli("info --model " + quote(m.string())); };
  // A tokenizer.json HeadScope reads, broken one part at a time.
  nlohmann::json good = nlohmann::json::parse(
      hs::test::read_text(hs::test::source_dir() / "tests/fixtures/tokenizer/small_hf_sentencepiece.json"));
  SECTION("R90 a model that is not BPE") {
    good["model"]["type"] = "WordPiece";
    write_file(m / "tokenizer.json", good.dump());
    check_refused(info(), expected("R90", sub), s);
  }
  SECTION("R91 an unknown pre-tokenizer") {
    good["pre_tokenizer"] = {{"type", "Whitespace"}};
    write_file(m / "tokenizer.json", good.dump());
    check_refused(info(), expected("R91", sub), s);
  }
  SECTION("R92 an unknown normalizer") {
    good["normalizer"]["normalizers"][1] = {{"type", "Lowercase"}};
    write_file(m / "tokenizer.json", good.dump());
    check_refused(info(), expected("R92", sub), s);
  }
  SECTION("R93 a merge whose token is not in the vocabulary") {
    good["model"]["merges"] = {"x y"};
    write_file(m / "tokenizer.json", good.dump());
    check_refused(info(), expected("R93", sub), s);
  }
}

TEST_CASE("refused input: text and token ids (R40-R44)", "[refused]") {
  Scratch s;
  const fs::path m = s.model();
  const fs::path out = s.dir / "out.json";
  const std::string run = "run --model " + quote(m.string()) + " -o " + quote(out.string()) + " ";
  const std::string long_text = "The cat sat on the mat. The cat sat on the mat. The cat sat on the mat.";
  SECTION("R40 text longer than the context: the CLI refuses") {
    const auto model = hs::Model::load(m);
    REQUIRE(model->encode(long_text, true).size() == 39);
    check_refused(cli(run + "--text " + quote(long_text)), expected("R40", {}), s);
  }
  SECTION("R40 text longer than the context: the GUI's policy truncates with a warning") {
    const auto model = hs::Model::load(m);
    hs::TextRunOptions o;
    o.overlong = hs::OverlongPolicy::TruncateWithWarning;
    const hs::TextRun r = hs::run_text(model, long_text, o);
    CHECK(r.tokens.size() == 24);
    CHECK(r.dropped_tokens == 15);
    REQUIRE(!r.warnings.empty());
    CHECK(r.warnings[0] + "\n" == expected("R40", {}, 1));
  }
  SECTION("R41 invalid UTF-8") { check_refused(cli(run + "--text \"$(printf 'a\\377b')\""), expected("R41", {}), s); }
  SECTION("R42 a token id outside the vocabulary") { check_refused(cli(run + "--tokens 290,999"), expected("R42", {}), s); }
  SECTION("R43 token ids that are not numbers") { check_refused(cli(run + "--tokens 290,x"), expected("R43", {}), s, 2); }
  SECTION("R44 an empty prompt") { check_refused(cli(run + "--text '' --no-bos"), expected("R44", {}), s); }
  CHECK(!fs::exists(out));
}

TEST_CASE("refused input: ablation and patching (R70-R78)", "[refused]") {
  Scratch s;
  const fs::path m = s.model();
  const fs::path out = s.dir / "out.json";
  const std::string run = "run --model " + quote(m.string()) + " -o " + quote(out.string()) + " --text " + quote(kText) + " ";
  const std::string patch = "patch --model " + quote(m.string()) + " -o " + quote(out.string()) + " --what z ";
  auto prompts = [](const std::string& clean, const std::string& corrupt, const std::string& answer,
                    const std::string& wrong) {
    return "--clean " + quote(clean) + " --corrupt " + quote(corrupt) + " --answer " + quote(answer) + " --wrong " +
           quote(wrong);
  };
  SECTION("R70 --ablate that is not a list of heads") { check_refused(cli(run + "--ablate 3-2"), expected("R70", {}), s, 2); }
  SECTION("R71 a head the model does not have") { check_refused(cli(run + "--ablate 1.7"), expected("R71", {}), s); }
  SECTION("R72 prompts of different lengths") {
    check_refused(cli(patch + prompts("The cat sat", "The cat sat on", "!", ".")), expected("R72", {}), s);
  }
  SECTION("R73 an answer that is not one token") {
    check_refused(cli(patch + prompts("The cat", "The hat", " mat", ".")), expected("R73", {}), s);
  }
  SECTION("R74 the same answer twice") {
    check_refused(cli(patch + prompts("The cat", "The hat", "!", "!")), expected("R74", {}), s);
  }
  SECTION("R75 prompts the metric does not tell apart") {
    check_refused(cli(patch + prompts("The cat", "The cat", "!", ".")), expected("R75", {}), s);
  }
  SECTION("R76 an activation patching does not know") {
    check_refused(cli("patch --model " + quote(m.string()) + " -o " + quote(out.string()) + " --what resid_post " +
                      prompts("The cat", "The hat", "!", ".")),
                  expected("R76", {}), s, 2);
  }
  SECTION("R77 a site only attribution patching estimates, with the exact sweep") {
    check_refused(cli("patch --model " + quote(m.string()) + " -o " + quote(out.string()) + " --what z_pos " +
                      prompts("The cat", "The hat", "!", ".")),
                  expected("R77", {}), s, 2);
  }
  SECTION("R78 a patching method that does not exist") {
    check_refused(cli(patch + "--method 'atp*' " + prompts("The cat", "The hat", "!", ".")), expected("R78", {}), s, 2);
  }
  CHECK(!fs::exists(out));
}

TEST_CASE("refused input: output files (R45-R50)", "[refused]") {
  Scratch s;
  const fs::path m = s.model();
  const Subst sub = {{"<tmp>", s.dir.string()}};
  auto run_to = [&](const fs::path& out, const std::string& prefix = "") {
    return cli("run --model " + quote(m.string()) + " --text " + quote(kText) + " -o " + quote(out.string()), prefix);
  };
  SECTION("R45 the folder does not exist") {
    check_refused(run_to(s.dir / "missing/out.json"), expected("R45", sub), s);
    CHECK(!fs::exists(s.dir / "missing"));
  }
  SECTION("R46 the folder is a file") {
    write_file(s.dir / "file.txt", "keep me");
    check_refused(run_to(s.dir / "file.txt/out.json"), expected("R46", sub), s);
    CHECK(hs::test::read_text(s.dir / "file.txt") == "keep me");
  }
  SECTION("R47 the output path is a folder") {
    // A folder named like a JSON file, so the extension check passes and the writer sees it.
    const fs::path d = s.dir / "out.json";
    fs::create_directories(d);
    check_refused(run_to(d), expected("R47", {{"<tmp>", d.string()}}), s);
    CHECK(fs::is_directory(d));
  }
  SECTION("R48 a folder that cannot be written to") {
    if (!running_as_root()) {
      const fs::path d = s.dir / "locked";
      fs::create_directories(d);
      fs::permissions(d, fs::perms::owner_read | fs::perms::owner_exec);
      const fs::path out = d / "out.json";
      check_refused(run_to(out), expected("R48", {{"<out>", out.string()}}), s);
      CHECK(!fs::exists(out));
    } else {
      const fs::path out = "/sys/headscope-refused-input-test.json";
      const Cli r = run_to(out);
      CHECK(r.code == 1);
      CHECK(!fs::exists(out));
      // Read-only mounts of /sys (some containers) say "Read-only file system" instead.
      if (r.err.find("Read-only file system") == std::string::npos)
        CHECK(r.err == expected("R48", {{"<out>", out.string()}}));
    }
  }
  SECTION("R49 the disk fills up while writing") {
    const fs::path out = s.dir / "out.json";
    write_file(out, "an earlier export");
    // SIGXFSZ ignored: a write past the limit then fails with EFBIG, as a full disk fails one.
    check_refused(run_to(out, "trap '' XFSZ; ulimit -f 32;"), expected("R49", {{"<out>", out.string()}}), s);
    CHECK(hs::test::read_text(out) == "an earlier export");
    const fs::path npz = s.dir / "out.npz";
    write_file(npz, "an earlier export");
    const Cli r = run_to(npz, "trap '' XFSZ; ulimit -f 32;");
    CHECK(r.code == 1);
    CHECK(r.err == "headscope-cli: error: " + npz.string() + ": cannot write: writing the archive failed (is the disk full?).\n");
    CHECK(hs::test::read_text(npz) == "an earlier export");
    CHECK(s.temporaries().empty());
  }
  SECTION("R50 neither .json nor .npz") {
    const fs::path out = s.dir / "out.csv";
    check_refused(run_to(out), expected("R50", {{"<out>", out.string()}}), s, 2);
    CHECK(!fs::exists(out));
  }
}

TEST_CASE("refused input: memory (R51-R52)", "[refused]") {
  Scratch s;
  SECTION("R51 the activation cache does not fit") {
    const fs::path m = s.model("f16_plain");
    const fs::path out = s.dir / "out.json";
    // 100 KB holds the model (92 KB) but not the cache of 20 tokens.
    check_refused(cli("run --model " + quote(m.string()) + " --text 'The cat sat on the mat and the dog' -o " +
                          quote(out.string()),
                      "HEADSCOPE_AVAILABLE_MEMORY=100K"),
                  expected("R51", {}), s);
    CHECK(!fs::exists(out));
  }
  SECTION("R52 the weights do not fit") {
    const fs::path m = s.model("f16_plain");
    check_refused(cli("info --model " + quote(m.string()), "HEADSCOPE_AVAILABLE_MEMORY=80K"), expected("R52", {}), s);
    // The F16 model's matrices are packed in 16 bits: 100 KB loads it...
    CHECK(cli("info --model " + quote(m.string()), "HEADSCOPE_AVAILABLE_MEMORY=100K").code == 0);
    // ...but not its F32 twin, whose packed copy is float32, with the same advice.
    const fs::path f32 = s.model("f32_prefixed", "f32");
    CHECK(cli("info --model " + quote(f32.string()), "HEADSCOPE_AVAILABLE_MEMORY=160K").code == 0);
    const auto r = cli("info --model " + quote(f32.string()), "HEADSCOPE_AVAILABLE_MEMORY=100K");
    CHECK(r.code == 1);
    CHECK(r.err == "headscope-cli: error: loading f32 needs about 136 KB for its weights laid out for the forward pass "
                   "but only 100 KB is available; close other programs, or choose a smaller model.\n");
  }
}

TEST_CASE("refused input: the command line (R53-R55)", "[refused]") {
  Scratch s;
  check_refused(cli("frobnicate"), expected("R53", {}), s, 2);
  check_refused(cli("info --bogus"), expected("R54", {}), s, 2);
  check_refused(cli("info --model"), expected("R55", {}), s, 2);
}

TEST_CASE("refused input: gradients (R94-R97)", "[refused]") {
  Scratch s;
  const fs::path m = s.model(), out = s.dir / "g.json", v = s.dir / "v.npy";
  hs::test::write_npy(v, std::vector<float>(5, 1.0f));
  const std::string grad = "grad --model " + quote(m.string()) + " --text " + quote(kText) + " -o " + quote(out.string());
  const Subst sub = {{"<tmp>", s.dir.string()}};
  check_refused(cli(grad + " --metric logit_diff --answer ' the mat' --wrong ' dog'"), expected("R94", sub), s);
  check_refused(cli(grad + " --metric logit_diff --answer-id 5000 --wrong-id 3"), expected("R95", sub), s);
  check_refused(cli(grad + " --metric logit --answer-id 5 --pos 40"), expected("R96", sub), s);
  check_refused(cli(grad + " --metric dot --hook blocks.1.hook_resid_mid --vector " + quote(v.string())), expected("R97", sub), s);
  CHECK(!fs::exists(out));
}

TEST_CASE("refused input: attributions (R110-R113)", "[refused]") {
  Scratch s;
  const fs::path m = s.model(), out = s.dir / "a.json";
  const std::string attribute =
      "attribute --model " + quote(m.string()) + " --text " + quote(kText) + " -o " + quote(out.string());
  const Subst sub = {{"<tmp>", s.dir.string()}};
  check_refused(cli(attribute + " --method saliency --metric logit --answer-id 5"), expected("R110", sub), s, 2);
  check_refused(cli(attribute + " --method integrated_gradients --steps 0 --metric logit --answer-id 5"), expected("R111", sub), s, 2);
  check_refused(cli(attribute + " --method grad_x_input --steps 8 --metric logit --answer-id 5"), expected("R112", sub), s, 2);
  check_refused(cli(attribute + " --method grad_x_input --metric dot --answer-id 5"), expected("R113", sub), s, 2);
  CHECK(!fs::exists(out));
}

TEST_CASE("refused input: data-set scans (R60-R64)", "[refused]") {
  Scratch s;
  const fs::path m = s.model();
  const fs::path input = s.dir / "prompts.txt", out = s.dir / "scan.json";
  write_file(input, "The cat sat.\nThe cat sat on the mat.\nA dog.\nThe dog sat.\n");
  const std::string scan = "scan --threads 1 --model " + quote(m.string()) + " --input " + quote(input.string());
  const Subst sub = {{"<tmp>", s.dir.string()}, {"<out>", out.string()}};
  SECTION("R60 an input that does not exist") {
    check_refused(cli("scan --model " + quote(m.string()) + " --input " + quote((s.dir / "missing.txt").string()) +
                      " -o " + quote(out.string())),
                  expected("R60", sub), s);
    CHECK(!fs::exists(out));
  }
  SECTION("R61 R62 an incomplete scan: not overwritten, not resumed with other settings") {
    REQUIRE(cli(scan + " --max-tokens 16 --stop-after 1 -o " + quote(out.string())).code == 0);
    const std::string partial = hs::test::read_text(out);
    check_refused(cli(scan + " --max-tokens 16 -o " + quote(out.string())), expected("R61", sub), s, 2);
    check_refused(cli(scan + " --max-tokens 8 --resume -o " + quote(out.string())), expected("R62", sub), s);
    CHECK(hs::test::read_text(out) == partial);
  }
  SECTION("R63 R64 merging without every shard, or an incomplete one") {
    const fs::path shard0 = s.dir / "shard0.json", shard1 = s.dir / "shard1.json";
    REQUIRE(cli(scan + " --shard 0/2 -o " + quote(shard0.string())).code == 0);
    check_refused(cli("merge -o " + quote(out.string()) + " " + quote(shard0.string())), expected("R63", sub), s);
    REQUIRE(cli(scan + " --shard 1/2 --stop-after 1 -o " + quote(shard1.string())).code == 0);
    check_refused(cli("merge -o " + quote(out.string()) + " " + quote(shard0.string()) + " " + quote(shard1.string())),
                  expected("R64", sub), s);
    CHECK(!fs::exists(out));
  }
}

TEST_CASE("refused input: unit dashboards of a data set (R65-R66)", "[refused]") {
  Scratch s;
  const fs::path input = s.dir / "prompts.txt", out = s.dir / "scan.json";
  write_file(input, "The cat sat.\nA dog.\n");
  const std::string scan = "scan --threads 1 --input " + quote(input.string()) + " -o " + quote(out.string());
  SECTION("R65 an unknown unit source") {
    check_refused(cli(scan + " --units neurons"), expected("R65", {}), s);
  }
  SECTION("R66 an SAE that does not fit the model") {
    const fs::path sae = hs::test::source_dir() / "tests/fixtures/sae/standard";
    check_refused(cli(scan + " --units " + quote("sae:" + sae.string())), expected("R66", {{"<sae>", sae.string()}}), s);
  }
  CHECK(!fs::exists(out));
  CHECK(!fs::exists(s.dir / "scan.units"));
}

TEST_CASE("refused input: special files where a file belongs (R56-R57)", "[refused]") {
  Scratch s;
  const fs::path m = s.model();
  const Subst sub = {{"<model>", m.string()}};
  // `timeout`: before the fix these hung (a pipe) or ate memory without end (/dev/zero).
  SECTION("R56 model.safetensors is a named pipe") {
    fs::remove(m / "model.safetensors");
    REQUIRE(::mkfifo((m / "model.safetensors").c_str(), 0644) == 0);
    check_refused(cli("info --model " + quote(m.string()), "", "timeout 60"), expected("R56", sub), s);
  }
  SECTION("R57 config.json is a link to /dev/zero") {
    fs::remove(m / "config.json");
    fs::create_symlink("/dev/zero", m / "config.json");
    check_refused(cli("info --model " + quote(m.string()), "", "timeout 60"), expected("R57", sub), s);
  }
  SECTION("tokenizer.json (the fallback tokenizer file) is a named pipe") {
    fs::remove(m / "vocab.json");
    fs::remove(m / "merges.txt");
    REQUIRE(::mkfifo((m / "tokenizer.json").c_str(), 0644) == 0);
    const Cli r = cli("info --model " + quote(m.string()), "", "timeout 60");
    CHECK(r.code == 1);
    CHECK(r.err == "headscope-cli: error: " + (m / "tokenizer.json").string() +
                       ": is not a regular file; expected a JSON file.\n");
  }
}

TEST_CASE("refused input: architectures (R80-R85)", "[refused][llama]") {
  Scratch s;
  // A llama2.c checkpoint of dim 8 (hidden 16, 1 layer, 2 heads, 1 key/value head, vocab 10,
  // context 4): 28 header bytes and 696 floats.
  auto llama2c = [&](size_t cut) {
    const fs::path m = s.dir / "model";
    fs::create_directories(m);
    const int32_t header[7] = {8, 16, 1, 2, 1, 10, 4};
    std::string bytes(reinterpret_cast<const char*>(header), sizeof header);
    bytes += std::string(696 * 4, '\0');
    write_file(m / "stories.bin", bytes.substr(0, bytes.size() - cut));
    return m;
  };
  SECTION("R84 a llama2.c checkpoint cut short") {
    const fs::path m = llama2c(4);
    write_file(m / "tok.bin", "");
    check_refused(cli("info --model " + quote(m.string())), expected("R84", {{"<model>", m.string()}}), s);
  }
  SECTION("R85 a llama2.c checkpoint without its tokenizer") {
    const fs::path m = llama2c(0);
    check_refused(cli("info --model " + quote((m / "stories.bin").string())), expected("R85", {{"<model>", m.string()}}),
                  s);
  }
  SECTION("R80 an unknown rope_scaling type") {
    const fs::path m = s.model("llama_gqa");
    edit_config(m, [](auto& j) { j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}}; });
    check_refused(cli("info --model " + quote(m.string())), expected("R80", {{"<model>", m.string()}}), s);
  }
  SECTION("R81 layer types that do not give one per layer") {
    const fs::path m = s.model("qwen2_bias");
    edit_config(m, [](auto& j) {
      j["use_sliding_window"] = true;
      j["sliding_window"] = 16;
      j["max_window_layers"] = 0;
    });
    // A window shorter than the context is computed now, not refused.
    CHECK(cli("info --model " + quote(m.string())).code == 0);
    edit_config(m, [](auto& j) { j["layer_types"] = {"full_attention"}; });
    check_refused(cli("info --model " + quote(m.string())), expected("R81", {{"<model>", m.string()}}), s);
  }
  SECTION("R86 an attention type HeadScope does not compute") {
    const fs::path m = s.model("qwen2_bias");
    edit_config(m, [](auto& j) {
      j["use_sliding_window"] = true;
      j["layer_types"] = {"full_attention", "chunked_attention", "full_attention"};
    });
    check_refused(cli("info --model " + quote(m.string())), expected("R86", {{"<model>", m.string()}}), s);
  }
  SECTION("R87 a multimodal Gemma 3 checkpoint") {
    const fs::path m = s.model("qwen2_bias");
    edit_config(m, [](auto& j) {
      j["model_type"] = "gemma3";
      j["architectures"] = {"Gemma3ForConditionalGeneration"};
    });
    check_refused(cli("info --model " + quote(m.string())), expected("R87", {{"<model>", m.string()}}), s);
  }
  SECTION("R82 a missing shard") {
    const fs::path m = s.model("qwen2_bias");
    fs::remove(m / "model-00002-of-00002.safetensors");
    check_refused(cli("info --model " + quote(m.string())), expected("R82", {{"<model>", m.string()}}), s);
  }
  SECTION("R83 a shard outside the folder") {
    const fs::path m = s.model("qwen2_bias");
    nlohmann::json index = nlohmann::json::parse(hs::test::read_text(m / "model.safetensors.index.json"));
    index["weight_map"]["model.norm.weight"] = "../x.safetensors";
    write_file(m / "model.safetensors.index.json", index.dump());
    check_refused(cli("info --model " + quote(m.string())), expected("R83", {{"<model>", m.string()}}), s);
  }
}

// SAE and transcoder folders, through `headscope-cli features` (every command that takes --sae
// reads them with core/features/sae.h). The fixtures fit tests/fixtures/models/llama_gqa.
namespace {

Cli features_with(const Scratch& s, const fs::path& sae, const fs::path& model) {
  return cli("features --model " + quote(model.string()) + " --sae " + quote(sae.string()) + " --tokens 1,2 -o " +
             quote((s.dir / "features.npz").string()));
}

fs::path sae_copy(const Scratch& s, const std::string& fixture) {
  const fs::path d = s.dir / "sae";
  fs::copy(hs::test::source_dir() / "tests/fixtures/sae" / fixture, d, fs::copy_options::recursive);
  return d;
}

void edit_sae_weight(const fs::path& file, const std::string& tensor, size_t index, float value) {
  std::vector<Entry> entries = read_entries(file);
  Entry* e = find_entry(entries, tensor);
  std::memcpy(e->bytes.data() + 4 * index, &value, 4);
  write_file(file, build_safetensors(entries));
}

}  // namespace

TEST_CASE("refused input: SAE and transcoder folders (R120-R129)", "[refused]") {
  Scratch s;
  const fs::path llama = hs::test::fixture_model("llama_gqa");
  SECTION("R120 a folder without an SAE") {
    const fs::path d = s.dir / "sae";
    fs::create_directories(d);
    check_refused(features_with(s, d, llama), expected("R120", {{"<sae>", d.string()}}), s);
  }
  SECTION("R121 an unknown architecture") {
    const fs::path d = sae_copy(s, "standard");
    nlohmann::json j = nlohmann::json::parse(hs::test::read_text(d / "cfg.json"));
    j["architecture"] = "matryoshka_batchtopk";
    write_file(d / "cfg.json", j.dump(2));
    check_refused(features_with(s, d, llama), expected("R121", {{"<sae>", d.string()}}), s);
  }
  SECTION("R122 a tensor of the wrong shape") {
    const fs::path d = sae_copy(s, "standard");
    nlohmann::json j = nlohmann::json::parse(hs::test::read_text(d / "cfg.json"));
    j["d_sae"] = 50;
    write_file(d / "cfg.json", j.dump(2));
    check_refused(features_with(s, d, llama), expected("R122", {{"<sae>", d.string()}}), s);
  }
  SECTION("R123 an SAE trained on another model") {
    check_refused(features_with(s, hs::test::source_dir() / "tests/fixtures/sae/standard",
                                hs::test::source_dir() / "resources/models/headscope-tiny"),
                  expected("R123", {}), s);
  }
  SECTION("R124 the weights are missing") {
    const fs::path d = sae_copy(s, "standard");
    fs::remove(d / "sae_weights.safetensors");
    check_refused(features_with(s, d, llama), expected("R124", {{"<sae>", d.string()}}), s);
  }
  SECTION("R125 a legacy scaling_factor that is not 1") {
    const fs::path d = sae_copy(s, "legacy");
    edit_sae_weight(d / "sae_weights.safetensors", "scaling_factor", 3, 2.0f);
    check_refused(features_with(s, d, llama), expected("R125", {{"<sae>", d.string()}}), s);
  }
  SECTION("R126 an unknown normalize_activations") {
    const fs::path d = sae_copy(s, "standard");
    nlohmann::json j = nlohmann::json::parse(hs::test::read_text(d / "cfg.json"));
    j["normalize_activations"] = "batch_norm";
    write_file(d / "cfg.json", j.dump(2));
    check_refused(features_with(s, d, llama), expected("R126", {{"<sae>", d.string()}}), s);
  }
  SECTION("R127 a config.yaml that is not YAML") {
    const fs::path d = sae_copy(s, "ct_layer_files");
    write_file(d / "config.yaml", "model_kind: transcoder_set\nfeature_input_hook: [ln2.hook_normalized\n");
    check_refused(features_with(s, d, llama), expected("R127", {{"<sae>", d.string()}}), s);
  }
  SECTION("R128 a NaN in a weight") {
    const fs::path d = sae_copy(s, "jumprelu");
    edit_sae_weight(d / "sae_weights.safetensors", "threshold", 7, std::nanf(""));
    check_refused(features_with(s, d, llama), expected("R128", {{"<sae>", d.string()}}), s);
  }
  SECTION("R129 a transcoder set with a layer missing") {
    const fs::path d = sae_copy(s, "ct_layer_files");
    fs::rename(d / "layer_1.safetensors", d / "layer_2.safetensors");
    check_refused(features_with(s, d, llama), expected("R129", {{"<sae>", d.string()}}), s);
  }
}
