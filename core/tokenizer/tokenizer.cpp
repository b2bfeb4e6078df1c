#include "core/tokenizer/tokenizer.h"

#include "core/tokenizer/byte_level.h"

namespace hs {

std::string Tokenizer::display(int32_t id) const { return tokenizer_detail::display_label(token_bytes(id)); }

std::vector<std::string> display_in_context(const Tokenizer& tokenizer, std::span<const int32_t> ids) {
  std::vector<std::string> bytes, labels;
  bytes.reserve(ids.size());
  labels.reserve(ids.size());
  for (int32_t id : ids) {
    bytes.push_back(tokenizer.token_bytes(id));
    labels.push_back(tokenizer.display(id));  // a kind's own spelling (llama2.c's <s>) stays
  }
  return tokenizer_detail::display_labels_in_context(bytes, labels);
}

}  // namespace hs
