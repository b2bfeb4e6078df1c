// Fuzz target: a tokenizer.json (HfTokenizer). Either the file is refused with hs::Error, or the
// tokenizer it gives encodes sample texts to ids inside its vocabulary, each with a label, and
// decodes them without failing (the decoder may legitimately drop spaces or unknown characters,
// so there is no round-trip check here; the Hugging Face fixture tests check exact ids).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/error.h"
#include "core/tokenizer/hf_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  try {
    const hs::HfTokenizer tok = hs::HfTokenizer::from_parsed(hs::parse_tokenizer_json(input, "fuzz"), "fuzz");
    const std::string samples[] = {
        "Hello, world! It's 2024 <s> <|endoftext|> h\xC3\xA9llo  \t\n\n x \xE4\xB8\xAD\xE6\x96\x87 e\xCC\x81",
        std::string(input.substr(0, 200)),
    };
    for (const std::string& text : samples) {
      std::vector<int32_t> ids;
      try {
        ids = tok.encode(text);
      } catch (const hs::Error&) {
        continue;  // the file's own bytes may not be UTF-8
      }
      for (int32_t id : ids)
        if (id < 0 || id >= tok.vocab_size()) __builtin_trap();
      (void)tok.decode(ids);
      for (int32_t id : ids) (void)tok.display(id);
    }
  } catch (const hs::Error&) {
  }
  return 0;
}
