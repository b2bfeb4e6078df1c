#include "core/tokenizer/tokenizer.h"

#include "core/tokenizer/byte_level.h"

namespace hs {

std::string Tokenizer::display(int32_t id) const { return tokenizer_detail::display_label(token_bytes(id)); }

}  // namespace hs
