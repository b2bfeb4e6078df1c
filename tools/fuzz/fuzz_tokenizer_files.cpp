// Fuzz target: the tokenizer files. The input is vocab.json, a NUL byte, then merges.txt (no NUL:
// all of it is vocab.json and merges.txt is empty). Either the pair is refused with hs::Error, or
// the tokenizer it gives encodes text to ids inside its vocabulary, each with a label, and
// losslessly: decode(encode(text)) == text, unless a symbol the vocabulary lacks was encoded as
// the unknown token <|endoftext|> (as Hugging Face does; see core/tokenizer/vocabulary.h).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/error.h"
#include "core/tokenizer/byte_level_bpe.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string_view vocab = input.substr(0, nul);
  const std::string_view merges = nul == std::string_view::npos ? std::string_view() : input.substr(nul + 1);
  try {
    const hs::ByteLevelBpeTokenizer tok = hs::ByteLevelBpeTokenizer::from_strings(vocab, merges, "fuzz");
    // The merges text is as good a sample of what the vocabulary was built for as any.
    const std::string samples[] = {
        "Hello, world! It's 2024 <|endoftext|> h\xC3\xA9llo  \t\n\n x",
        std::string(merges.substr(0, 256)),
    };
    for (const std::string& text : samples) {
      std::vector<int32_t> ids;
      try {
        ids = tok.encode(text);
      } catch (const hs::Error&) {
        continue;  // the merges sample may not be UTF-8
      }
      for (int32_t id : ids)
        if (id < 0 || id >= tok.vocab_size()) __builtin_trap();
      const auto eot = tok.end_of_text_id();
      const bool unknown_used = eot && std::find(ids.begin(), ids.end(), *eot) != ids.end();
      if (tok.decode(ids) != text && !unknown_used) __builtin_trap();
      for (int32_t id : ids) (void)tok.display(id);
    }
    const int32_t n = std::min<int32_t>(tok.vocab_size(), 512);
    for (int32_t id = 0; id < n; ++id) {
      try {
        (void)tok.display(id);
      } catch (const hs::Error&) {
        // ids may have gaps; a gap is refused with a message
      }
    }
  } catch (const hs::Error&) {
  }
  return 0;
}
