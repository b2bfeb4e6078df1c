// Fuzz target: tokenizing arbitrary bytes with a real tokenizer (the built-in model's when
// present, else the f32_prefixed fixture's; $HEADSCOPE_FUZZ_TOKENIZER_DIR picks another folder
// holding vocab.json + merges.txt, e.g. ../shared/gpt2-tokenizer).
//
// Invalid UTF-8 must be refused with hs::Error; valid text must round-trip exactly through
// encode/decode (byte-level BPE loses nothing), every id must be inside the vocabulary and have
// a display label that is valid UTF-8.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "core/error.h"
#include "core/tokenizer/byte_level_bpe.h"
#include "fuzz_common.h"

namespace {

const hs::Tokenizer& tokenizer() {
  static const std::unique_ptr<const hs::Tokenizer> tok = [] {
    namespace fs = std::filesystem;
    fs::path dir;
    if (const char* env = std::getenv("HEADSCOPE_FUZZ_TOKENIZER_DIR"); env && *env) dir = env;
    else if (fs::exists(hs::fuzz::source_dir() / "resources/models/headscope-tiny/vocab.json"))
      dir = hs::fuzz::source_dir() / "resources/models/headscope-tiny";
    else dir = hs::fuzz::fixture_model("f32_prefixed");
    return std::make_unique<const hs::ByteLevelBpeTokenizer>(
        hs::ByteLevelBpeTokenizer::load(dir / "vocab.json", dir / "merges.txt"));
  }();
  return *tok;
}

bool strictly_valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<uint8_t>(s[i]);
    size_t n;
    uint32_t cp;
    if (b < 0x80) { ++i; continue; }
    else if (b >= 0xC2 && b <= 0xDF) n = 2, cp = b & 0x1F;
    else if (b >= 0xE0 && b <= 0xEF) n = 3, cp = b & 0x0F;
    else if (b >= 0xF0 && b <= 0xF4) n = 4, cp = b & 0x07;
    else return false;
    if (i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      const auto c = static_cast<uint8_t>(s[i + k]);
      if ((c & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (c & 0x3F);
    }
    if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF))
      return false;
    i += n;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)tokenizer();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const hs::Tokenizer& tok = tokenizer();
  const bool valid = strictly_valid_utf8(text);
  std::vector<int32_t> ids;
  try {
    ids = tok.encode(text);
  } catch (const hs::Error&) {
    if (valid) __builtin_trap();  // refused valid text
    return 0;
  }
  if (!valid) __builtin_trap();  // accepted invalid UTF-8
  for (int32_t id : ids) {
    if (id < 0 || id >= tok.vocab_size()) __builtin_trap();
    if (!strictly_valid_utf8(tok.display(id))) __builtin_trap();
  }
  // The prompt's labels, a character split across tokens named in each: readable UTF-8 too.
  const std::vector<std::string> labels = hs::display_in_context(tok, ids);
  if (labels.size() != ids.size()) __builtin_trap();
  for (const std::string& label : labels)
    if (!strictly_valid_utf8(label)) __builtin_trap();
  if (tok.decode(ids) != text) __builtin_trap();
  if (text.empty() != ids.empty()) __builtin_trap();
  return 0;
}
