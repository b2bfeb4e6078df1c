// Fuzz target: llama2.c's tokenizer .bin (Llama2cTokenizer). Either the file is refused with
// hs::Error, or the tokenizer it gives encodes sample texts to ids inside its vocabulary, and
// decode and display take every id. (No exact round trip: as in run.c, a merge can build a token
// spelled "<0xNN>" from those six characters of text, and it decodes to the byte.)
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/error.h"
#include "core/tokenizer/llama2c_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  try {
    const hs::Llama2cTokenizer tok = hs::Llama2cTokenizer::from_bytes(input, std::nullopt, "fuzz");
    const std::string samples[] = {"Once upon a time, h\xC3\xA9llo  \t\n\n x \xE4\xB8\xAD e\xCC\x81", "a", ""};
    for (const std::string& text : samples) {
      const std::vector<int32_t> ids = tok.encode(text);
      for (int32_t id : ids)
        if (id < 0 || id >= tok.vocab_size()) __builtin_trap();
      std::vector<int32_t> with_bos = {1};
      with_bos.insert(with_bos.end(), ids.begin(), ids.end());
      (void)tok.decode(with_bos);
      for (int32_t id : ids) (void)tok.display(id);
    }
  } catch (const hs::Error&) {
  }
  return 0;
}
